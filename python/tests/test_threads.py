"""A Problem is usable from any thread (issue 41, 1): the anchor, the data and scoring called
from worker threads give exactly what they give on the main thread, and the metrics too."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import uqbench


def test_a_problem_is_usable_from_worker_threads(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2})
    reps = list(range(6))
    main = [(problem.anchor(k), problem.repetition(k)) for k in reps]
    with ThreadPoolExecutor(max_workers=3) as pool:
        threaded = list(pool.map(lambda k: (problem.anchor(k), problem.repetition(k)), reps))
    for (a, r), (ta, tr) in zip(main, threaded):
        np.testing.assert_array_equal(a.mean, ta.mean)
        np.testing.assert_array_equal(a.std, ta.std)
        np.testing.assert_array_equal(r.y_train, tr.y_train)
    # Scoring from a worker thread: the anchor's own predictions score the same there.
    predictions = [{"mean": a.mean, "std": a.std} for a, _ in main[:3]]
    here = uqbench.score(problem, predictions, "Exact")
    with ThreadPoolExecutor(max_workers=1) as pool:
        there = pool.submit(uqbench.score, problem, predictions, "Exact").result()
    assert here.aggregate.equals(there.aggregate)
