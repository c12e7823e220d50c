"""Type-inference helpers shared by the op declarations."""
from __future__ import annotations

import numpy as np

from ..diagnostics import PassError
from ..opdef import type_error
from ..types import (ANY, CAFFE2_DTYPE_CODES, NUMERIC_DTYPES, NUMPY_DTYPES,
                     TensorType, Type, dtype_of_numpy)
from .numeric import legacy_core

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
            type_error(f"{name} input {i} is a {t} handle, not a tensor",
                       f"pass {name} a tensor blob; {t} handles only go to the ops made for them")
    return out


def common_dtype(name: str, ts: list[TensorType]) -> str | None:
    """The one dtype all operands share; differing known dtypes are an error."""
    known = {t.dtype for t in ts if t.dtype is not None}
    if len(known) > 1:
        a, b = sorted(known)[:2]
        type_error(f"{name} needs operands of one type, got {a} and {b}", CAST_HINT)
    return known.pop() if known else None


def require(name: str, dtype: str | None, allowed, what: str) -> None:
    """Operands of a known dtype outside ``allowed`` are an error that says how to convert."""
    if dtype is not None and dtype not in allowed:
        target = {"float": "FLOAT", "bool": "BOOL"}.get(what)
        hint = (f"convert it first with Cast(to=core.DataType.{target})" if target and dtype != "str"
                else f"{name} accepts {', '.join(sorted(allowed))}")
        type_error(f"{name} needs {what} operands, got {dtype}", hint)


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
            type_error(f"{name} cannot broadcast shapes {shapes}",
                       "numpy broadcasting lines shapes up from the right: each pair of dims must "
                       "be equal or 1 (or use broadcast=1, axis=k to line up elsewhere)")
        if fixed:
            out.append(fixed.pop())
        elif None in dims:
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def legacy_broadcast(name: str, ts: list[TensorType], axis: int):
    """Caffe2's old ``broadcast=1`` rule; the result has the first operand's shape.

    b's dims, without its leading and trailing 1s, must equal a's dims starting at
    ``axis`` (``axis=-1``: b lines up with a's last dims). a (2,3,4), b (3,) axis=1 ok.
    """
    a, b = ts
    if a.shape is None or b.shape is None:
        return a.shape
    if len(b.shape) > len(a.shape):
        type_error(f"{name} with broadcast=1 needs the second operand's rank <= the first's, "
                   f"got shapes {list(a.shape)} and {list(b.shape)}",
                   "swap the operands, or drop broadcast=1 to use numpy broadcasting")
    start = len(a.shape) - len(b.shape) if axis == -1 else axis
    lo, hi = legacy_core(b.shape)
    if start + lo < 0 or start + hi > len(a.shape):
        type_error(f"{name}: axis={axis} puts shape {list(b.shape)} outside shape {list(a.shape)}",
                   f"use an axis between 0 and {len(a.shape) - len(b.shape)}")
    for i in range(lo, hi):
        da, db = a.shape[start + i], b.shape[i]
        if da is not None and db is not None and da != db:
            type_error(f"{name} with broadcast=1, axis={axis} cannot line up shape {list(b.shape)} "
                       f"with {list(a.shape)}",
                       "pick the axis where the second operand's dims start in the first's")
    return a.shape


def same_shape(name: str, ts: list[TensorType]):
    """All operands must have one shape (Caffe2's Sum/Max/Min do not broadcast)."""
    shape = None
    for t in ts:
        if t.shape is None:
            continue
        if shape is None:
            shape = t.shape
            continue
        if len(shape) != len(t.shape) or any(a is not None and b is not None and a != b
                                              for a, b in zip(shape, t.shape)):
            type_error(f"{name} needs operands of one shape, got {list(shape)} and {list(t.shape)}",
                       "Sum, Max and Min do not broadcast: use Add or Reshape the operands first")
        shape = tuple(a if a is not None else b for a, b in zip(shape, t.shape))
    return shape


def elementwise(name: str, types, allowed=NUMERIC_DTYPES, what="numeric", result_dtype=None,
                shape_rule=broadcast):
    """One result: the operands' common dtype (or ``result_dtype``) and their combined shape."""
    ts = tensors(name, types)
    dtype = common_dtype(name, ts)
    require(name, dtype, allowed, what)
    shape = shape_rule(name, ts)
    return [TensorType(result_dtype or dtype, shape)]


def binary_shape(attrs: dict):
    """The shape rule of a two-operand op: numpy broadcasting, or Caffe2's legacy one."""
    if attrs.get("broadcast"):
        axis = int(attrs.get("axis", -1))
        return lambda name, ts: legacy_broadcast(name, ts, axis)
    return broadcast


# Caffe2 also accepts a DataType's name as a string (``to="float"``), in any case.
CAFFE2_DTYPE_NAMES = {"FLOAT": 1, "INT32": 2, "BYTE": 3, "STRING": 4, "BOOL": 5, "UINT8": 6,
                      "INT8": 7, "UINT16": 8, "INT16": 9, "INT64": 10, "FLOAT16": 12, "DOUBLE": 13}


def dtype_from_code(name: str, code) -> str:
    """Our dtype for a Caffe2 ``DataType`` code, a DataType name, or one of our dtype names."""
    if isinstance(code, str) and code in NUMPY_DTYPES:
        return code
    if isinstance(code, str) and code.upper() in CAFFE2_DTYPE_NAMES:
        return CAFFE2_DTYPE_CODES[CAFFE2_DTYPE_NAMES[code.upper()]]
    if isinstance(code, (int, np.integer)) and not isinstance(code, bool) \
            and int(code) in CAFFE2_DTYPE_CODES:
        return CAFFE2_DTYPE_CODES[int(code)]
    type_error(f"{name}: unknown data type {code!r}", "use a core.DataType constant such as core.DataType.FLOAT")


def type_of_array(value) -> TensorType:
    """The tensor type of an array (or of anything numpy makes one of)."""
    arr = np.asarray(value)
    key = (arr.dtype, arr.shape)
    t = _ARRAY_TYPES.get(key)
    if t is None:  # (every constant asks: most share a few dtypes and shapes)
        t = _ARRAY_TYPES[key] = TensorType(dtype_of_numpy(arr.dtype), arr.shape)
    return t


_ARRAY_TYPES: dict = {}  # (numpy dtype, shape) -> TensorType



def lowered_away(name: str, where: str):
    """The type rule of an op the lowering expands into other IR (its nets are in its
    arguments: If, While, RecurrentNetwork...): reaching the builder is dslc's bug."""
    def infer(types, attrs, n):
        raise PassError("lower", RuntimeError(f"{name} reached the IR builder: the lowering expands it ({where})"))
    return infer
