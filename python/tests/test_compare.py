"""`uqbench.compare`: paired comparisons, checked against scipy's paired t-test and a numpy
paired bootstrap on fixed inputs, and equal to `uqbench compare --json` on a run."""

import json

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st

import uqbench

A = np.array([0.51, 0.62, 0.48, 0.70, 0.55, 0.43, 0.66, 0.59, 0.47, 0.52])
B = np.array([0.55, 0.58, 0.52, 0.69, 0.60, 0.41, 0.70, 0.57, 0.50, 0.55])
C = A + 0.2 + 0.01 * np.cos(np.arange(10))


def _rows(**methods):
    return pd.DataFrame(
        [
            {"setting": "", "method": m, "region": "all", "metric": "crps", "repetition": r, "value": v}
            for m, values in methods.items()
            for r, v in enumerate(values)
        ]
    )


def test_paired_statistics_equal_scipy_and_a_numpy_bootstrap():
    frame = uqbench.compare(_rows(A=A, B=B, C=C), seed=3)
    assert list(frame.columns) == [
        "setting", "method_a", "method_b", "metric", "region", "diff", "stderr", "t_low",
        "t_high", "p_value", "p_holm", "boot_share_a_lower", "mdd_unadjusted", "k", "infinite",
    ]
    assert len(frame) == 6  # 3 methods, every ordered pair
    ab = frame.query("method_a == 'A' and method_b == 'B'").iloc[0]
    d = A - B
    ref = st.ttest_rel(A, B)
    se = d.std(ddof=1) / np.sqrt(len(d))
    assert ab["diff"] == pytest.approx(d.mean(), abs=1e-15)
    assert ab["stderr"] == pytest.approx(se, rel=1e-12)
    assert ab["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
    lo, hi = st.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=se)
    assert (ab["t_low"], ab["t_high"]) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    mdd_unadjusted = (st.t.ppf(0.975, 9) + st.t.ppf(0.8, 9)) * se
    assert ab["mdd_unadjusted"] == pytest.approx(mdd_unadjusted, rel=1e-9)
    # Holm over the three unordered pairs, by hand.
    p = {
        pair: frame.query(f"method_a == '{pair[0]}' and method_b == '{pair[1]}'").iloc[0]["p_value"]
        for pair in [("A", "B"), ("A", "C"), ("B", "C")]
    }
    order = sorted(p, key=p.get)
    running = 0.0
    for i, pair in enumerate(order):
        running = max(running, min(1.0, (3 - i) * p[pair]))
        got = frame.query(f"method_a == '{pair[0]}' and method_b == '{pair[1]}'").iloc[0]["p_holm"]
        assert got == pytest.approx(running, rel=1e-12)
    # The paired bootstrap: numpy's with 10⁶ resamples has Monte Carlo sd ≤ 0.0005; ours with
    # 10⁴ has sd √(p(1−p)/10⁴) ≤ 0.0029 at p ≈ 0.9; ties (≈0.4% of resamples at d̄ = 0) can
    # round either way between a sum and a mean, ≤ 0.002: 4 sd + 0.002 = 0.014.
    rng = np.random.default_rng(0)
    means = d[rng.integers(0, len(d), (1_000_000, len(d)))].mean(axis=1)
    numpy_p = (means < 0).mean() + 0.5 * (means == 0).mean()
    assert abs(ab["boot_share_a_lower"] - numpy_p) < 0.014, (ab["boot_share_a_lower"], numpy_p)
    ba = frame.query("method_a == 'B' and method_b == 'A'").iloc[0]
    assert ba["boot_share_a_lower"] == pytest.approx(1 - ab["boot_share_a_lower"], abs=1e-12)
    assert ba["diff"] == -ab["diff"] and ba["p_holm"] == ab["p_holm"]
    # The ranking: A and B not separated, C (0.2 higher, lower is better) last and separated.
    ranking = frame.attrs["rankings"][0]["entries"]
    assert [e["method"] for e in ranking][-1] == "C" and ranking[-1]["rank"] == 3
    assert ranking[-1]["ties"] == []
    assert frame.attrs["direction"] == "lower"


def test_scores_of_one_problem_compare_with_one_anchor(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")
    exact = [problem.anchor(k) for k in range(20)]
    wide = uqbench.score(problem, [{"mean": a.mean, "std": 2 * a.std} for a in exact], method="wide")
    narrow = uqbench.score(problem, [{"mean": a.mean, "std": 0.5 * a.std} for a in exact], method="narrow")
    frame = uqbench.compare([wide, narrow])
    # BLR once, wide, narrow: 6 ordered pairs; the default metric is W2 to the anchor, which
    # BLR lacks (it is the anchor), so 2.
    assert set(frame["metric"]) == {"w2_anchor"} and len(frame) == 2
    row = frame.query("method_a == 'wide'").iloc[0]
    # W2 of N(m, (2s)²) and N(m, (s/2)²) to N(m, s²) are s and s/2: wide is worse by the mean s/2.
    agg_w = wide.aggregate.query("region == 'all' and metric == 'w2_anchor' and method == 'wide'")
    agg_n = narrow.aggregate.query("region == 'all' and metric == 'w2_anchor' and method == 'narrow'")
    assert row["diff"] == pytest.approx(agg_w["value"].iloc[0] - agg_n["value"].iloc[0], rel=1e-12)
    assert row["k"] == 20 and row["p_holm"] < 1e-6
    crps = uqbench.compare([wide, narrow], metric="crps", region="in")
    assert len(crps) == 6 and set(crps["region"]) == {"in"}


def test_an_infinite_kl_is_a_result_that_ranks_worst(root):
    """Issue 59 §4: certain (sd 0) and wrong at one input in 3 of 10 repetitions: KL to the
    anchor is +inf there. The aggregate is inf with its count, summary.json's value a float
    inf, and compare pairs all 10 repetitions (sign test) and ranks the method last."""
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")
    exact = [problem.anchor(k) for k in range(10)]

    def certain(k, a):
        std = np.array(a.std, dtype=float)
        mean = np.array(a.mean, dtype=float)
        if k in (2, 5, 8):
            std[0], mean[0] = 0.0, mean[0] + 1.0
        return {"mean": mean, "std": 0.5 * std}

    wide = uqbench.score(problem, [{"mean": a.mean, "std": 2 * a.std} for a in exact], method="wide")
    bold = uqbench.score(problem, [certain(k, a) for k, a in enumerate(exact)], method="bold")
    agg = bold.aggregate.query("region == 'all' and metric == 'kl_anchor' and method == 'bold'")
    assert agg["value"].iloc[0] == np.inf and agg["infinite"].iloc[0] == 3
    assert np.isnan(agg["stderr"].iloc[0])
    kl = bold.json["settings"][0]["methods"]["bold"]["aggregate"]["all"]["kl_anchor"]
    assert kl["value"] == float("inf") and kl["infinite"] == 3
    # The DataFrame written back is the file's text ("inf" both ways).
    assert "kl_anchor,inf,,,3.0" in bold.aggregate.to_csv(index=False)
    frame = uqbench.compare([wide, bold], metric="kl_anchor")
    row = frame.query("method_a == 'bold'").iloc[0]
    assert row["k"] == 10 and row["infinite"] == 3 and row["diff"] == np.inf
    # bold (half the anchor's sd) has the smaller KL in the other 7: the sign test, 7 of 10
    # against 3 of 10 is not significant (binomtest(3, 10).pvalue).
    assert row["p_value"] == pytest.approx(st.binomtest(3, 10).pvalue, rel=1e-12)
    ranking = frame.attrs["rankings"][0]["entries"]
    assert ranking[-1]["method"] == "bold" and ranking[-1]["mean"] == np.inf


def test_a_run_directory_equals_the_command(cli, tmp_path):
    out = tmp_path / "run"
    cli("run", "experiments/e1.toml", "--profile", "quick", "--methods", "Ens,BD", "--quiet", "--out", str(out))
    frame = uqbench.compare(out, metric="crps", setting="f_main=1")
    expected = cli("compare", str(out), "--metric", "crps", "--setting", "f_main=1", "--json", json_out=True)
    assert len(frame) == len(expected) == 6
    for record, (_, row) in zip(expected, frame.iterrows()):
        for key, value in record.items():
            if isinstance(value, float):
                assert row[key] == value, key
            else:
                assert row[key] == value, key
    by_rep = uqbench.read_run(out).by_repetition
    assert list(by_rep.columns) == ["setting", "method", "region", "metric", "repetition", "value"]
    # The same rows through a DataFrame give the same numbers.
    again = uqbench.compare(by_rep, metric="crps", setting="f_main=1")
    pd.testing.assert_frame_equal(frame, again)


def test_bad_sources_and_options_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"run_or_results\[0\]: a int; valid: a run directory"):
        uqbench.compare([3])
    with pytest.raises(ValueError, match="is not a run directory"):
        uqbench.compare(tmp_path)
    with pytest.raises(ValueError, match="repetitions.csv is missing"):
        uqbench.compare([tmp_path, _rows(A=A, B=B)])
    with pytest.raises(ValueError, match=r"metric \"nope\": not in the rows; valid: crps"):
        uqbench.compare(_rows(A=A, B=B), metric="nope")
    with pytest.raises(ValueError, match="region \"gap\""):
        uqbench.compare(_rows(A=A, B=B), region="gap")
    with pytest.raises(ValueError, match="without columns"):
        uqbench.compare(pd.DataFrame({"method": ["A"]}))
    with pytest.raises(ValueError, match="resamples"):
        uqbench.compare(_rows(A=A, B=B), resamples=0)
