"""Bad input is a ValueError naming the field, the value and what is valid; nothing panics
across the boundary."""

import numpy as np
import pytest

import uqbench


def test_bad_specs_and_settings(root, tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read spec file .*no_such.toml"):
        uqbench.Problem(root / "experiments/no_such.toml")
    with pytest.raises(ValueError, match="width=2.*`width` is not a sweep variable of experiment `e1`; valid: f_main"):
        uqbench.Problem(root / "experiments/e1.toml", setting={"width": 2})
    with pytest.raises(ValueError, match="--profile fast: no such profile"):
        uqbench.Problem(root / "experiments/e1.toml", profile="fast")
    bad = tmp_path / "bad.toml"
    bad.write_text((root / "experiments/e1.toml").read_text().replace("sigma = 0.75", "sigma = -1"))
    with pytest.raises(ValueError, match="sigma"):
        uqbench.Problem(bad)
    with pytest.raises(ValueError, match="repetition: -1; valid: a repetition number"):
        uqbench.Problem(root / "experiments/e1.toml").repetition(-1)


def test_bad_predictions(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 1})
    m = problem.repetition(0).x_test.shape[0]
    good = {"mean": np.zeros(m), "std": np.ones(m)}
    with pytest.raises(ValueError, match=r"predictions\[1\]\['mean'\] at 5: nan; valid: finite"):
        bad = dict(good, mean=np.where(np.arange(m) == 5, np.nan, 0.0))
        uqbench.score(problem, [good, bad])
    with pytest.raises(ValueError, match=rf"predictions\[0\]: {m - 1} means and {m - 1} stds, but the problem has {m} test inputs"):
        uqbench.score(problem, [{"mean": np.zeros(m - 1), "std": np.ones(m - 1)}])
    with pytest.raises(ValueError, match=r"shape \(2, 3\); valid: one value per test input"):
        uqbench.score(problem, [{"mean": np.zeros((2, 3)), "std": np.ones(m)}])
    with pytest.raises(ValueError, match=r"std\[0\] = -1: a standard deviation must be finite and ≥ 0"):
        uqbench.score(problem, [dict(good, std=-np.ones(m))])
    with pytest.raises(ValueError, match=r"predictions\[0\]: unknown key 'variance'; valid: mean, std, cov"):
        uqbench.score(problem, [dict(good, variance=np.ones(m))])
    # An unknown key is named as unknown whatever it holds (a string used to read as a bad array).
    with pytest.raises(ValueError, match=r"predictions\[0\]: unknown key 'kind'; valid: mean"):
        uqbench.score(problem, [dict(good, kind="gaussian")])
    # None is named as None, not as a ragged array.
    with pytest.raises(ValueError, match=r"predictions\[0\]\['mean'\]: None; valid: an array of finite numbers"):
        uqbench.score(problem, [dict(good, mean=None)])
    with pytest.raises(ValueError, match="an empty list"):
        uqbench.score(problem, [])
    with pytest.raises(ValueError, match="levels: 1.5"):
        uqbench.score(problem, [good], levels=[0.9, 1.5])
    with pytest.raises(ValueError, match="that name is the anchor's"):
        uqbench.score(problem, [good], method="BLR")
    with pytest.raises(ValueError, match="a list; valid: a dict"):
        uqbench.score(problem, [[0.0] * m])


def test_probabilities_outside_the_unit_interval(root):
    problem = uqbench.Problem(root / "experiments/tcc.toml", profile="quick")
    m = problem.repetition(0).truth.size
    probs = np.full(m, 0.5)
    probs[3] = 1.2
    with pytest.raises(ValueError, match=r"test input 3: probability 1.2; valid: a number in \[0, 1\]"):
        uqbench.score(problem, [{"probs": probs}])
    with pytest.raises(ValueError, match="valid keys for a classification problem: probs"):
        uqbench.score(problem, [{"mean": np.zeros(m), "std": np.ones(m)}])


def test_bad_metric_inputs():
    with pytest.raises(ValueError, match="y at 1: nan"):
        uqbench.metrics.regression([0, 1], [1, 1], [0, np.nan])
    with pytest.raises(ValueError, match="lengths differ"):
        uqbench.metrics.regression([0, 1], [1, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="at least 2 chains"):
        uqbench.metrics.draws([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(ValueError, match="labels"):
        uqbench.metrics.classification([[0.5, 0.5]], [0.5])
    with pytest.raises(ValueError, match=r"probs\[0\]"):
        uqbench.metrics.classification([[0.5, 0.7]], [0])
    with pytest.raises(uqbench.RunDirectoryError, match="not a complete run directory"):
        uqbench.read_run("/no/such/run")


def test_repetition_numbers_beyond_64_bits_are_a_value_error(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 1})
    with pytest.raises(ValueError, match=r"repetition: 18446744073709551616; valid: .*below 2\*\*64"):
        problem.repetition(2**64)
    with pytest.raises(ValueError, match=r"repetition: -1"):
        problem.anchor(-1)
    assert problem.repetition(2**64 - 1).x_train.shape == problem.repetition(0).x_train.shape


def test_settings_off_the_sweep_are_refused(root):
    with pytest.raises(ValueError, match=r"3.7 is not one of sweep.f_main's values; valid: 1, 2, 3.*off_sweep = true"):
        uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 3.7})


def test_std_and_cov_must_agree(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 1}, profile="quick")
    m = problem.test_size
    cov = np.diag(np.full(m, 0.04))
    # std² = 0.04 = diag(cov) up to float32 rounding: accepted.
    same = {"mean": np.zeros(m), "std": np.full(m, np.float32(0.2)), "cov": cov}
    uqbench.score(problem, [same])
    wider = dict(same, std=np.full(m, 0.3))
    with pytest.raises(ValueError, match=r"std\[0\]² = 0.09.* but cov\[0\]\[0\] = 0.04.*disagree"):
        uqbench.score(problem, [wider])


def test_errors_are_raised_by_kind(root, tmp_path):
    # Bad input and run-directory problems are ValueErrors of their own types; a missing file
    # is an OSError.
    assert issubclass(uqbench.InvalidInputError, ValueError)
    assert issubclass(uqbench.RunDirectoryError, ValueError)
    assert not issubclass(uqbench.InvalidInputError, uqbench.RunDirectoryError)
    with pytest.raises(uqbench.InvalidInputError, match="width=2"):
        uqbench.Problem(root / "experiments/e1.toml", setting={"width": 2})
    with pytest.raises(uqbench.InvalidInputError, match="y at 1: nan"):
        uqbench.metrics.regression([0, 1], [1, 1], [0, np.nan])
    with pytest.raises(OSError):
        uqbench.Problem(tmp_path / "missing.toml")
    with pytest.raises(uqbench.RunDirectoryError, match="is not a run directory"):
        uqbench.compare(str(tmp_path))
    with pytest.raises(uqbench.RunDirectoryError):
        uqbench.read_run(tmp_path)
