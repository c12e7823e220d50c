"""Tensor operators: constants, arithmetic, comparisons, logic, casts.

Each op's ``doc`` is its semantics in one line; ``docs/ir.md`` is generated from them.
"""
from __future__ import annotations

import operator

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import COMMUTATIVE, ELEMENTWISE, PURE, REQUIRED, SIZED_BY_VALUES, declare, type_error
from ..types import FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, TensorType
from . import failing
from . import numeric as num
from .infer import (binary_shape, dtype_from_code, elementwise, same_shape, tensors,
                    type_of_array)

PURE_EW = {PURE, ELEMENTWISE}


def _const(types, attrs, n):
    return [type_of_array(attrs["value"])]


declare("Const", 0, _const, attrs={"value": REQUIRED}, traits={PURE},
        doc="a constant tensor (what Caffe2's GivenTensor*Fill ops record)")


def fill_dtype(attrs) -> str:
    """ConstantFill's dtype: the ``dtype`` code, else Caffe2's guess from ``value``.

    Caffe2 stores a Python bool or int argument as an int, so without ``dtype`` an int
    or bool value makes an int64 tensor, and a float value (or none) a float32 one.
    """
    value, code = attrs["value"], attrs["dtype"]
    if code is not None:
        dt = dtype_from_code("ConstantFill", code)
    elif value is None or isinstance(value, (float, np.floating)):
        dt = "f32"
    elif isinstance(value, (bool, int, np.integer, np.bool_)):
        dt = "i64"
    else:
        type_error(f"ConstantFill cannot guess a dtype for value {value!r}",
                   "pass dtype=core.DataType.STRING (or another DataType) with it")
    if value is not None:
        _check_fill_value(value, dt)
    return dt


def fill_value(attrs, dt: str):
    """The value ConstantFill fills with: ``value``, else the dtype's zero ("" for strings)."""
    if attrs["value"] is not None:
        return attrs["value"]
    return "" if dt == "str" else 0


def _check_fill_value(value, dt: str) -> None:
    """Reject values Caffe2 would not read as ``dt`` (a float for an int tensor...)."""
    is_str = isinstance(value, (str, bytes))
    if (dt == "str") != is_str:
        type_error(f"ConstantFill cannot fill a {dt} tensor with {value!r}",
                   "make the value and dtype agree (strings need dtype=core.DataType.STRING)")
    if dt in INT_DTYPES | {"bool"} and isinstance(value, (float, np.floating)) \
            and not float(value).is_integer():
        type_error(f"ConstantFill cannot fill a {dt} tensor with the fraction {value!r}",
                   "pass an integer value, or a float dtype such as core.DataType.FLOAT")


def _dims(attr: str, dims) -> tuple:
    """A shape argument as a tuple of ints >= 0."""
    if dims is None:
        return ()
    if not isinstance(dims, (list, tuple)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        type_error(f"ConstantFill {attr} must be a list of dims >= 0, got {dims!r}",
                   f"pass {attr}=[2, 3] for a 2x3 tensor")
    return tuple(int(d) for d in dims)


def _constant_fill(types, attrs, n):
    dt = fill_dtype(attrs)
    extra = _dims("extra_shape", attrs["extra_shape"])
    if not types:  # as in Caffe2, the input-only arguments need an input
        if attrs["input_as_shape"]:
            type_error("ConstantFill with input_as_shape=1 needs an input holding the shape",
                       "pass the shape tensor as its input, or use shape=[...] instead")
        if extra:
            type_error("ConstantFill extra_shape needs an input (it extends the input's shape)",
                       "without an input, put every dim in shape=[...]")
        return [TensorType(dt, _dims("shape", attrs["shape"]))]
    if attrs["shape"] is not None:
        type_error("ConstantFill takes its shape from the `shape` argument or from an input, not both",
                   "drop the input or the shape argument")
    t, *value = tensors("ConstantFill", types)
    if value and value[0].dtype is not None and dt is not None and value[0].dtype != dt:
        type_error(f"ConstantFill's value input is {value[0].dtype}, not the {dt} it fills with",
                   "pass dtype= the value tensor's type (Caffe2 reads the value as that type)")
    if attrs["input_as_shape"]:
        dims = _shape_from_values(t)
        return [TensorType(dt, None if dims is None else dims + extra)]
    return [TensorType(dt, None if t.shape is None else t.shape + extra)]


def _shape_from_values(t: TensorType):
    """The (unknown) dims of a shape given as a 1-D integer tensor's values."""
    if t.dtype is not None and t.dtype not in INT_DTYPES:
        type_error(f"ConstantFill input_as_shape needs an integer shape tensor, got {t}",
                   "pass the dims as ints, e.g. ops.Const([2, 3])")
    if t.shape is None or len(t.shape) != 1:
        if t.shape is not None:
            type_error(f"ConstantFill input_as_shape needs a 1-D shape tensor, got {t}",
                       "pass the dims as a list, e.g. ops.Const([2, 3])")
        return None
    return None if t.shape[0] is None else (None,) * t.shape[0]


def _fill_fold(*xs, **attrs):
    dt = fill_dtype(attrs)
    extra = _dims("extra_shape", attrs["extra_shape"])
    value = num.fill_value_of(xs[1]) if len(xs) == 2 else fill_value(attrs, dt)
    if not xs:
        return num.fill_like(np.broadcast_to(np.int8(0), _dims("shape", attrs["shape"])), value, dt, extra)
    return num.fill_like(xs[0], value, dt, extra, bool(attrs["input_as_shape"]))


declare("ConstantFill", (0, 2), _constant_fill,
        attrs={"value": None, "dtype": None, "shape": None, "extra_shape": None, "input_as_shape": 0},
        traits={PURE, SIZED_BY_VALUES}, fold=_fill_fold, may_fail=failing.constant_fill,
        doc="a tensor filled with `value` (default 0); shape from `shape`, or the input's shape "
            "(+ `extra_shape`), or the input's values (`input_as_shape`); a second input: a one-element "
            "tensor of the dtype holding the value")
no_gradient("ConstantFill")  # (its input, if any, gives only the shape)


def _copy(types, attrs, n):
    (t,) = tensors("Copy", types)
    return [types[0]]


declare("Copy", 1, _copy, traits={PURE}, fold=num.copy, doc="y = a deep copy of the tensor x")


def _binary(name, fn, allowed=NUMERIC_DTYPES, what="numeric", result=None, commutative=False, doc="",
            may_fail=failing.elementwise):
    """Declare a two-operand elementwise op: numpy broadcasting, or ``broadcast=1, axis=k``."""
    traits = PURE_EW | ({COMMUTATIVE} if commutative else set())
    declare(name, 2,
            lambda t, a, n: elementwise(name, t, allowed, what, result, shape_rule=binary_shape(a)),
            attrs={"broadcast": 0, "axis": -1}, traits=traits, fold=num.binary(fn), doc=doc,
            may_fail=may_fail)


_binary("Add", operator.add, commutative=True, doc="c = a + b (numpy broadcasting)")
_binary("Sub", operator.sub, doc="c = a - b (numpy broadcasting)")
_binary("Mul", operator.mul, commutative=True, doc="c = a * b (numpy broadcasting)")
_binary("Div", num.div, doc="c = a / b; integer division truncates toward zero, as in C++ "
        "(by zero: an error)", may_fail=failing.div)
for _name, _sym, _fn in [("GE", ">=", operator.ge), ("GT", ">", operator.gt), ("LE", "<=", operator.le),
                         ("LT", "<", operator.lt), ("EQ", "==", operator.eq), ("NE", "!=", operator.ne)]:
    _binary(_name, num.compare(_fn), allowed=NUMERIC_DTYPES | {"bool", "str"}, what="comparable",
            result="bool", commutative=_name in ("EQ", "NE"),
            doc=f"c = a {_sym} b elementwise, a bool tensor")
for _name, _sym, _fn in [("And", "and", np.logical_and), ("Or", "or", np.logical_or),
                         ("Xor", "xor", np.logical_xor)]:
    _binary(_name, _fn, allowed={"bool"}, what="bool", commutative=True,
            doc=f"c = a {_sym} b elementwise on bool tensors")


for _name, _sym, _fn in [("BitwiseAnd", "&", np.bitwise_and), ("BitwiseOr", "|", np.bitwise_or),
                         ("BitwiseXor", "^", np.bitwise_xor)]:
    _binary(_name, _fn, allowed=INT_DTYPES | {"bool"}, what="integer or bool", commutative=True,
            doc=f"c = a {_sym} b bit by bit, on integer (or bool) tensors of one dtype")


def _unary(name, fn, allowed=NUMERIC_DTYPES, what="numeric", doc="", attrs=None):
    declare(name, 1, lambda t, a, n: elementwise(name, t, allowed, what), attrs=attrs or {},
            traits=PURE_EW, fold=fn, doc=doc)


_unary("Not", np.logical_not, {"bool"}, "bool", doc="y = not x elementwise")
_unary("Negative", operator.neg, doc="y = -x")
_unary("Abs", np.abs, doc="y = |x|")
_unary("Sqr", num.sqr, doc="y = x * x")
_unary("Sqrt", np.sqrt, FLOAT_DTYPES, "float", doc="y = sqrt(x)")
_unary("Exp", np.exp, FLOAT_DTYPES, "float", doc="y = exp(x)")
_unary("Log", np.log, FLOAT_DTYPES, "float", doc="y = natural log of x")
_unary("Relu", num.relu, doc="y = max(x, 0)")
# dslc's own: a gradient's zeros in its forward's dtype (Caffe2 fills float32 there)
_unary("ZerosLike", np.zeros_like, doc="zeros of x's shape and dtype (the gradient of a part no loss reads)")
_unary("Scale", num.scale, FLOAT_DTYPES, "float", attrs={"scale": 1.0}, doc="y = x * scale")


def _variadic(name, fn, doc):
    declare(name, (1, None),
            lambda t, a, n: elementwise(name, t, NUMERIC_DTYPES, "numeric", shape_rule=same_shape),
            traits=PURE_EW | {COMMUTATIVE}, fold=num.variadic(fn), doc=doc, may_fail=failing.elementwise)


_variadic("Sum", operator.add, "y = x0 + x1 + ... (inputs of one shape)")
_variadic("Max", np.maximum, "y = elementwise maximum of the inputs (one shape)")
_variadic("Min", np.minimum, "y = elementwise minimum of the inputs (one shape)")


def _cast(types, attrs, n):
    (t,) = tensors("Cast", types)
    to = dtype_from_code("Cast", attrs["to"])
    if t.dtype == "str" and to != "str":  # (Caffe2's Cast does not parse strings either)
        type_error(f"Cast cannot convert {t.dtype} to {to}: strings are not parsed",
                   "parse strings in a Python op (ops.Python)")
    return [TensorType(to, t.shape)]


declare("Cast", 1, _cast, attrs={"to": REQUIRED, "from_type": None}, traits=PURE_EW,
        fold=lambda x, to, from_type=None: num.cast(x, dtype_from_code("Cast", to)),
        doc="y = x converted to the dtype `to` (a core.DataType code or name); "
            "float to int truncates; to STRING, numbers are written as C++'s std::to_string writes "
            "them (floats with 6 decimals, bools 1/0); `from_type` (x's dtype) is what the "
            "gradient casts back to")


def _half(name, to, frm):
    def infer(types, attrs, n):
        (t,) = tensors(name, types)
        if t.dtype is not None and t.dtype != frm:
            type_error(f"{name} converts {frm}, got {t.dtype}", f"give it a {frm} tensor (or use Cast)")
        return [TensorType(to, t.shape)]
    return infer


declare("FloatToHalf", 1, _half("FloatToHalf", "f16", "f32"), traits={PURE},
        fold=lambda x: x.astype(np.float16), doc="y = x as float16 (from float32)")
declare("HalfToFloat", 1, _half("HalfToFloat", "f32", "f16"), traits={PURE},
        fold=lambda x: x.astype(np.float32), doc="y = x as float32 (from float16)")
gradient("FloatToHalf")(lambda g: [GradOp("HalfToFloat", [g.GO[0]], [g.GI[0]])])
gradient("HalfToFloat")(lambda g: [GradOp("FloatToHalf", [g.GO[0]], [g.GI[0]])])


@gradient("Cast")
def _(g):  # dX = dY cast back to X's dtype, which the op names in from_type (as Caffe2 asks)
    if g.args.get("from_type") is None:
        type_error("Cast's gradient needs from_type= (the input's dtype) to cast the gradient back to",
                   "record it as net.Cast([x], [y], to=..., from_type=<x's core.DataType>)")
    return [GradOp("Cast", [g.GO[0]], [g.GI[0]], {"to": g.args["from_type"]})]


def _is_empty(types, attrs, n):
    tensors("IsEmpty", types)
    return [TensorType("bool")]


declare("IsEmpty", 1, _is_empty, traits={PURE}, fold=num.is_empty,
        doc="y = (x has no elements), a bool scalar")
declare("HasElements", (1, None), lambda t, a, n: (tensors("HasElements", t), [TensorType("bool", ())])[1],
        traits={PURE}, fold=num.has_elements, doc="y = (some input has an element), a bool scalar")
no_gradient("HasElements")
# (Caffe2's EnsureDense turns a sparse gradient into a dense tensor; every tensor blob of dslc is dense)
declare("EnsureDense", 1, _copy, traits={PURE}, fold=num.copy, doc="y = x, a dense tensor (as every tensor blob is)")


@gradient("EnsureDense")
def _(g):  # (Caffe2 passes dY on as dX)
    return [GradOp("Copy", [g.GO[0]], [g.GI[0]])]
