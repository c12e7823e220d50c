"""The numba backend's kernels: each op as a Python expression numba compiles.

``EXPR["Add"](op, args)`` returns the source of ``op``'s value given its operands'
source names, or None when this op (with these types) stays on the interpreter.
Scalars (rank 0) and arrays (rank >= 1) may need different spellings; literals
carry explicit numpy types so loop-carried values never change type.
"""
from __future__ import annotations

import numpy as np

from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, TensorType

NP = {"bool": "np.bool_", "i8": "np.int8", "i16": "np.int16", "i32": "np.int32", "i64": "np.int64",
      "u8": "np.uint8", "u16": "np.uint16", "f16": "np.float16", "f32": "np.float32", "f64": "np.float64"}
EXPR: dict = {}


def kernel(*names):
    def register(f):
        for n in names:
            EXPR[n] = f
        return f
    return register


def tensor(v) -> TensorType | None:
    """The value's tensor type if numba can hold it (known dtype and rank, not strings)."""
    t = v.type
    if isinstance(t, TensorType) and t.dtype in NP and t.shape is not None:
        return t
    return None


def scalar(v) -> bool:
    t = tensor(v)
    return t is not None and t.shape == ()


def literal(value, dtype: str) -> str:
    """A scalar constant as source with its exact type.

    numba types a plain int literal as int64 and a float literal as float64; other
    types are written ``np.float32(0.5)`` and become module constants (see ``Writer``).
    """
    if dtype == "bool":
        return "True" if bool(value) else "False"
    if dtype in FLOAT_DTYPES:
        f = float(value)
        text = "np.nan" if f != f else ("-np.inf" if f < 0 else "np.inf") if f in (float("inf"), float("-inf")) \
            else repr(f)
        return text if dtype == "f64" else f"{NP[dtype]}({text})"
    if dtype == "i64" and abs(int(value)) < 1 << 31:  # larger ones numba may type as uint64
        return f"({int(value)})" if int(value) < 0 else str(int(value))
    return f"{NP[dtype]}({int(value)})"


def _dtype(op):
    t = tensor(op.results[0]) if op.results else None
    return t.dtype if t is not None else None


def _legacy(op) -> bool:
    return bool(op.attrs.get("broadcast")) and op.attrs.get("axis", -1) not in (-1, None)


@kernel("Add", "Sub", "Mul")
def _arith(op, a):
    if _legacy(op):
        return None
    sym = {"Add": "+", "Sub": "-", "Mul": "*"}[op.name]
    return f"({a[0]} {sym} {a[1]})"


@kernel("Div")
def _div(op, a):
    dt = _dtype(op)
    if _legacy(op) or dt is None:
        return None
    if dt in INT_DTYPES:
        return f"_idiv({a[0]}, {a[1]})" if all(scalar(v) for v in op.operands) else None
    return f"({a[0]} / {a[1]})"


@kernel("GE", "GT", "LE", "LT", "EQ", "NE")
def _compare(op, a):
    if _legacy(op) or any(tensor(v) is None for v in op.operands):
        return None
    sym = {"GE": ">=", "GT": ">", "LE": "<=", "LT": "<", "EQ": "==", "NE": "!="}[op.name]
    return f"({a[0]} {sym} {a[1]})"


@kernel("And", "Or", "Xor")
def _logic(op, a):
    if _legacy(op):
        return None
    if all(scalar(v) for v in op.operands):
        return {"And": f"({a[0]} and {a[1]})", "Or": f"({a[0]} or {a[1]})",
                "Xor": f"({a[0]} != {a[1]})"}[op.name]
    return f"np.logical_{op.name.lower()}({a[0]}, {a[1]})"


@kernel("Not")
def _not(op, a):
    return f"(not {a[0]})" if scalar(op.operands[0]) else f"np.logical_not({a[0]})"


@kernel("Negative")
def _neg(op, a):
    return f"(-{a[0]})"


@kernel("Abs")
def _abs(op, a):
    return f"abs({a[0]})" if scalar(op.operands[0]) else f"np.abs({a[0]})"


@kernel("Sqr")
def _sqr(op, a):
    return f"({a[0]} * {a[0]})"


@kernel("Sqrt", "Exp", "Log")
def _math(op, a):
    return f"np.{op.name.lower()}({a[0]})"


@kernel("Relu")
def _relu(op, a):
    zero = literal(0, _dtype(op))
    if scalar(op.operands[0]):
        return f"({a[0]} if {a[0]} > {zero} else {zero})"
    return f"np.maximum({a[0]}, {zero})"


@kernel("Scale")
def _scale(op, a):
    return f"({a[0]} * {literal(op.attrs['scale'], _dtype(op))})"


@kernel("Sum")
def _sum(op, a):
    return "(" + " + ".join(a) + ")" if len(a) > 1 else None


@kernel("Max", "Min")
def _maxmin(op, a):
    if len(a) < 2:
        return None
    if all(scalar(v) for v in op.operands):
        return f"{op.name.lower()}({', '.join(a)})"
    f = "np.maximum" if op.name == "Max" else "np.minimum"
    out = a[0]
    for x in a[1:]:
        out = f"{f}({out}, {x})"
    return out


@kernel("Cast")
def _cast(op, a):
    to = dtype_from_code("Cast", op.attrs["to"])
    src = tensor(op.operands[0])
    if to not in NP or src is None:
        return None
    if scalar(op.operands[0]):
        return f"({a[0]} != 0)" if to == "bool" else f"{NP[to]}({a[0]})"
    return f"{a[0]}.astype({NP[to]})"


@kernel("Copy")
def _copy(op, a):
    return a[0] if scalar(op.operands[0]) else f"{a[0]}.copy()"


@kernel("IsEmpty")
def _is_empty(op, a):
    return "False" if scalar(op.operands[0]) else f"({a[0]}.size == 0)"


def supported(op) -> bool:
    """Whether this op, with these operand and result types, compiles with numba here."""
    if op.name == "Const":
        return tensor(op.result) is not None
    f = EXPR.get(op.name)
    if f is None or any(tensor(v) is None for v in list(op.operands) + list(op.results)):
        return False
    if any(tensor(v).dtype not in NUMERIC_DTYPES | {"bool"} for v in op.operands):
        return False
    return f(op, ["x"] * len(op.operands)) is not None


__all__ = ["EXPR", "NP", "literal", "scalar", "supported", "tensor", "np"]
