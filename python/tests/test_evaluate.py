"""`uqbench.evaluate`: a user's fit_predict over every repetition, checked as it arrives,
in threads, with a progress bar; equal to `uqbench.score` on the same predictions."""

import threading
import time
import traceback

import numpy as np
import pandas as pd
import pytest

import uqbench


def _problem(root):
    return uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")


def fit_predict(rep):
    # Deterministic in the repetition: a degree-4 fit with a constant band.
    coef = np.polyfit(rep.x_train[:, 0], rep.y_train, 4)
    m = rep.x_test.shape[0]
    return {"mean": np.polyval(coef, rep.x_test[:, 0]), "std": np.full(m, 0.25 + 0.01 * rep.index)}


def _same(a, b):
    pd.testing.assert_frame_equal(a.summary, b.summary, check_exact=True)
    pd.testing.assert_frame_equal(a.aggregate, b.aggregate, check_exact=True)
    assert a.json == b.json


@pytest.mark.parametrize("workers", [1, 3])
def test_evaluate_equals_score(root, workers):
    problem = _problem(root)
    expected = uqbench.score(
        problem, [fit_predict(problem.repetition(k)) for k in range(problem.repetitions)], method="poly4"
    )
    got = uqbench.evaluate(problem, fit_predict, workers=workers, progress=False, method="poly4")
    _same(got, expected)


def test_evaluate_takes_a_number_of_repetitions_and_shows_progress(root, capsys):
    problem = _problem(root)
    got = uqbench.evaluate(problem, fit_predict, reps=4, method="poly4")
    _same(got, uqbench.score(problem, [fit_predict(problem.repetition(k)) for k in range(4)], method="poly4"))
    err = capsys.readouterr().err
    assert "1/4 repetitions, ETA" in err
    # The bar covers the scoring, which follows the last repetition.
    assert "4/4 repetitions, scoring" in err and "4/4 repetitions, scored, in" in err


def test_evaluate_names_the_repetition_and_the_field(root):
    problem = _problem(root)
    m = problem.test_size

    def short_at_2(rep):
        out = fit_predict(rep)
        if rep.index == 2:
            out["std"] = out["std"][:-1]
        return out

    with pytest.raises(ValueError, match=rf"fit_predict\(repetition 2\)\['std'\]: shape \({m - 1},\); valid: .*\({m} test inputs\)"):
        uqbench.evaluate(problem, short_at_2, progress=False)

    def nan_at_1(rep):
        out = fit_predict(rep)
        if rep.index == 1:
            out["mean"][7] = np.nan
        return out

    with pytest.raises(ValueError, match=r"fit_predict\(repetition 1\)\['mean'\] at 7: nan"):
        uqbench.evaluate(problem, nan_at_1, workers=2, progress=False)
    with pytest.raises(ValueError, match=r"fit_predict\(repetition 0\): a list; valid: a dict"):
        uqbench.evaluate(problem, lambda rep: [0.0], progress=False)
    with pytest.raises(ValueError, match="workers: 0; valid: an integer ≥ 1"):
        uqbench.evaluate(problem, fit_predict, workers=0)
    with pytest.raises(ValueError, match="reps: -3"):
        uqbench.evaluate(problem, fit_predict, reps=-3)
    with pytest.raises(ValueError, match="fit_predict: a int"):
        uqbench.evaluate(problem, 3)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_fit_predict_stops_the_work_and_names_its_repetition(root, workers):
    problem = _problem(root)
    calls = []
    lock = threading.Lock()

    def broken_at_1(rep):
        with lock:
            calls.append(rep.index)
        if rep.index == 1:
            raise KeyError("no such layer")
        time.sleep(0.05)
        return fit_predict(rep)

    with pytest.raises(uqbench.EvaluateError, match=r"fit_predict failed at repetition 1: KeyError: 'no such layer'") as info:
        uqbench.evaluate(problem, broken_at_1, reps=20, workers=workers, progress=False)
    assert info.value.repetition == 1
    # The original exception and its traceback are kept: the cause, raised inside broken_at_1.
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__cause__.__traceback__.tb_next is not None
    frames = [f.name for f in traceback.extract_tb(info.value.__cause__.__traceback__)]
    assert "broken_at_1" in frames, frames
    # Nothing starts after the failure: with w workers at most w repetitions are in flight, so
    # at most 1 (the failure) + w (in flight around it) + 1 (started before it was seen).
    assert len(calls) <= 2 + workers, calls
