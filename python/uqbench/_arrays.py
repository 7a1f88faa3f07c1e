"""Conversion of what users pass (numpy arrays of any float or int dtype and order, lists,
JAX arrays, CPU torch tensors) to the float64 arrays the native module reads, with a
``ValueError`` naming the field, the value and what is valid for everything else (strings,
ragged lists, tensors numpy cannot read, NaN)."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from ._uqbench import InvalidInputError


def _describe(value: Any) -> str:
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__name__
    text = repr(value)
    return f"{name} {text[:60] + '…' if len(text) > 60 else text}"


def _torch_hint(value: Any) -> str:
    if type(value).__module__.split(".")[0] == "torch":
        return " (a torch tensor on a GPU or with requires_grad: pass t.detach().cpu().numpy())"
    return ""


def as_float_array(
    name: str,
    value: Any,
    ndim: Union[int, Tuple[int, ...], None] = None,
    valid: str = "finite numbers",
    finite: bool = True,
) -> np.ndarray:
    """``value`` as a float64 ndarray (no copy when it already is one, in either order), or a
    ``ValueError`` naming ``name``."""
    if value is None:
        raise InvalidInputError(f"{name}: None; valid: an array of {valid}")
    if isinstance(value, (str, bytes)):
        raise InvalidInputError(f"{name}: the string {value!r}; valid: an array of {valid}")
    try:
        raw = np.asarray(value)
    except Exception as e:  # ragged lists, tensors numpy cannot read, objects without __array__
        raise InvalidInputError(
            f"{name}: {_describe(value)} cannot be read as an array ({e}){_torch_hint(value)}; "
            f"valid: an array of {valid}"
        ) from None
    if raw.dtype.kind not in "iuf":
        if raw.dtype == object and raw.ndim == 0:
            what = "not an array"
        elif raw.dtype == object:
            what = "ragged (rows of different lengths)"
        else:
            what = f"of dtype {raw.dtype}"
        raise InvalidInputError(f"{name}: {_describe(value)} is {what}; valid: an array of {valid}")
    a = raw if raw.dtype == np.float64 else raw.astype(np.float64)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and a.ndim not in dims:
        shape = " or ".join(f"{d}-D" for d in dims)
        raise InvalidInputError(f"{name}: shape {a.shape}; valid: a {shape} array of {valid}")
    if finite:
        bad = np.argwhere(~np.isfinite(a))
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            raise InvalidInputError(
                f"{name} at {index if len(index) > 1 else index[0]}: {a[tuple(bad[0])]}; "
                f"valid: {valid}"
            )
    return a


def as_int(
    name: str,
    value: Any,
    minimum: int,
    valid: Optional[str] = None,
    maximum: Optional[int] = None,
) -> int:
    """``value`` as an int in ``minimum..=maximum`` (bools and non-integral numbers rejected)."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok or int(value) < minimum or (maximum is not None and int(value) > maximum):
        raise InvalidInputError(f"{name}: {value!r}; valid: {valid or f'an integer ≥ {minimum}'}")
    return int(value)


def as_levels(name: str, values: Any) -> list:
    """Interval levels: numbers strictly between 0 and 1."""
    a = as_float_array(name, values, 1, "interval levels strictly between 0 and 1")
    bad = [float(v) for v in a if not 0.0 < v < 1.0]
    if bad or a.size == 0:
        raise InvalidInputError(
            f"{name}: {bad[0] if bad else 'none'}; valid: interval levels strictly between 0 and 1"
        )
    return [float(v) for v in a]
