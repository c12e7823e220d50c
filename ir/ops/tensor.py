"""Tensor operators: constants, arithmetic, comparisons, logic, casts.

Each op's ``doc`` is its semantics in one line; ``docs/ir.md`` is generated from them.
"""
from __future__ import annotations

import numpy as np

from ..opdef import COMMUTATIVE, ELEMENTWISE, PURE, REQUIRED, declare, type_error
from ..types import ANY, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, TensorType
from .infer import dtype_from_code, elementwise, same_shape, tensors, type_of_array

PURE_EW = {PURE, ELEMENTWISE}


def _const(types, attrs, n):
    return [type_of_array(attrs["value"])]


declare("Const", 0, _const, attrs={"value": REQUIRED}, traits={PURE},
        doc="a constant tensor (what Caffe2's GivenTensor*Fill ops record)")


def _constant_fill(types, attrs, n):
    value, dtype = attrs["value"], attrs["dtype"]
    if dtype is not None:
        dt = dtype_from_code("ConstantFill", dtype)
    elif isinstance(value, (bool, np.bool_)):
        dt = "bool"
    elif isinstance(value, (int, np.integer)):
        dt = "i64"
    else:
        dt = "f32"
    extra = tuple(attrs["extra_shape"] or ())
    if types:
        (t,) = tensors("ConstantFill", types)
        shape = None if t.shape is None else t.shape + extra
        if attrs["input_as_shape"]:
            shape = None
    else:
        shape = tuple(attrs["shape"] or ()) + extra
    return [TensorType(dt, shape)]


declare("ConstantFill", (0, 1), _constant_fill,
        attrs={"value": 0.0, "dtype": None, "shape": None, "extra_shape": None, "input_as_shape": 0},
        traits={PURE},
        doc="a tensor filled with `value`; shape from `shape` or from the input's shape")

declare("Copy", 1, lambda t, a, n: [t[0]], traits={PURE}, doc="y = a deep copy of x")


def _binary(name, allowed=NUMERIC_DTYPES, what="numeric", result=None, commutative=False, doc=""):
    traits = PURE_EW | ({COMMUTATIVE} if commutative else set())
    declare(name, 2,
            lambda t, a, n: elementwise(name, t, allowed, what, result),
            attrs={"broadcast": 0, "axis": -1}, traits=traits, doc=doc)


_binary("Add", commutative=True, doc="c = a + b (numpy broadcasting)")
_binary("Sub", doc="c = a - b (numpy broadcasting)")
_binary("Mul", commutative=True, doc="c = a * b (numpy broadcasting)")
_binary("Div", doc="c = a / b; integer division truncates toward zero, as in C++")
for _name, _sym in [("GE", ">="), ("GT", ">"), ("LE", "<="), ("LT", "<"), ("EQ", "=="), ("NE", "!=")]:
    _binary(_name, allowed=NUMERIC_DTYPES | {"bool", "str"}, what="comparable", result="bool",
            commutative=_name in ("EQ", "NE"), doc=f"c = a {_sym} b elementwise, a bool tensor")
for _name, _sym in [("And", "and"), ("Or", "or"), ("Xor", "xor")]:
    _binary(_name, allowed={"bool"}, what="bool", commutative=True,
            doc=f"c = a {_sym} b elementwise on bool tensors")


def _unary(name, allowed=NUMERIC_DTYPES, what="numeric", doc="", attrs=None):
    declare(name, 1, lambda t, a, n: elementwise(name, t, allowed, what), attrs=attrs or {},
            traits=PURE_EW, doc=doc)


_unary("Not", {"bool"}, "bool", doc="y = not x elementwise")
_unary("Negative", doc="y = -x")
_unary("Abs", doc="y = |x|")
_unary("Sqr", doc="y = x * x")
_unary("Sqrt", FLOAT_DTYPES, "float", doc="y = sqrt(x)")
_unary("Exp", FLOAT_DTYPES, "float", doc="y = exp(x)")
_unary("Log", FLOAT_DTYPES, "float", doc="y = natural log of x")
_unary("Relu", doc="y = max(x, 0)")
_unary("Scale", FLOAT_DTYPES, "float", attrs={"scale": 1.0}, doc="y = x * scale")


def _variadic(name, doc):
    declare(name, (1, None),
            lambda t, a, n: elementwise(name, t, NUMERIC_DTYPES, "numeric", shape_rule=same_shape),
            traits=PURE_EW | {COMMUTATIVE}, doc=doc)


_variadic("Sum", "y = x0 + x1 + ... (inputs of one shape)")
_variadic("Max", "y = elementwise maximum of the inputs (one shape)")
_variadic("Min", "y = elementwise minimum of the inputs (one shape)")


def _cast(types, attrs, n):
    (t,) = tensors("Cast", types)
    to = dtype_from_code("Cast", attrs["to"])
    if t.dtype == "str" and to in NUMERIC_DTYPES | {"bool"}:
        pass  # parsed at run time, as Caffe2 does
    return [TensorType(to, t.shape)]


declare("Cast", 1, _cast, attrs={"to": REQUIRED}, traits=PURE_EW,
        doc="y = x converted to the dtype `to` (a core.DataType code)")


def _is_empty(types, attrs, n):
    tensors("IsEmpty", types)
    return [TensorType("bool")]


declare("IsEmpty", 1, _is_empty, traits={PURE}, doc="y = (x has no elements), a bool scalar")

__all__ = ["INT_DTYPES", "ANY", "type_error"]
