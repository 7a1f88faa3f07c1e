"""uqbench from Python: the problems of uqbench's experiment specs, their exact posterior (the
anchor), the scoring of any method's predictions against it, and every metric.

The numbers come from the same Rust code as the ``uqbench`` command (``uqbench anchor``,
``uqbench score``, ``uqbench metrics``), bit for bit; this module converts them to numpy arrays
and pandas DataFrames. Bad input raises ``ValueError`` naming the field, the value and what is
valid.

Example: a method scored against the anchor on [000]'s E1 at f_main = 2::

    import uqbench
    problem = uqbench.Problem("experiments/e1.toml", setting={"f_main": 2}, profile="quick")
    preds = []
    for k in range(problem.repetitions):
        rep = problem.repetition(k)
        ...  # train on rep.x_train, rep.y_train; predict rep.x_test
        preds.append({"mean": mean, "std": std})
    result = uqbench.score(problem, preds, method="mine")
    print(result.aggregate.query("region == 'in' and metric == 'coverage'"))
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from . import metrics
from ._uqbench import Problem as _NativeProblem

__all__ = ["Problem", "Repetition", "Anchor", "Score", "Run", "score", "read_run", "metrics"]


@dataclass(frozen=True)
class Repetition:
    """One repetition of a problem: what a method trains on and what it is judged by.

    ``x_train`` (n × d) and ``y_train`` (n; labels 0/1 for a classification problem) are the
    training data; ``x_test`` (m × d) the inputs to predict; ``truth`` (m) the noise-free f(x)
    (or P(y = 1 | x) for classification) there; ``region`` (m) each test input's region
    (``in``, ``gap``, ``out``); ``sigma`` (m) the noise sd σ(x) of y at the test inputs;
    ``train_truth`` and ``train_sigma`` the same at the training inputs; ``x_valid``,
    ``y_valid``, ``valid_truth`` and ``valid_sigma`` the validation set where the problem has
    one (else None).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    truth: np.ndarray
    region: np.ndarray
    sigma: np.ndarray
    train_truth: np.ndarray
    train_sigma: np.ndarray
    x_valid: Optional[np.ndarray]
    y_valid: Optional[np.ndarray]
    valid_truth: Optional[np.ndarray]
    valid_sigma: Optional[np.ndarray]


@dataclass(frozen=True)
class Anchor:
    """The exact posterior of f at the test inputs for one repetition (Bayesian linear
    regression with the flat prior on the problem's features).

    ``mean`` and ``std``: the posterior of f(x*) (``std`` is the Student-t scale when ``dof`` is
    not None, i.e. when σ's scale is estimated); ``noise_std``: the noise sd used; ``dof``: the
    t posterior's degrees of freedom or None for a normal one; ``predictive_std``: the sd
    (scale) of a new y; ``gamma_hat``: the posterior mean of γ; ``condition``: the condition
    number of the design; ``cov``: the posterior covariance of f at the test inputs (M × M; the
    t's scale matrix when ``dof`` is not None), for joint predictions.
    """

    mean: np.ndarray
    std: np.ndarray
    noise_std: np.ndarray
    predictive_std: np.ndarray
    dof: Optional[float]
    gamma_hat: np.ndarray
    condition: float
    cov: np.ndarray


def _array(values: Any, dtype: Any = float) -> Optional[np.ndarray]:
    return None if values is None else np.asarray(values, dtype=dtype)


class Problem:
    """One setting of a spec's problem, regression or classification.

    ``spec_path``: an experiment spec (``experiments/e1.toml``); ``setting``: the sweep
    variables' values, ``{"f_main": 2}`` (a variable left out takes its first sweep value);
    ``profile``: a named profile of the spec (``"quick"``), or several separated by commas.
    """

    def __init__(
        self,
        spec_path: "str | os.PathLike[str]",
        setting: Optional[Mapping[str, float]] = None,
        profile: Optional[str] = None,
    ) -> None:
        self._native = _NativeProblem(
            os.fspath(spec_path),
            None if setting is None else {str(k): float(v) for k, v in setting.items()},
            profile,
        )

    @property
    def name(self) -> str:
        """The experiment's name."""
        return self._native.name

    @property
    def setting(self) -> str:
        """The setting's label (``f_main=2``; empty without a sweep)."""
        return self._native.setting

    @property
    def track(self) -> str:
        """``"regression"`` or ``"classification"``."""
        return self._native.track

    @property
    def repetitions(self) -> Optional[int]:
        """The spec's repetitions per setting (``run.repetitions``), None without a [run]."""
        return self._native.repetitions

    @property
    def levels(self) -> List[float]:
        """The spec's interval levels (``run.levels``)."""
        return list(self._native.levels)

    def repetition(self, k: int) -> Repetition:
        """Repetition ``k`` (0-based): its fresh noise (or labels) at the fixed inputs."""
        if int(k) < 0:
            raise ValueError(f"repetition {k}: valid repetitions are 0, 1, 2, …")
        d = self._native.repetition(int(k))
        return Repetition(
            x_train=np.asarray(d["x_train"], dtype=float),
            y_train=np.asarray(d["y_train"], dtype=float),
            x_test=np.asarray(d["x_test"], dtype=float),
            truth=np.asarray(d["truth"], dtype=float),
            region=np.asarray(d["region"], dtype=str),
            sigma=np.asarray(d["sigma"], dtype=float),
            train_truth=np.asarray(d["train_truth"], dtype=float),
            train_sigma=np.asarray(d["train_sigma"], dtype=float),
            x_valid=_array(d["x_valid"]),
            y_valid=_array(d["y_valid"]),
            valid_truth=_array(d["valid_truth"]),
            valid_sigma=_array(d["valid_sigma"]),
        )

    def anchor(self, k: int) -> Optional[Anchor]:
        """The anchor of repetition ``k``, the same numbers as ``uqbench anchor --json``; None
        where the problem has no anchor (a surrogate or classification problem)."""
        if int(k) < 0:
            raise ValueError(f"repetition {k}: valid repetitions are 0, 1, 2, …")
        d = self._native.anchor(int(k))
        if d is None:
            return None
        return Anchor(
            mean=np.asarray(d["mean"], dtype=float),
            std=np.asarray(d["std"], dtype=float),
            noise_std=np.asarray(d["noise_std"], dtype=float),
            predictive_std=np.asarray(d["predictive_std"], dtype=float),
            dof=d["dof"],
            gamma_hat=np.asarray(d["gamma_hat"], dtype=float),
            condition=float(d["condition"]),
            cov=np.asarray(d["cov"], dtype=float),
        )

    def __repr__(self) -> str:
        label = f" {self.setting}" if self.setting else ""
        return f"<uqbench.Problem {self.name}{label} ({self.track})>"


_STRING_COLUMNS = ("setting", "method", "region", "label", "metric")


def _frame(csv_text: str) -> pd.DataFrame:
    """A summary CSV as a DataFrame: text columns as strings (empty, not NaN), every other
    column as floats (NaN where the file has no value)."""
    frame = pd.read_csv(io.StringIO(csv_text), dtype=str, keep_default_na=False)
    for column in frame.columns:
        if column not in _STRING_COLUMNS:
            frame[column] = pd.to_numeric(frame[column].replace("", np.nan))
    return frame


@dataclass(frozen=True)
class Score:
    """A method's predictions scored like a native run: ``summary`` (one row per test input
    and metric) and ``aggregate`` (one row per region and metric) with exactly the columns of
    ``summary.csv`` and ``aggregate.csv``, the anchor (BLR) alongside; ``json`` is
    ``summary.json``."""

    summary: pd.DataFrame
    aggregate: pd.DataFrame
    json: Dict[str, Any]


def _prediction_lists(p: Mapping[str, Any], k: int) -> Dict[str, Any]:
    if not isinstance(p, Mapping):
        raise ValueError(
            f"predictions[{k}]: a {type(p).__name__}; valid: a dict such as "
            '{"mean": array, "std": array}, {"samples": array} or {"probs": array}'
        )
    out: Dict[str, Any] = {}
    for key, value in p.items():
        a = np.asarray(value, dtype=float)
        if key == "samples" and a.ndim != 2:
            raise ValueError(
                f"predictions[{k}]['samples']: shape {a.shape}; valid: test inputs × draws"
            )
        if key in ("mean", "std", "noise_std") and a.ndim != 1:
            raise ValueError(
                f"predictions[{k}]['{key}']: shape {a.shape}; valid: one value per test input"
                + (" (or per draw, with samples)" if key == "noise_std" else "")
            )
        if key == "cov" and (a.ndim != 2 or a.shape[0] != a.shape[1]):
            raise ValueError(
                f"predictions[{k}]['cov']: shape {a.shape}; valid: test inputs × test inputs"
            )
        if key == "probs" and a.ndim not in (1, 2):
            raise ValueError(
                f"predictions[{k}]['probs']: shape {a.shape}; valid: test inputs, or test "
                "inputs × draws"
            )
        bad = np.argwhere(~np.isfinite(a))
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            raise ValueError(
                f"predictions[{k}]['{key}'] at {index if len(index) > 1 else index[0]}: "
                f"{a[tuple(bad[0])]}; valid: finite numbers"
            )
        out[str(key)] = a.tolist()
    return out


def score(
    problem: Problem,
    predictions: Sequence[Mapping[str, Any]],
    method: str = "mine",
    levels: Optional[Sequence[float]] = None,
) -> Score:
    """Scores a method's predictions of ``problem``, exactly as ``uqbench score`` does.

    ``predictions``: one dict per repetition 0..K−1, each ``{"mean": array, "std": array}``
    (optionally ``"noise_std"``: the method's noise sd of y; the problem's σ(x) otherwise),
    ``{"mean": array, "cov": array}`` (a Gaussian joint of f: the covariance at the test
    inputs), or ``{"samples": array}`` (test inputs × draws: intervals from their quantiles;
    a draw is one function, so the draws are also the joint; optionally ``"noise_std"`` per
    draw), or for a
    classification problem ``{"probs": array}`` (P(y = 1 | x) per test input, or test inputs
    × draws). ``levels``: the interval levels (default 0.95, 0.9, 0.8, 0.7).
    """
    if not isinstance(problem, Problem):
        raise ValueError(f"problem: a {type(problem).__name__}; valid: a uqbench.Problem")
    lists = [_prediction_lists(p, k) for k, p in enumerate(predictions)]
    summary_csv, aggregate_csv, summary_json = problem._native.score(
        lists, str(method), None if levels is None else [float(v) for v in levels]
    )
    return Score(
        summary=_frame(summary_csv),
        aggregate=_frame(aggregate_csv),
        json=json.loads(summary_json),
    )


@dataclass(frozen=True)
class Run:
    """A run directory (``uqbench run --out DIR``): its ``summary`` and ``aggregate``
    DataFrames, its resolved spec as text, and its per-repetition predictions through
    :meth:`predictions`."""

    path: str
    summary: pd.DataFrame
    aggregate: pd.DataFrame
    spec: str

    @property
    def settings(self) -> List[str]:
        """The settings' directory names under ``reps/`` (``f_main=2``, ``default``)."""
        return sorted(os.listdir(os.path.join(self.path, "reps")))

    def methods(self, setting: str) -> List[str]:
        """The methods with stored repetitions at ``setting``."""
        return sorted(os.listdir(os.path.join(self.path, "reps", _setting_dir(setting))))

    def predictions(self, setting: str, method: str) -> List[Dict[str, Any]]:
        """Every stored repetition of ``method`` at ``setting`` (a label such as
        ``f_main=2``, or ``""``/``"default"`` without a sweep), in order, with lists of
        numbers as numpy arrays (``mean``, ``std``, …; ``prob`` for classification)."""
        folder = os.path.join(self.path, "reps", _setting_dir(setting), method)
        if not os.path.isdir(folder):
            raise ValueError(
                f"setting {setting!r}, method {method!r}: no stored repetitions in {folder}"
            )
        out = []
        for name in sorted(os.listdir(folder)):
            if name.startswith("rep-") and name.endswith(".json"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    out.append(_arrays(json.load(f)))
        return out


def _setting_dir(setting: str) -> str:
    return setting if setting else "default"


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(
        isinstance(v, (int, float)) or v is None for v in value
    ):
        return np.asarray([np.nan if v is None else v for v in value], dtype=float)
    if isinstance(value, list):
        return [_arrays(v) for v in value]
    return value


def read_run(path: "str | os.PathLike[str]") -> Run:
    """Reads a run directory written by ``uqbench run`` (or ``merge``, ``report``)."""
    path = os.fspath(path)
    files = {}
    for name in ("summary.csv", "aggregate.csv", "spec.resolved.toml"):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            raise ValueError(
                f"{full} is missing: {path} is not a complete run directory (finish it with "
                "`uqbench run --resume`, or merge its shards)"
            )
        with open(full, encoding="utf-8") as f:
            files[name] = f.read()
    return Run(
        path=path,
        summary=_frame(files["summary.csv"]),
        aggregate=_frame(files["aggregate.csv"]),
        spec=files["spec.resolved.toml"],
    )
