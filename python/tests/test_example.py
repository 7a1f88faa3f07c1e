"""The README's Python example, with numpy standing in for PyTorch: a deep-ensemble-like
method (each member a random tanh layer with a least-squares output layer) scored against the
anchor on E1's quick profile."""

import numpy as np

import uqbench


def member_fit(x, y, xt, seed, width=64, ridge=1e-3):
    # Stands in for `torch.nn.Sequential(Linear(1, 64), Tanh(), Linear(64, 1))` trained by
    # Adam: a random hidden layer and the output layer fitted exactly.
    rng = np.random.default_rng(seed)
    w, b = rng.normal(0, 2, (x.shape[1], width)), rng.uniform(-3, 3, width)
    h, ht = np.tanh(x @ w + b), np.tanh(xt @ w + b)
    out = np.linalg.solve(h.T @ h + ridge * np.eye(width), h.T @ y)
    return ht @ out


def test_the_readme_example_runs(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")
    preds = []
    for k in range(problem.repetitions):
        rep = problem.repetition(k)
        outs = [member_fit(rep.x_train, rep.y_train, rep.x_test, 1000 * k + m) for m in range(5)]
        preds.append({"mean": np.mean(outs, 0), "std": np.std(outs, 0, ddof=1)})
    result = uqbench.score(problem, preds, method="numpy-ens")
    a = result.aggregate
    rows = a[(a.region == "in") & a.metric.isin(["coverage", "deviation"])]
    assert set(rows.method) == {"BLR", "numpy-ens"} and len(rows) == 4
    cov = rows.set_index(["method", "metric"])["value"]
    # The anchor covers f at 95% in expectation; over 20 repetitions its region coverage has a
    # standard error of about 0.02 (its stderr column), so 0.95 ± 0.1 is 5 of them.
    assert abs(cov[("BLR", "coverage")] - 0.95) < 0.1
    assert 0.0 <= cov[("numpy-ens", "coverage")] <= 1.0
    assert np.isfinite(cov[("numpy-ens", "deviation")])
    # Error bars over repetitions are in the stderr column, the spread over inputs apart.
    assert {"stderr", "points_sd"} <= set(a.columns)
