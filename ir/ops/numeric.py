"""The numpy semantics of the tensor ops, in one place: folds use them, backends too.

Values are numpy scalars or arrays (a rank-0 string may be a Python ``str``). Every
function here is what the op computes once its types have been verified.
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from ..budget import check_size
from ..diagnostics import DSLError
from ..types import NUMPY_DTYPES


def legacy_core(shape) -> tuple[int, int]:
    """The index range of ``shape`` without its leading and trailing 1s."""
    lo, hi = 0, len(shape)
    while lo < hi and shape[lo] == 1:
        lo += 1
    while hi > lo and shape[hi - 1] == 1:
        hi -= 1
    return lo, hi


def legacy_align(a, b, axis: int):
    """b reshaped so that numpy broadcasting does Caffe2's ``broadcast=1, axis=k``.

    b's core dims (without outer 1s) go where they start in a, then one 1 per
    remaining dim of a: a (2,3,4), b (3,) at axis 1 -> b as (3,1).
    """
    b = np.asarray(b)
    lo, hi = legacy_core(b.shape)
    start = np.ndim(a) - b.ndim if axis == -1 else axis
    return b.reshape(b.shape[lo:hi] + (1,) * (np.ndim(a) - start - hi))


def binary(fn):
    """The fold of a two-operand op: ``fn`` with numpy or Caffe2's legacy broadcasting."""
    def fold(a, b, broadcast=0, axis=-1):
        return fn(a, legacy_align(a, b, int(axis)) if broadcast else b)
    return fold


def compare(fn):
    """A comparison whose result is always numpy bool (two Python strs give a Python bool)."""
    def compare_values(a, b):
        r = fn(a, b)
        return r if isinstance(r, np.ndarray) else np.bool_(r)
    return compare_values


def int_div(a, b):
    """C++ integer division: truncate toward zero; dividing by zero is an error."""
    if np.any(np.asarray(b) == 0):
        raise DSLError("integer division by zero",
                       hint="make sure the divisor is never 0, or Cast both operands to FLOAT")
    q, r = np.divmod(a, b)
    # divmod floors; where the signs differ and something remains, C++ rounds one up
    return q + ((r != 0) & ((a < 0) != (b < 0)))


def div(a, b):
    """Division by the operands' dtype: truncating for integers, IEEE for floats."""
    if np.asarray(a).dtype.kind in "iu":
        return int_div(a, b)
    return operator.truediv(a, b)


def relu(x):
    return np.maximum(x, 0)  # a Python 0 keeps x's dtype (NEP 50)


def sqr(x):
    return x * x


def scale(x, scale=1.0):
    """x * scale, computed in x's dtype (a float32 tensor stays float32)."""
    return x * np.asarray(scale, np.asarray(x).dtype)[()]


def copy(x):
    """A deep copy: arrays are copied; numpy scalars and strs are immutable already."""
    return x.copy() if isinstance(x, np.ndarray) else x


def variadic(fn):
    """Sum/Max/Min: fold the inputs with ``fn``; a single input gives a copy of it."""
    def fold(*xs):
        return copy(xs[0]) if len(xs) == 1 else functools.reduce(fn, xs)
    return fold


def cast(x, dtype: str):
    """x converted to our dtype name ``dtype`` (C++ static_cast: floats truncate; to str,
    std::to_string's text: "%f" for floats, the integer for ints and bools)."""
    arr = np.asarray(x)
    if dtype == "str" and arr.dtype.kind in "biuf":
        write = (lambda v: "%f" % float(v)) if arr.dtype.kind == "f" else (lambda v: str(int(v)))
        out = np.array([write(v) for v in arr.reshape(-1)], dtype=object).reshape(arr.shape)
    else:
        out = arr.astype(NUMPY_DTYPES[dtype])
    return out[()] if out.ndim == 0 else out


def is_empty(x):
    return np.bool_(np.size(x) == 0)


def has_elements(*xs):
    return np.bool_(any(np.size(x) for x in xs))


def fill_value_of(v):
    """The value a ConstantFill's second input holds (one element, as Caffe2 requires)."""
    if np.size(v) != 1:
        raise DSLError(f"ConstantFill's value input must hold one element, got {np.size(v)}",
                       hint="pass the value as a one-element tensor, e.g. np.array([v])")
    return np.asarray(v).reshape(-1)[0]


def fill_like(x, value, dtype: str, extra=(), as_shape=False):
    """ConstantFill with an input: x's shape (or x's values as the shape) + ``extra``."""
    shape = tuple(int(d) for d in np.asarray(x).reshape(-1)) if as_shape else np.shape(x)
    if any(d < 0 for d in shape):
        raise DSLError(f"ConstantFill: the shape input holds a negative dim: {list(shape)}",
                       hint="compute dims >= 0 for input_as_shape")
    shape = shape + tuple(extra)
    check_size("ConstantFill", shape, NUMPY_DTYPES[dtype])
    out = np.full(shape, value, dtype=NUMPY_DTYPES[dtype])
    return out[()] if out.ndim == 0 else out
