"""numpy at the boundary: arrays out are float64 ndarrays; arrays in may be float32 or float64,
C or Fortran order, lists or anything numpy converts, and give the same numbers; what numpy
cannot read as numbers is a ValueError naming the field."""

import importlib.util

import numpy as np
import pandas as pd
import pytest

import uqbench


@pytest.fixture(scope="module")
def cubic(root):
    return uqbench.Problem(root / "experiments/cubic.toml")


def _draws(problem, k, s=30):
    a = problem.anchor(k)
    rng = np.random.default_rng(k)
    return a.mean[:, None] + a.std[:, None] * rng.standard_normal((a.mean.size, s))


def test_arrays_out_are_float64_ndarrays(cubic, root):
    r = cubic.repetition(1)
    assert r.index == 1
    for name in ("x_train", "y_train", "x_test", "truth", "sigma", "train_truth", "train_sigma"):
        v = getattr(r, name)
        assert isinstance(v, np.ndarray) and v.dtype == np.float64, name
    assert r.x_train.ndim == 2 and r.x_train.shape[1] == 1
    a = cubic.anchor(1)
    assert a.cov.shape == (a.mean.size, a.mean.size) and a.cov.dtype == np.float64
    assert a.cov.flags.c_contiguous
    # The cached fit gives the same posterior on every call, and it is kept: made by the first
    # anchor, reused by the next repetitions (a fit made afresh on every call and dropped
    # would leave no fit kept).
    np.testing.assert_array_equal(cubic.anchor(1).cov, a.cov)
    assert cubic._native.anchor_fitted
    fresh = uqbench.Problem(root / "experiments/cubic.toml")
    assert not fresh._native.anchor_fitted
    fresh.repetition(0)
    assert not fresh._native.anchor_fitted, "the data alone need no fit"
    np.testing.assert_array_equal(fresh.anchor(1).cov, a.cov)
    assert fresh._native.anchor_fitted


def test_float32_fortran_and_lists_score_like_float64(cubic):
    draws = [_draws(cubic, k) for k in range(3)]
    base = uqbench.score(cubic, [{"samples": d} for d in draws])
    fortran = uqbench.score(cubic, [{"samples": np.asfortranarray(d)} for d in draws])
    lists = uqbench.score(cubic, [{"samples": d.tolist()} for d in draws])
    for other in (fortran, lists):
        pd.testing.assert_frame_equal(other.summary, base.summary, check_exact=True)
        assert other.json == base.json
    # float32 is converted once to float64: the same as passing those float64 values.
    d32 = [d.astype(np.float32) for d in draws]
    a = uqbench.score(cubic, [{"samples": d} for d in d32])
    b = uqbench.score(cubic, [{"samples": d.astype(np.float64)} for d in d32])
    pd.testing.assert_frame_equal(a.summary, b.summary, check_exact=True)
    # A Fortran-order, float32 view with strides (every other column) is read where it lies.
    wide = np.asfortranarray(np.repeat(draws[0], 2, axis=1).astype(np.float32))
    c = uqbench.score(cubic, [{"samples": wide[:, ::2]}])
    e = uqbench.score(cubic, [{"samples": draws[0].astype(np.float32).astype(np.float64)}])
    pd.testing.assert_frame_equal(c.summary, e.summary, check_exact=True)


def test_metrics_take_arrays_of_any_layout():
    rng = np.random.default_rng(5)
    mean, std = rng.standard_normal(30), 0.5 + rng.random(30)
    y = mean + std * rng.standard_normal(30)
    samples = mean[:, None] + std[:, None] * rng.standard_normal((30, 12))
    a = uqbench.metrics.regression(mean, std, y, samples=samples)
    b = uqbench.metrics.regression(list(mean), tuple(std), y, samples=np.asfortranarray(samples))
    assert a == b and isinstance(a["rmse"], float)


class _GradTensor:
    """What a torch tensor that requires grad does when numpy asks for its values."""

    __module__ = "torch"

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad.")


def test_what_numpy_cannot_read_names_the_field(cubic):
    m = cubic.test_size
    good = {"mean": np.zeros(m), "std": np.ones(m)}
    cases = [
        (dict(good, mean="0.5"), r"predictions\[0\]\['mean'\]: the string '0.5'; valid: an array of finite numbers"),
        (dict(good, std=[1.0, [1.0, 2.0]]), r"predictions\[0\]\['std'\]: .*cannot be read as an array|is ragged"),
        (dict(good, mean=_GradTensor()), r"predictions\[0\]\['mean'\]: torch._GradTensor .*requires grad.*detach\(\)\.cpu\(\)\.numpy\(\)"),
        (dict(good, mean=np.array(["a"] * m)), r"predictions\[0\]\['mean'\]: .* is of dtype <U1; valid: an array of finite numbers"),
        (dict(good, std=np.ones(m, dtype=complex)), r"of dtype complex128"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            uqbench.score(cubic, [bad])
    with pytest.raises(ValueError, match="predictions: a dict; valid: a list of dicts"):
        uqbench.score(cubic, good)
    with pytest.raises(ValueError, match="repetition: '3'; valid: a repetition number"):
        cubic.repetition("3")
    with pytest.raises(ValueError, match="setting 'f_main': 'two'; valid: a number"):
        uqbench.Problem("experiments/e1.toml", setting={"f_main": "two"})


def test_bad_metric_options_name_themselves():
    probs, labels = [[0.4, 0.6], [0.7, 0.3]], [1, 0]
    with pytest.raises(ValueError, match="bins: -1; valid: a number of bins ≥ 1"):
        uqbench.metrics.classification(probs, labels, bins=-1)
    with pytest.raises(ValueError, match="bins: 2.5"):
        uqbench.metrics.classification(probs, labels, bins=2.5)
    with pytest.raises(ValueError, match="tace_threshold: 1.5"):
        uqbench.metrics.classification(probs, labels, tace_threshold=1.5)
    with pytest.raises(ValueError, match="labels: the string"):
        uqbench.metrics.classification(probs, "10")
    with pytest.raises(ValueError, match="levels: 1.2; valid: interval levels strictly between 0 and 1"):
        uqbench.metrics.regression([0.0], [1.0], [0.0], levels=[0.9, 1.2])
    with pytest.raises(ValueError, match="tau: 0; valid: batch sizes ≥ 1"):
        uqbench.metrics.joint(np.ones(4), mean=np.zeros(4), std=np.ones(4), truth=np.zeros(4), tau=[0])
    with pytest.raises(ValueError, match="batches: -5"):
        uqbench.metrics.joint(np.ones(4), mean=np.zeros(4), std=np.ones(4), truth=np.zeros(4), batches=-5)
    with pytest.raises(ValueError, match=r"chains: shape \(5,\); valid: a 2-D array"):
        uqbench.metrics.draws(np.ones(5))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_real_torch_tensors(cubic):  # pragma: no cover - runs where torch is installed
    import torch

    m = cubic.test_size
    ok = uqbench.score(cubic, [{"mean": torch.zeros(m), "std": torch.ones(m)}])
    assert len(ok.summary) > 0
    with pytest.raises(ValueError, match="requires grad.*detach"):
        uqbench.score(cubic, [{"mean": torch.zeros(m, requires_grad=True), "std": torch.ones(m)}])
