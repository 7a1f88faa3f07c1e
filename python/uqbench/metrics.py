"""Every metric of ``uqbench metrics`` as functions on numpy arrays.

Each function builds the JSON input the command reads and returns the dict it prints, computed
by the same Rust code: regression (RMSE, MAE, Gaussian NLL, CRPS in closed form and from
samples, coverage, width and interval score per level, calibration errors), classification
(accuracy, Brier and its decomposition, NLL, ECE, RMSCE, SCE, ACE, TACE, the reliability
diagram, AUC, entropies), log-likelihood tables (WAIC of types 1 and 2, importance-sampling
CV, each with its standard error) and MCMC draws (R̂, bulk and tail ESS, MCSE, as ArviZ
computes them).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from ._arrays import as_float_array, as_int, as_levels
from ._uqbench import InvalidInputError
from ._uqbench import metrics as _metrics

__all__ = ["regression", "classification", "draws", "information", "joint", "joint_classification"]

_LEVELS = (0.95, 0.9, 0.8, 0.7)


def _checked(name: str, values: Any, ndim: int) -> np.ndarray:
    return as_float_array(name, values, ndim)


def _run(payload: Dict[str, Any], **options: Any) -> Dict[str, Any]:
    return _metrics(payload, **options)


def _batches(tau: Sequence[int], kappa: int, batches: int, seed: int) -> Dict[str, Any]:
    if isinstance(tau, (str, bytes)) or not isinstance(tau, Sequence) or not tau:
        raise InvalidInputError(f"tau: {tau!r}; valid: a list of batch sizes ≥ 1, (1, 10)")
    return {
        "tau": [as_int("tau", t, 1, "batch sizes ≥ 1") for t in tau],
        "kappa": as_int("kappa", kappa, 1),
        "batches": as_int("batches", batches, 1),
        "seed": as_int("seed", seed, 0),
    }


def regression(
    mean: Any,
    std: Any,
    y: Any,
    samples: Any = None,
    loglik: Any = None,
    levels: Sequence[float] = _LEVELS,
) -> Dict[str, Any]:
    """Metrics of a normal predictive (``mean``, ``std`` per point) against targets ``y``;
    ``samples`` (points × draws) adds the sample CRPS, ``loglik`` (points × members) WAIC and
    ISCV. Keys: ``rmse``, ``mae``, ``nll``, ``crps``, ``crps_samples``, ``coverage_L``,
    ``width_L``, ``interval_score_L`` per level L, ``calibration_mae``, ``calibration_rmse``,
    ``miscalibration_area``, ``neg_waic1`` … (see the README's "Metrics of any
    predictions")."""
    payload: Dict[str, Any] = {
        "kind": "regression",
        "mean": _checked("mean", mean, 1),
        "std": _checked("std", std, 1),
        "y": _checked("y", y, 1),
    }
    if samples is not None:
        payload["samples"] = _checked("samples", samples, 2)
    if loglik is not None:
        payload["loglik"] = _checked("loglik", loglik, 2)
    return _run(payload, levels=as_levels("levels", levels))


def classification(
    probs: Any,
    labels: Any,
    member_probs: Any = None,
    loglik: Any = None,
    bins: int = 15,
    tace_threshold: float = 0.01,
) -> Dict[str, Any]:
    """Metrics of class probabilities ``probs`` (points × classes) against ``labels``
    (class indices); ``member_probs`` (members × points × classes) adds the predictive and
    expected entropy and the mutual information, ``loglik`` WAIC and ISCV."""
    lab = as_float_array("labels", labels, 1, "class indices 0, 1, …")
    if not np.all(np.equal(np.mod(lab, 1), 0)) or np.any(lab < 0):
        raise InvalidInputError(f"labels: {lab!r}; valid: a 1-D array of class indices 0, 1, …")
    payload: Dict[str, Any] = {
        "kind": "classification",
        "probs": _checked("probs", probs, 2),
        "labels": lab.astype(np.int64),
    }
    if member_probs is not None:
        payload["member_probs"] = _checked("member_probs", member_probs, 3)
    if loglik is not None:
        payload["loglik"] = _checked("loglik", loglik, 2)
    threshold = as_float_array("tace_threshold", tace_threshold, 0, "a number in [0, 1)")
    if not 0.0 <= float(threshold) < 1.0:
        raise InvalidInputError(f"tace_threshold: {tace_threshold!r}; valid: a number in [0, 1)")
    return _run(
        payload,
        bins=as_int("bins", bins, 1, "a number of bins ≥ 1"),
        tace_threshold=float(threshold),
    )


def draws(chains: Any) -> Dict[str, Any]:
    """MCMC diagnostics of one quantity from its draws, chains × draws: ``rhat`` (the larger of
    the rank-normalised split bulk and tail R̂), ``rhat_bulk``, ``rhat_tail``, ``ess_bulk``,
    ``ess_tail`` and ``mcse_mean`` (Vehtari et al. 2021; equal to ArviZ's)."""
    return _run({"kind": "draws", "draws": _checked("chains", chains, 2)})


def information(loglik: Any, y: Optional[Any] = None) -> Dict[str, float]:
    """WAIC (types 1 and 2) and importance-sampling CV of a table of log-likelihoods (points ×
    members or posterior draws), each with its standard error: ``neg_waic1``,
    ``neg_waic1_se``, ``neg_waic2``, ``neg_waic2_se``, ``iscv``, ``iscv_se``."""
    table = _checked("loglik", loglik, 2)
    n = len(table)
    out = regression(np.zeros(n), np.ones(n), np.zeros(n) if y is None else y, loglik=table)
    keys = ("neg_waic1", "neg_waic1_se", "neg_waic2", "neg_waic2_se", "iscv", "iscv_se")
    return {k: out[k] for k in keys}


def joint(
    sigma: Any,
    samples: Any = None,
    mean: Any = None,
    cov: Any = None,
    std: Any = None,
    noise_std: Any = None,
    exact_mean: Any = None,
    exact_cov: Any = None,
    exact_dof: Optional[float] = None,
    truth: Any = None,
    tau: Sequence[int] = (1, 10),
    kappa: int = 2,
    batches: int = 1000,
    seed: int = 0,
) -> Dict[str, Any]:
    """Joint-prediction metrics (spec §10) of a method's predictive of f at M points.

    The method: ``samples`` (M × S draws of f, one function per column; ``noise_std`` per
    draw optional), or ``mean`` with ``cov`` (M × M, a Gaussian joint) or ``std`` (marginals
    only; ``noise_std`` per point optional). ``sigma``: the true noise sd per point (the
    method's too, unless ``noise_std`` says otherwise). References: the exact posterior of f
    (``exact_mean``, ``exact_cov``; ``exact_dof`` for a Student t) and/or the true ``truth``.
    Returns ``joint_kl_T`` (KL from the exact posterior predictive of y at τ = T dyadically
    sampled points, κ anchors) and ``env_kl_T`` (from N(truth, σ²)), each with ``…_se``, and
    ``joint_kind``."""
    payload: Dict[str, Any] = {
        "kind": "joint",
        "sigma": _checked("sigma", sigma, 1),
        **_batches(tau, kappa, batches, seed),
    }
    for name, value, ndim in (
        ("samples", samples, 2),
        ("mean", mean, 1),
        ("cov", cov, 2),
        ("std", std, 1),
        ("noise_std", noise_std, 1),
        ("exact_mean", exact_mean, 1),
        ("exact_cov", exact_cov, 2),
        ("truth", truth, 1),
    ):
        if value is not None:
            payload[name] = _checked(name, value, ndim)
    if exact_dof is not None:
        dof = float(as_float_array("exact_dof", exact_dof, 0, "degrees of freedom > 0"))
        if dof <= 0:
            raise InvalidInputError(f"exact_dof: {exact_dof!r}; valid: degrees of freedom > 0")
        payload["exact_dof"] = dof
    return _run(payload)


def joint_classification(
    probs: Any,
    truth: Any,
    tau: Sequence[int] = (1, 10),
    kappa: int = 2,
    batches: int = 1000,
    seed: int = 0,
) -> Dict[str, Any]:
    """Joint-prediction KL of labels (spec §10): ``probs`` (M × S draws of P(y = 1 | x), one
    function per column) against the true ``truth`` (M). Returns ``env_kl_T`` and ``…_se``:
    exact by enumerating each batch's label counts where the budget allows."""
    return _run(
        {
            "kind": "joint_classification",
            "probs": _checked("probs", probs, 2),
            "truth": _checked("truth", truth, 1),
            **_batches(tau, kappa, batches, seed),
        }
    )
