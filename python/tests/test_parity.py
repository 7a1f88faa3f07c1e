"""The Python package computes what the command computes: the anchor and the data as
`uqbench anchor --json`, scores as `uqbench score`, metrics as `uqbench metrics` (bit for bit:
every comparison is exact equality)."""

import json

import numpy as np
import pandas as pd
import pytest

import uqbench
from uqbench import _frame


@pytest.mark.parametrize(
    "spec, setting, rep",
    [
        ("experiments/e1.toml", {"f_main": 2}, 3),  # normal posterior, σ known
        ("experiments/quartic_gap.toml", None, 1),  # Student-t, σ estimated
        ("experiments/cubic_hetero.toml", None, 0),  # σ(x), a validation set
        ("experiments/conformal_design.toml", None, 2),  # design = "random": own inputs
    ],
)
def test_anchor_and_data_equal_the_cli(root, cli, spec, setting, rep):
    problem = uqbench.Problem(root / spec, setting=setting)
    args = ["anchor", spec, "--rep", str(rep), "--json", "--joint"]
    for k, v in (setting or {}).items():
        args += ["--setting", f"{k}={v}"]
    expected = cli(*args, json_out=True)
    a = problem.anchor(rep)
    for key in ("mean", "std", "noise_std", "predictive_std", "gamma_hat", "cov"):
        np.testing.assert_array_equal(getattr(a, key), np.asarray(expected[key]), err_msg=key)
    assert a.dof == expected["dof"]
    assert a.condition == expected["condition"]
    r = problem.repetition(rep)
    np.testing.assert_array_equal(r.y_train, np.asarray(expected["train_y"]))
    np.testing.assert_array_equal(r.x_train, np.asarray(expected["train_x"]))
    np.testing.assert_array_equal(r.x_test, np.asarray(expected["test_x"]))
    np.testing.assert_array_equal(r.truth, np.asarray(expected["truth"]))
    assert list(r.region) == expected["region"]
    assert r.x_train.shape[1] == r.x_test.shape[1]
    np.testing.assert_array_equal(r.sigma, np.asarray(expected["sigma"]))
    np.testing.assert_array_equal(r.train_sigma, np.asarray(expected["train_sigma"]))
    np.testing.assert_array_equal(r.train_truth, np.asarray(expected["train_truth"]))
    if expected["validation_x"] is None:
        assert r.x_valid is None and r.y_valid is None
    else:
        np.testing.assert_array_equal(r.x_valid, np.asarray(expected["validation_x"]))
        np.testing.assert_array_equal(r.y_valid, np.asarray(expected["validation_y"]))
        np.testing.assert_array_equal(r.valid_sigma, np.asarray(expected["validation_sigma"]))
        np.testing.assert_array_equal(r.valid_truth, np.asarray(expected["validation_truth"]))


def test_a_random_design_gives_every_repetition_its_own_inputs(root):
    problem = uqbench.Problem(root / "experiments/conformal_design.toml")
    fixed = uqbench.Problem(root / "experiments/conformal_design.toml", profile="fixed")
    a, b = problem.repetition(0), problem.repetition(1)
    assert not np.array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_test, b.x_test)
    assert np.all(np.diff(b.x_test[:, 0]) >= 0)  # sorted along x
    np.testing.assert_array_equal(fixed.repetition(0).x_test, fixed.repetition(1).x_test)
    # The anchor of repetition 1 is fitted to its own inputs: its mean is at its test points.
    assert problem.anchor(1).mean.shape == (b.x_test.shape[0],)
    assert not np.array_equal(problem.anchor(1).mean, problem.anchor(0).mean)


def test_classification_data_and_no_anchor(root, cli):
    problem = uqbench.Problem(root / "experiments/tcc.toml", profile="quick")
    assert problem.track == "classification"
    assert problem.anchor(0) is None
    r = problem.repetition(2)
    expected = cli("anchor", "experiments/tcc.toml", "--rep", "2", "--json", json_out=True)
    # The quick profile changes n_train and the grid; the default spec's data through the CLI:
    full = uqbench.Problem(root / "experiments/tcc.toml")
    np.testing.assert_array_equal(full.repetition(2).y_train, np.asarray(expected["train_y"]))
    np.testing.assert_array_equal(full.repetition(2).truth, np.asarray(expected["truth"]))
    assert set(np.unique(r.y_train)) <= {0.0, 1.0}
    assert ((r.truth >= 0) & (r.truth <= 1)).all()


def _write_predictions(folder, preds, kind):
    folder.mkdir(parents=True, exist_ok=True)
    for k, p in enumerate(preds):
        if kind == "csv":
            lines = ["mean,std"] + [f"{float(m)!r},{float(s)!r}" for m, s in zip(p["mean"], p["std"])]
            (folder / f"rep-{k:03d}.csv").write_text("\n".join(lines) + "\n")
        else:
            (folder / f"rep-{k:03d}.json").write_text(
                json.dumps({key: np.asarray(v).tolist() for key, v in p.items()})
            )


def _assert_same_files(cli_out, result):
    for name, frame in (("summary.csv", result.summary), ("aggregate.csv", result.aggregate)):
        text = (cli_out / name).read_text()
        pd.testing.assert_frame_equal(frame, _frame(text), check_exact=True, obj=name)
        # The DataFrame written back is the CLI's text, character for character.
        assert frame.to_csv(index=False, lineterminator="\n") == text, name
    assert result.json == json.loads((cli_out / "summary.json").read_text())


def test_scores_equal_the_cli(root, cli, tmp_path):
    # A perturbed anchor (normal) on E1, a sample-based method on the cubic, and draws of
    # P(y = 1 | x) on the two-class problem: the same predictions through `uqbench score`
    # and through `uqbench.score`.
    rng = np.random.default_rng(7)
    cases = []
    e1 = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 1})
    preds = []
    for k in range(6):
        a = e1.anchor(k)
        preds.append({"mean": a.mean + 0.05 * rng.standard_normal(a.mean.size), "std": 1.2 * a.std})
    cases.append(("experiments/e1.toml", e1, preds, "csv"))
    cubic = uqbench.Problem(root / "experiments/cubic.toml")
    preds = []
    for k in range(4):
        a = cubic.anchor(k)
        draws = a.mean[:, None] + a.std[:, None] * rng.standard_normal((a.mean.size, 30))
        preds.append({"samples": draws})
    cases.append(("experiments/cubic.toml", cubic, preds, "json"))
    tcc = uqbench.Problem(root / "experiments/tcc.toml")
    preds = []
    for k in range(3):
        truth = tcc.repetition(k).truth
        draws = np.clip(truth[:, None] + 0.05 * rng.standard_normal((truth.size, 5)), 0, 1)
        preds.append({"probs": draws})
    cases.append(("experiments/tcc.toml", tcc, preds, "json"))
    for spec, problem, preds, kind in cases:
        folder = tmp_path / problem.name / "preds"
        _write_predictions(folder / (problem.setting or "default"), preds, kind)
        out = tmp_path / problem.name / "out"
        cli("score", spec, "--predictions", str(folder), "--method", "mine", "--out", str(out))
        result = uqbench.score(problem, preds, method="mine")
        _assert_same_files(out, result)
        assert set(result.aggregate["method"]) == ({"BLR", "mine"} if problem.track == "regression" else {"mine"})


def test_metrics_equal_the_cli(cli, tmp_path):
    rng = np.random.default_rng(3)
    mean, std = rng.standard_normal(40), 0.5 + rng.random(40)
    y = mean + std * rng.standard_normal(40)
    samples = mean[:, None] + std[:, None] * rng.standard_normal((40, 25))
    loglik = -0.5 * (rng.standard_normal((40, 8))) ** 2
    probs = rng.dirichlet([1.0, 1.0, 1.0], size=50)
    labels = rng.integers(0, 3, size=50)
    members = rng.dirichlet([1.0, 1.0, 1.0], size=(4, 50))
    chains = np.cumsum(rng.standard_normal((4, 200)), axis=1) * 0.1 + rng.standard_normal((4, 200))
    cases = [
        (
            uqbench.metrics.regression(mean, std, y, samples=samples, loglik=loglik),
            {"kind": "regression", "mean": mean, "std": std, "y": y, "samples": samples, "loglik": loglik},
        ),
        (
            uqbench.metrics.classification(probs, labels, member_probs=members),
            {"kind": "classification", "probs": probs, "labels": labels, "member_probs": members},
        ),
        (uqbench.metrics.draws(chains), {"kind": "draws", "draws": chains}),
    ]
    for k, (ours, payload) in enumerate(cases):
        path = tmp_path / f"in{k}.json"
        path.write_text(json.dumps({key: np.asarray(v).tolist() if key != "kind" else v for key, v in payload.items()}))
        expected = json.loads(cli("metrics", "--input", str(path)).stdout)
        assert ours == expected, payload["kind"]
    info = uqbench.metrics.information(loglik)
    assert set(info) == {"neg_waic1", "neg_waic1_se", "neg_waic2", "neg_waic2_se", "iscv", "iscv_se"}
    assert info["neg_waic1"] == cases[0][0]["neg_waic1"]


def test_read_run(root, cli, tmp_path):
    out = tmp_path / "run"
    cli("run", "experiments/e1.toml", "--profile", "quick", "--methods", "Ens", "--quiet", "--out", str(out))
    run = uqbench.read_run(out)
    pd.testing.assert_frame_equal(run.summary, _frame((out / "summary.csv").read_text()))
    assert run.settings == ["f_main=1", "f_main=2"]
    assert run.methods("f_main=1") == ["BLR", "Ens"]
    reps = run.predictions("f_main=1", "Ens")
    assert len(reps) == 20 and reps[0]["mean"].shape == reps[0]["std"].shape
    blr = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 1}, profile="quick").anchor(0)
    np.testing.assert_array_equal(run.predictions("f_main=1", "BLR")[0]["mean"], blr.mean)


def test_read_run_orders_repetitions_numerically(root, cli, tmp_path):
    out = tmp_path / "run"
    cli("run", "experiments/e1.toml", "--profile", "quick", "--methods", "Ens", "--quiet", "--out", str(out))
    run = uqbench.read_run(out)
    assert run.repetitions("f_main=1", "Ens") == list(range(20))
    # Repetition numbers past 999 (rep-1000.json sorts before rep-999.json as text).
    folder = out / "reps" / "f_main=1" / "Ens"
    for k in (998, 999, 1000, 1001):
        d = json.loads((folder / "rep-000.json").read_text())
        d["repetition"] = k
        (folder / f"rep-{k:03d}.json").write_text(json.dumps(d))
    (folder / "rep-notes.json").write_text("{}")  # not a repetition: ignored
    assert run.repetitions("f_main=1", "Ens")[-4:] == [998, 999, 1000, 1001]
    reps = run.predictions("f_main=1", "Ens")
    assert [r["repetition"] for r in reps] == run.repetitions("f_main=1", "Ens")
