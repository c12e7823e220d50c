"""Type-inference helpers shared by the op declarations."""
from __future__ import annotations

import numpy as np

from ..opdef import type_error
from ..types import (ANY, CAFFE2_DTYPE_CODES, FLOAT_DTYPES, NUMERIC_DTYPES, NUMPY_DTYPES,
                     TensorType, Type, dtype_of_numpy)

CAST_HINT = "convert one operand with Cast(to=core.DataType.<TYPE>) first"


def tensors(name: str, types: list[Type]) -> list[TensorType]:
    """Treat unknown (``any``) operands as tensors of unknown dtype and shape."""
    out = []
    for i, t in enumerate(types):
        if isinstance(t, TensorType):
            out.append(t)
        elif t == ANY:
            out.append(TensorType(None, None))
        else:
            type_error(f"{name} input {i} is a {t} handle, not a tensor")
    return out


def common_dtype(name: str, ts: list[TensorType]) -> str | None:
    """The one dtype all operands share; differing known dtypes are an error."""
    known = {t.dtype for t in ts if t.dtype is not None}
    if len(known) > 1:
        a, b = sorted(known)[:2]
        type_error(f"{name} needs operands of one type, got {a} and {b}", CAST_HINT)
    return known.pop() if known else None


def require(name: str, dtype: str | None, allowed, what: str) -> None:
    if dtype is not None and dtype not in allowed:
        type_error(f"{name} needs {what} operands, got {dtype}")


def broadcast(name: str, ts: list[TensorType]):
    """numpy broadcasting of the operand shapes (None dims and ranks stay unknown)."""
    if any(t.shape is None for t in ts):
        return None
    rank = max(len(t.shape) for t in ts)
    out = []
    for k in range(rank):
        dims = {t.shape[len(t.shape) - rank + k] for t in ts if len(t.shape) - rank + k >= 0}
        fixed = {d for d in dims if d is not None and d != 1}
        if len(fixed) > 1:
            shapes = " and ".join(str(list(t.shape)) for t in ts)
            type_error(f"{name} cannot broadcast shapes {shapes}")
        if fixed:
            out.append(fixed.pop())
        elif None in dims:
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def same_shape(name: str, ts: list[TensorType]):
    """All operands must have one shape (Caffe2's Sum/Max/Min do not broadcast)."""
    shape = None
    for t in ts:
        if t.shape is None:
            continue
        if shape is not None and len(shape) == len(t.shape):
            if any(a is not None and b is not None and a != b for a, b in zip(shape, t.shape)):
                type_error(f"{name} needs operands of one shape, got {list(shape)} and {list(t.shape)}")
        elif shape is not None:
            type_error(f"{name} needs operands of one shape, got {list(shape)} and {list(t.shape)}")
        shape = t.shape
    return shape


def elementwise(name: str, types, allowed=NUMERIC_DTYPES, what="numeric", result_dtype=None,
                shape_rule=broadcast):
    ts = tensors(name, types)
    dtype = common_dtype(name, ts)
    require(name, dtype, allowed, what)
    shape = shape_rule(name, ts)
    return [TensorType(result_dtype or dtype, shape)]


def dtype_from_code(name: str, code) -> str:
    """Our dtype for a Caffe2 ``DataType`` code (or one of our dtype names)."""
    if isinstance(code, str) and code in NUMPY_DTYPES:
        return code
    if isinstance(code, (int, np.integer)) and int(code) in CAFFE2_DTYPE_CODES:
        return CAFFE2_DTYPE_CODES[int(code)]
    type_error(f"{name}: unknown data type {code!r}", "use a core.DataType constant such as core.DataType.FLOAT")


def type_of_array(value) -> TensorType:
    arr = np.asarray(value)
    return TensorType(dtype_of_numpy(arr.dtype), arr.shape)


FLOATS = FLOAT_DTYPES
