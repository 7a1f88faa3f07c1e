"""uqbench from Python: the problems of uqbench's experiment specs, their exact posterior (the
anchor), the scoring of any method's predictions against it, and every metric.

The numbers come from the same Rust code as the ``uqbench`` command (``uqbench anchor``,
``uqbench score``, ``uqbench metrics``), bit for bit; this module converts them to numpy arrays
and pandas DataFrames. Bad input raises ``InvalidInputError`` (a ``ValueError``) naming the
field, the value and what is valid; a run directory that is not one or not complete raises
``RunDirectoryError`` (a ``ValueError``); a file that cannot be read ``OSError``
(``FileNotFoundError`` when it is missing); a computation that fails on valid input
``RuntimeError``.

Example: a method scored against the anchor on [000]'s E1 at f_main = 2::

    import uqbench
    problem = uqbench.Problem("experiments/e1.toml", setting={"f_main": 2}, profile="quick")

    def fit_predict(rep):
        ...  # train on rep.x_train, rep.y_train; predict rep.x_test
        return {"mean": mean, "std": std}

    result = uqbench.evaluate(problem, fit_predict, method="mine", workers=4)
    print(result.aggregate.query("region == 'in' and metric == 'coverage'"))

Arrays go in as numpy arrays (float32 or float64, C or Fortran order; lists, JAX arrays and
CPU torch tensors are converted) and come out as numpy arrays; pandas is needed only by the
calls that return DataFrames (``score``, ``evaluate``, ``read_run``, ``compare``).

Is method A really better than B, or is that noise? ``uqbench.compare(result)`` (or a run
directory, or several) compares every pair repetition by repetition, exactly as
``uqbench compare`` does.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import metrics
from ._arrays import as_float_array, as_int, as_levels
from ._draws import read_draws
from ._draws import score_input as _draws_score_input
from ._uqbench import InvalidInputError, RunDirectoryError
from ._uqbench import Problem as _NativeProblem
from ._uqbench import __version__
from ._uqbench import compare as _native_compare
from ._uqbench import decide as _native_decide
from ._uqbench import decision_repetitions as _decision_repetitions
from ._uqbench import method_kinds, metric_catalogue

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Problem",
    "Repetition",
    "Anchor",
    "Score",
    "Run",
    "score",
    "evaluate",
    "read_run",
    "read_draws",
    "compare",
    "decide",
    "Decisions",
    "EvaluateError",
    "InvalidInputError",
    "RunDirectoryError",
    "metrics",
    "method_kinds",
    "metric_catalogue",
    "__version__",
]


def _pandas() -> Any:
    """pandas (a dependency), imported when a call returns DataFrames, so that the arrays-only
    calls load without it."""
    import pandas

    return pandas


@dataclass(frozen=True)
class Repetition:
    """One repetition of a problem: what a method trains on and what it is judged by.

    ``x_train`` (n × d) and ``y_train`` (n; labels 0/1 for a classification problem) are the
    training data; ``x_test`` (m × d) the inputs to predict; ``truth`` (m) the noise-free f(x)
    (or P(y = 1 | x) for classification) there; ``region`` (m) each test input's region
    (``in``, ``gap``, ``out``); ``sigma`` (m) the noise sd σ(x) of y at the test inputs;
    ``train_truth`` and ``train_sigma`` the same at the training inputs; ``x_valid``,
    ``y_valid``, ``valid_truth`` and ``valid_sigma`` the validation set where the problem has
    one (else None); ``index`` the repetition's number k (for seeding a method per
    repetition).
    """

    index: int
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
        if setting is not None and not isinstance(setting, Mapping):
            raise InvalidInputError(
                f"setting: {setting!r}; valid: a dict of sweep variables, {{\"f_main\": 2}}"
            )
        values = {}
        for key, value in (setting or {}).items():
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
                raise InvalidInputError(f"setting {key!r}: {value!r}; valid: a number (a sweep value)")
            values[str(key)] = float(value)
        if profile is not None and not isinstance(profile, str):
            raise InvalidInputError(f"profile: {profile!r}; valid: a profile's name, or several joined by commas")
        path = os.path.abspath(os.fspath(spec_path))
        self._args = (path, None if setting is None else dict(values), profile)
        self._native = _NativeProblem(path, None if setting is None else values, profile)
        self._test_size: Optional[int] = None

    def __reduce__(self) -> Any:
        """Pickling and ``copy.deepcopy`` rebuild the problem from its spec (by absolute path),
        setting and profile: a process pool's worker, joblib or a spawn-mode data loader gets
        the same problem (the spec file must be readable there, unchanged)."""
        return (Problem, self._args)

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

    @property
    def test_size(self) -> int:
        """The number of test inputs (every prediction's length)."""
        if self._test_size is None:
            self._test_size = int(self._native.repetition(0)["truth"].shape[0])
        return self._test_size

    def repetition(self, k: int) -> Repetition:
        """Repetition ``k`` (0-based): its fresh noise (or labels) at the fixed inputs."""
        index = _rep_index(k)
        d = self._native.repetition(index)
        d["region"] = np.asarray(d["region"], dtype=str)
        return Repetition(index=index, **d)

    def anchor(self, k: int) -> Optional[Anchor]:
        """The anchor of repetition ``k``, the same numbers as ``uqbench anchor --json``; None
        where the problem has no anchor (a surrogate or classification problem). The fit is
        made once per problem; each repetition's posterior is a solve against it."""
        d = self._native.anchor(_rep_index(k))
        return None if d is None else Anchor(**d)

    def __repr__(self) -> str:
        label = f" {self.setting}" if self.setting else ""
        return f"<uqbench.Problem {self.name}{label} ({self.track})>"


def _rep_index(k: Any) -> int:
    # Repetitions are numbered by unsigned 64-bit integers (they enter every seed).
    return as_int("repetition", k, 0, "a repetition number 0, 1, 2, … below 2**64", 2**64 - 1)


_STRING_COLUMNS = ("setting", "method", "region", "label", "metric", "method_a", "method_b")


def _frame(csv_text: str) -> "pd.DataFrame":
    """A summary CSV as a DataFrame: text columns as strings (empty, not NaN), ``point`` as
    nullable integers, every other column as floats (NaN where the file has no value).
    Written back with ``to_csv(index=False)`` it is the file's text again (the files write
    numbers as Python's repr does)."""
    pd = _pandas()
    frame = pd.read_csv(io.StringIO(csv_text), dtype=str, keep_default_na=False)
    for column in frame.columns:
        if column == "point":
            frame[column] = pd.to_numeric(frame[column].replace("", np.nan)).astype("Int64")
        elif column not in _STRING_COLUMNS:
            frame[column] = pd.to_numeric(frame[column].replace("", np.nan))
    return frame


@dataclass(frozen=True)
class Score:
    """A method's predictions scored like a native run: ``summary`` (one row per test input
    and metric) and ``aggregate`` (one row per region and metric) with exactly the columns of
    ``summary.csv`` and ``aggregate.csv``, the anchor (BLR) alongside; ``json`` is
    ``summary.json``; ``repetitions`` each repetition's value of every region aggregate
    (``repetitions.csv``: what :func:`compare` pairs)."""

    summary: "pd.DataFrame"
    aggregate: "pd.DataFrame"
    json: Dict[str, Any]
    repetitions: "pd.DataFrame"


_KEYS = {
    "mean": ((1,), "one value per test input"),
    "std": ((1,), "one value per test input"),
    "noise_std": ((1,), "one value per test input (or per draw, with samples)"),
    "samples": ((2,), "test inputs × draws"),
    "sample_noise": ((2,), "test inputs × draws, like samples"),
    "cov": ((2,), "test inputs × test inputs"),
    "probs": ((1, 2), "test inputs, or test inputs × draws"),
}


def _prediction_arrays(
    p: Any, k: int, m: Optional[int] = None, label: Optional[str] = None
) -> Dict[str, np.ndarray]:
    """Repetition ``k``'s prediction dict as float64 arrays, checked (with ``m``, the number of
    test inputs, also their lengths); errors name it ``label`` (``predictions[k]``)."""
    label = label or f"predictions[{k}]"
    if not isinstance(p, Mapping):
        raise InvalidInputError(
            f"{label}: a {type(p).__name__}; valid: a dict such as "
            '{"mean": array, "std": array}, {"samples": array} or {"probs": array}'
        )
    out: Dict[str, np.ndarray] = {}
    for key, value in p.items():
        name = f"{label}[{key!r}]"
        if key not in _KEYS:
            raise InvalidInputError(
                f"{label}: unknown key {key!r}; valid: mean, std, cov, noise_std, samples, "
                "sample_noise (regression) or probs (classification)"
            )
        dims, what = _KEYS[key]
        a = as_float_array(name, value, None, "finite numbers")
        if a.ndim not in dims:
            raise InvalidInputError(f"{name}: shape {a.shape}; valid: {what}")
        if key == "cov" and a.shape[0] != a.shape[1]:
            raise InvalidInputError(f"{name}: shape {a.shape}; valid: {what}")
        per_draw = key == "noise_std" and "samples" in p
        if m is not None and not per_draw and a.shape[0] != m:
            raise InvalidInputError(f"{name}: shape {a.shape}; valid: {what} ({m} test inputs)")
        out[str(key)] = a
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
    draw or ``"sample_noise"``, the noise sd of each draw at each input, shaped like
    ``samples``; ``Run.draws`` reads a run's stored draws in this form), or for a
    classification problem ``{"probs": array}`` (P(y = 1 | x) per test input, or test inputs
    × draws). ``levels``: the interval levels (default 0.95, 0.9, 0.8, 0.7).
    """
    if not isinstance(problem, Problem):
        raise InvalidInputError(f"problem: a {type(problem).__name__}; valid: a uqbench.Problem")
    if isinstance(predictions, Mapping) or not isinstance(predictions, Sequence):
        raise InvalidInputError(
            f"predictions: a {type(predictions).__name__}; valid: a list of dicts, one per "
            "repetition 0..K−1"
        )
    if not isinstance(method, str) or not method:
        raise InvalidInputError(f"method: {method!r}; valid: a non-empty name")
    arrays = [_prediction_arrays(p, k) for k, p in enumerate(predictions)]
    _pandas()  # before the work, not after it
    summary_csv, aggregate_csv, summary_json, repetitions_csv = problem._native.score(
        arrays, method, None if levels is None else as_levels("levels", levels)
    )
    return Score(
        summary=_frame(summary_csv),
        aggregate=_frame(aggregate_csv),
        json=summary_json,
        repetitions=_frame(repetitions_csv),
    )


class _Progress:
    """A one-line progress bar with an ETA on stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done = total, enabled, 0
        self.phase = "fitting"
        self.start = time.monotonic()
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        width = 24
        filled = width * self.done // max(self.total, 1)
        eta = ""
        if self.phase == "scoring":
            eta = f", scoring ({_duration(elapsed)} so far)"
        elif self.phase == "done":
            eta = f", scored, in {_duration(elapsed)}"
        elif 0 < self.done < self.total:
            eta = f", ETA {_duration(elapsed / self.done * (self.total - self.done))} + scoring"
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"repetitions{eta}   "
        )
        if self.phase == "done":
            sys.stderr.write("\n")
        sys.stderr.flush()

    def step(self) -> None:
        self.done += 1
        if self.done < self.total:
            self._draw()

    def scoring(self) -> None:
        """Every repetition is in; the scoring (the anchor, the metrics) runs."""
        self.done, self.phase = self.total, "scoring"
        self._draw()

    def finish(self) -> None:
        self.phase = "done"
        self._draw()

    def stop(self) -> None:
        """A failure: end the line so that the traceback starts on its own."""
        if self.enabled and self.phase != "done":
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.phase = "done"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def evaluate(
    problem: Problem,
    fit_predict: Callable[[Repetition], Mapping[str, Any]],
    *,
    reps: Optional[int] = None,
    workers: int = 1,
    progress: bool = True,
    method: str = "mine",
    levels: Optional[Sequence[float]] = None,
) -> Score:
    """Brings your own method: calls ``fit_predict(rep)`` for each repetition ``rep =
    problem.repetition(k)``, k = 0..reps−1 (default: the spec's ``run.repetitions``), and
    scores what it returns exactly as :func:`score` does (the result is equal to
    ``score(problem, [fit_predict(problem.repetition(k)) for k in range(reps)], …)``).

    ``fit_predict`` returns a prediction dict as :func:`score` takes it; each is checked as it
    arrives (a wrong shape or a NaN names the repetition and the field). ``workers`` > 1 runs
    repetitions in that many threads (worthwhile when ``fit_predict`` releases the GIL, as
    numpy, JAX and PyTorch do); ``progress`` draws a bar with an ETA on stderr.
    """
    if not isinstance(problem, Problem):
        raise InvalidInputError(f"problem: a {type(problem).__name__}; valid: a uqbench.Problem")
    if not callable(fit_predict):
        raise InvalidInputError(
            f"fit_predict: a {type(fit_predict).__name__}; valid: a function of a Repetition "
            "returning a prediction dict"
        )
    if reps is None:
        if problem.repetitions is None:
            raise InvalidInputError(
                "reps: None, and the spec has no run.repetitions; valid: the number of "
                "repetitions to run (reps=50)"
            )
        reps = problem.repetitions
    count = as_int("reps", reps, 1, "a number of repetitions ≥ 1 (repetitions 0..reps−1)")
    threads = as_int("workers", workers, 1)
    m = problem.test_size
    bar = _Progress(count, bool(progress))

    def one(k: int) -> Dict[str, np.ndarray]:
        try:
            p = fit_predict(problem.repetition(k))
        except Exception as e:
            raise EvaluateError(k, e) from e
        return _prediction_arrays(p, k, m, f"fit_predict(repetition {k})")

    results: Dict[int, Dict[str, np.ndarray]] = {}
    try:
        if threads == 1:
            for k in range(count):
                results[k] = one(k)
                bar.step()
        else:
            _run_pool(one, count, threads, results, bar)
        bar.scoring()
        out = score(problem, [results[k] for k in range(count)], method=method, levels=levels)
    except BaseException:
        bar.stop()
        raise
    bar.finish()
    return out


def _run_pool(one: Callable[[int], Any], count: int, threads: int, results: Dict[int, Any], bar: "_Progress") -> None:
    """Runs ``one(k)`` for k = 0..count−1 in ``threads`` threads, keeping at most ``threads``
    repetitions in flight, so that the first failure stops the work: nothing is started after
    it (the repetitions already running finish), and it is raised as it came."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending: Dict[Any, int] = {}
        queue = iter(range(count))
        for k in queue:
            pending[pool.submit(one, k)] = k
            if len(pending) == threads:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                for f in pending:
                    f.cancel()
                # The lowest failing repetition, so that the report does not depend on timing
                # among those that failed together.
                raise min(failed, key=lambda f: pending[f]).exception()
            for f in done:
                results[pending.pop(f)] = f.result()
                bar.step()
                nxt = next(queue, None)
                if nxt is not None:
                    pending[pool.submit(one, nxt)] = nxt


class EvaluateError(RuntimeError):
    """``fit_predict`` raised at repetition ``repetition``: the original exception is
    ``__cause__`` (its traceback is printed with this one)."""

    def __init__(self, repetition: int, error: BaseException) -> None:
        super().__init__(
            f"fit_predict failed at repetition {repetition}: {type(error).__name__}: {error}"
        )
        self.repetition = repetition
        self.error = error

    def __reduce__(self) -> Any:
        return (EvaluateError, (self.repetition, self.error))


@dataclass(frozen=True)
class Run:
    """A run directory (``uqbench run --out DIR``): its ``summary`` and ``aggregate``
    DataFrames, its resolved spec as text, and its per-repetition predictions through
    :meth:`predictions`."""

    path: str
    summary: "pd.DataFrame"
    aggregate: "pd.DataFrame"
    spec: str

    @property
    def settings(self) -> List[str]:
        """The settings' directory names under ``reps/`` (``f_main=2``, ``default``)."""
        return sorted(os.listdir(os.path.join(self.path, "reps")))

    def methods(self, setting: str) -> List[str]:
        """The methods with stored repetitions at ``setting``."""
        return sorted(os.listdir(os.path.join(self.path, "reps", _setting_dir(setting))))

    def repetitions(self, setting: str, method: str) -> List[int]:
        """The numbers of the stored repetitions of ``method`` at ``setting``, ascending
        (numerically: 999 before 1000)."""
        return [k for k, _ in self._rep_files(setting, method)]

    def predictions(self, setting: str, method: str) -> List[Dict[str, Any]]:
        """Every stored repetition of ``method`` at ``setting`` (a label such as
        ``f_main=2``, or ``""``/``"default"`` without a sweep), in the order of
        :meth:`repetitions`, with lists of numbers as numpy arrays (``mean``, ``std``, …;
        ``prob`` for classification) and the repetition's number as ``repetition``."""
        out = []
        for _, path in self._rep_files(setting, method):
            with open(path, encoding="utf-8") as f:
                out.append(_arrays(json.load(f)))
        return out

    def draws(self, setting: str, method: str, k: int) -> Dict[str, np.ndarray]:
        """Repetition ``k``'s stored joint predictive of ``method`` at ``setting``
        (``rep-NNN.draws``) as a prediction of :func:`score`: ``{"samples"}`` (test inputs ×
        draws) with the noise sd per draw (``noise_std``) or per draw and input
        (``sample_noise``) where the method has one, or ``{"mean", "cov"}`` for a Gaussian
        joint; what ``uqbench draws`` writes. :func:`read_draws` reads the file as stored."""
        k = _rep_index(k)
        folder = os.path.join(self.path, "reps", _setting_dir(setting), method)
        path = os.path.join(folder, f"rep-{k:03d}.draws")
        if not os.path.isfile(path):
            raise InvalidInputError(
                f"setting {setting!r}, method {method!r}, repetition {k}: no draws file {path} "
                "(a method with marginals only has none, and run.draws = \"none\" writes none)"
            )
        return _draws_score_input(read_draws(path))

    @property
    def by_repetition(self) -> "pd.DataFrame":
        """Each repetition's value of every region aggregate (``repetitions.csv``), what
        :func:`compare` pairs."""
        return _frame(_read_repetitions_csv(self.path))

    def _rep_files(self, setting: str, method: str) -> List[tuple]:
        folder = os.path.join(self.path, "reps", _setting_dir(setting), method)
        if not os.path.isdir(folder):
            raise InvalidInputError(
                f"setting {setting!r}, method {method!r}: no stored repetitions in {folder}"
            )
        found = []
        for name in os.listdir(folder):
            match = _REP_FILE.fullmatch(name)
            if match:
                found.append((int(match.group(1)), os.path.join(folder, name)))
        return sorted(found)


_REP_FILE = re.compile(r"rep-(\d+)\.json")


def _setting_dir(setting: str) -> str:
    return setting if setting else "default"


_INFINITIES = {"inf": np.inf, "-inf": -np.inf}


def _number(v: Any) -> bool:
    """A number of a stored file: a number, ``null`` (NaN: no value) or ``"inf"``/``"-inf"``
    (±∞, a result such as an infinite KL, which JSON has no number for)."""
    return isinstance(v, (int, float)) or v is None or (isinstance(v, str) and v in _INFINITIES)


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, str) and value in _INFINITIES:
        return _INFINITIES[value]
    if isinstance(value, list) and value and all(_number(v) for v in value):
        return np.asarray(
            [np.nan if v is None else _INFINITIES.get(v, v) for v in value], dtype=float
        )
    if isinstance(value, list):
        return [_arrays(v) for v in value]
    return value


def read_run(path: "str | os.PathLike[str]") -> Run:
    """Reads a run directory written by ``uqbench run`` (or ``merge``, ``report``)."""
    path = os.fspath(path)
    _pandas()
    files = {}
    for name in ("summary.csv", "aggregate.csv", "spec.resolved.toml"):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            raise RunDirectoryError(
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


_REPETITION_COLUMNS = ["setting", "method", "region", "metric", "repetition", "value"]
_COMPARE_COLUMNS = [
    "setting", "method_a", "method_b", "metric", "region", "diff", "stderr", "t_low",
    "t_high", "p_value", "p_holm", "boot_share_a_lower", "mdd_unadjusted", "k", "infinite",
]


def _read_repetitions_csv(path: str) -> str:
    full = os.path.join(path, "repetitions.csv")
    if not os.path.isfile(full):
        raise RunDirectoryError(
            f"{full} is missing: a run written before `uqbench compare` existed gets it from "
            f"`uqbench report {path}`"
        )
    with open(full, encoding="utf-8") as f:
        return f.read()


def _repetition_frame(item: Any, where: str) -> "pd.DataFrame":
    """One source of :func:`compare` as a repetitions DataFrame."""
    pd = _pandas()
    if isinstance(item, (str, os.PathLike)):
        return _frame(_read_repetitions_csv(os.fspath(item)))
    if isinstance(item, Score):
        return item.repetitions
    if isinstance(item, Run):
        return item.by_repetition
    if isinstance(item, pd.DataFrame):
        missing = [c for c in _REPETITION_COLUMNS if c not in item.columns]
        if missing:
            raise InvalidInputError(
                f"{where}: a DataFrame without columns {missing}; valid: the columns of "
                f"repetitions.csv ({', '.join(_REPETITION_COLUMNS)})"
            )
        return item[_REPETITION_COLUMNS]
    raise InvalidInputError(
        f"{where}: a {type(item).__name__}; valid: a run directory, a uqbench.Score, a "
        "uqbench.Run, a repetitions DataFrame, or a list of these"
    )


def compare(
    run_or_results: Any,
    metric: Optional[str] = None,
    region: str = "all",
    setting: Optional[str] = None,
    resamples: int = 10000,
    seed: int = 0,
) -> "pd.DataFrame":
    """Every pair of methods compared repetition by repetition, exactly as ``uqbench
    compare`` does: one row per ordered pair and setting, with ``diff`` (the mean over
    repetitions of a − b), ``stderr``, the 95% paired t interval ``t_low``/``t_high``, the
    paired t-test's ``p_value``, ``p_holm`` (Holm over the setting's pairs),
    ``boot_share_a_lower`` (the share of ``resamples`` paired-bootstrap resamples, from
    ``seed``), ``mdd_unadjusted`` (the minimum detectable difference of the unadjusted test at 5% and 80% power) ``k`` (the
    repetitions paired) and ``infinite`` (of those, the ones in which a or b is ±inf, an
    infinite KL or NLL: then ``p_value`` is the exact sign test's, +inf worst, and ``diff`` is
    ±inf).

    ``run_or_results``: a run directory, a :class:`Score` (from :func:`score` or
    :func:`evaluate`), a :class:`Run`, a DataFrame with the columns of ``repetitions.csv``, or
    a list of these (methods scored separately on the same problem; the anchor is taken once).
    Run directories alone are checked to have drawn the same data. ``metric``: default
    ``w2_anchor`` where present, else ``crps``, else ``nll``. The rankings (best first, with
    the methods each is not separated from) are in ``frame.attrs["rankings"]``.
    """
    pd = _pandas()
    items = list(run_or_results) if isinstance(run_or_results, (list, tuple)) else [
        run_or_results
    ]
    if not items:
        raise InvalidInputError("run_or_results: an empty list; valid: at least one source")
    for name, value in (("metric", metric), ("setting", setting)):
        if value is not None and not isinstance(value, str):
            raise InvalidInputError(f"{name}: {value!r}; valid: a name (str) or None")
    if not isinstance(region, str):
        raise InvalidInputError(f"region: {region!r}; valid: all, in, gap or out")
    options = dict(
        metric=metric,
        region=region,
        setting=setting,
        resamples=as_int("resamples", resamples, 1),
        seed=as_int("seed", seed, 0),
    )
    if all(isinstance(i, (str, os.PathLike)) for i in items):
        result = _native_compare(runs=[os.fspath(i) for i in items], **options)
    else:
        frames = [_repetition_frame(i, f"run_or_results[{k}]") for k, i in enumerate(items)]
        rows = pd.concat(frames, ignore_index=True)
        # The anchor is in every Score of one problem, the same each time: keep one copy.
        anchor = rows["method"] == "BLR"
        rows = pd.concat(
            [rows[~anchor], rows[anchor].drop_duplicates(subset=_REPETITION_COLUMNS[:5])],
            ignore_index=True,
        )
        text = rows.to_csv(index=False, float_format=None)
        result = _native_compare(repetitions=text, **options)
    frame = pd.DataFrame(result["pairs"], columns=_COMPARE_COLUMNS)
    for column in _COMPARE_COLUMNS[5:]:
        frame[column] = pd.to_numeric(frame[column])
    frame["k"] = frame["k"].astype(int)
    frame.attrs["rankings"] = result["rankings"]
    frame.attrs["direction"] = result["direction"]
    return frame


@dataclass
class Decisions:
    """The decision track's results (``uqbench.decide``).

    ``rows``: one row per setting, policy, repetition and metric (``regret``,
    ``regret_ratio``, ``optimal_fraction`` on a bandit; ``al_auc``, ``al_auc_ratio``,
    ``al_nll`` in active learning), as ``uqbench decide`` writes ``decisions.csv``.
    ``curves``: per policy and repetition, the value after each step (cumulative regret, or
    the RMSE of the exact posterior's mean given the labels so far).
    """

    rows: "pd.DataFrame"
    curves: "pd.DataFrame"


def decide(
    problem: Problem,
    choose: Optional[Callable[[Dict[str, Any], Dict[str, Any]], int]] = None,
    *,
    name: str = "agent",
    repetitions: Optional[int] = None,
) -> Decisions:
    """Runs ``problem``'s ``[decision]`` section (spec §12) with your agent beside the
    baselines: the exact Thompson sampler (or exact active learner) ``BLR``, ``Greedy``,
    ``Random``, ``Oracle`` (``MaxVar`` in active learning), on the same rewards and initial
    pulls, scored exactly as ``uqbench decide`` scores them (the same numbers).

    ``choose(history, actions) -> index`` picks one action; it is called once per action of
    a step's batch, each time with the data before the step. ``actions``: ``x`` ``[K, d]``,
    ``features`` (the problem's G, ``[K, p]``), ``sigma`` ``[K]``, ``sigma_known``.
    ``history``: ``actions`` (the pulled indices, the shared initial pulls first), ``x`` and
    ``rewards``. Without ``choose`` only the baselines run. ``repetitions`` defaults to the
    section's.
    """
    if not isinstance(problem, Problem):
        raise InvalidInputError(f"problem: a {type(problem).__name__}; valid: a uqbench.Problem")
    if choose is not None and not callable(choose):
        raise InvalidInputError(f"choose: {choose!r}; valid: a callable (history, actions) -> index")
    native = problem._native
    total = _decision_repetitions(native) if repetitions is None else as_int("repetitions", repetitions, 1)
    if total is None:
        raise InvalidInputError(
            f"problem {problem.name}: its spec has no [decision] section; valid: a spec with "
            "[decision] (experiments/bandit.toml, experiments/active.toml)"
        )
    pd = _pandas()
    rows: List[Dict[str, Any]] = []
    curves: List[Dict[str, Any]] = []
    for k in range(total):
        r, c = _native_decide(native, k, choose, name)
        rows.extend(r)
        for p in c:
            curves.extend(
                {"policy": p["policy"], "repetition": k, "step": t + 1, "value": float(v)}
                for t, v in enumerate(p["curve"])
            )
    return Decisions(rows=pd.DataFrame(rows), curves=pd.DataFrame(curves))
