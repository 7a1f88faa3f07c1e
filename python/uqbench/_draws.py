"""Reading a run's draws files (``reps/SETTING/METHOD/rep-NNN.draws``, written by ``uqbench
run``; the format is documented in docs/outputs.md and in the Rust crate ``uqbench_experiment::draws``),
with numpy only: an implementation independent of the Rust reader, checked against it by the
tests."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict

import numpy as np

try:
    from ._uqbench import InvalidInputError
except ImportError:
    # Loaded on its own, outside the package (scripts/reference_agreement.py reads draws with
    # numpy only): the package's type is a ValueError too.
    class InvalidInputError(ValueError):  # type: ignore[no-redef]
        """A draws file that is not one."""

MAGIC = b"UQBDRAW1"


def read_draws(path: "str | os.PathLike[str]") -> Dict[str, Any]:
    """Reads one draws file.

    Returns a dict with the header's ``points`` (test inputs M), ``kind`` (``"draws"`` or
    ``"gaussian"``), ``values`` (``"f"``, or ``"logit"`` for a classification method) and
    ``dof`` (a Student-t joint's ν, else None), and each stored block as a float64 array in its
    stored shape, one row per draw and one column per test input: ``samples`` [S, M],
    ``noise_samples`` [S] (the noise sd of each draw), ``sample_noise`` [S, M] (of each draw at
    each input), ``noise_std`` [M] (the method's own noise sd of y), ``mean`` [M] and ``factor``
    [M, rank] (the covariance of f, or a t's scale matrix, is ``factor @ factor.T``). An 8-bit
    block's largest error per test input, half its quantisation step, is in
    ``half_step[name]`` (on the log scale for ``sample_noise``).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise InvalidInputError(f"{path} is not a draws file: it does not start with {MAGIC!r}")
    (length,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + length].decode("utf-8"))
    at = 12 + length
    out: Dict[str, Any] = {k: header[k] for k in ("points", "kind", "values", "dof")}
    half_steps: Dict[str, np.ndarray] = {}

    def take(n: int) -> bytes:
        nonlocal at
        if at + n > len(data):
            raise InvalidInputError(f"{path} is not a draws file: it is truncated at byte {len(data)}")
        chunk = data[at : at + n]
        at += n
        return chunk

    for block in header["blocks"]:
        rows, cols, enc, name = block["rows"], block["cols"], block["encoding"], block["name"]
        n = rows * cols
        if enc == "f64":
            values = np.frombuffer(take(8 * n), dtype="<f8").astype(float)
        elif enc == "f32":
            values = np.frombuffer(take(4 * n), dtype="<f4").astype(float)
        elif enc in ("i8", "i8log"):
            centre = np.frombuffer(take(4 * cols), dtype="<f4").astype(float)
            step = np.frombuffer(take(4 * cols), dtype="<f4").astype(float)
            codes = np.frombuffer(take(n), dtype="i1").reshape(rows, cols)
            values = centre + codes.astype(float) * step
            if enc == "i8log":
                values = np.exp(values)
            values[codes == -128] = np.nan
            half_steps[name] = 0.5 * step
        else:
            raise InvalidInputError(f"{path}: block {name!r} has an unknown encoding {enc!r}")
        values = values.reshape(rows, cols)
        if name == "factor_t":
            out["factor"] = values.T.copy()
        elif rows == 1:
            out[name] = values[0].copy()
        else:
            out[name] = values
    if at != len(data):
        raise InvalidInputError(f"{path} is not a draws file: {len(data) - at} bytes follow its last block")
    out["half_step"] = half_steps
    return out


def score_input(d: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """A draws file read by :func:`read_draws` as a prediction of :func:`uqbench.score`
    (test inputs × draws), as ``uqbench draws`` writes it."""
    if d["kind"] == "draws":
        samples = d["samples"]
        if d["values"] == "logit":
            return {"probs": (1.0 / (1.0 + np.exp(-samples))).T}
        out = {"samples": samples.T.copy()}
        if "noise_samples" in d:
            out["noise_std"] = d["noise_samples"]
        elif "sample_noise" in d:
            out["sample_noise"] = d["sample_noise"].T.copy()
        elif "noise_std" in d:
            out["sample_noise"] = np.repeat(d["noise_std"][:, None], samples.shape[0], axis=1)
        return out
    if d["dof"] is not None:
        raise InvalidInputError(
            f"a Student-t joint (ν = {d['dof']}) has no input form in uqbench.score, which "
            "scores Gaussian joints"
        )
    out = {"mean": d["mean"], "cov": d["factor"] @ d["factor"].T}
    if "noise_std" in d:
        out["noise_std"] = d["noise_std"]
    return out
