"""A Problem pickles and deep-copies (rebuilt from its spec, setting and profile), so that it
crosses into a process pool, joblib or a spawn-mode data loader."""

import copy
import pickle
from concurrent.futures import ProcessPoolExecutor
import multiprocessing

import numpy as np

import uqbench


def _problem(root):
    return uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")


def _same_problem(a, b):
    assert (a.name, a.setting, a.repetitions, a.levels) == (b.name, b.setting, b.repetitions, b.levels)
    ra, rb = a.repetition(3), b.repetition(3)
    np.testing.assert_array_equal(ra.y_train, rb.y_train)
    np.testing.assert_array_equal(ra.x_test, rb.x_test)
    np.testing.assert_array_equal(a.anchor(3).cov, b.anchor(3).cov)


def test_a_problem_pickles_and_deep_copies(root):
    problem = _problem(root)
    _same_problem(problem, pickle.loads(pickle.dumps(problem)))
    _same_problem(problem, copy.deepcopy(problem))
    # A problem without a setting (its first sweep value) and without a profile, too.
    plain = uqbench.Problem(root / "experiments/e1.toml")
    _same_problem(plain, pickle.loads(pickle.dumps(plain)))


def _train_size(problem):
    return problem.repetition(1).y_train.size


def test_a_problem_crosses_into_a_spawned_process(root):
    problem = _problem(root)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_train_size, problem).result(timeout=120) == _train_size(problem)
