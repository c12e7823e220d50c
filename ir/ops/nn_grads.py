"""Gradients of the elementwise ops declared in ir/ops/tensor.py, and SumReduceLike.

A broadcast operand's gradient is the output's gradient summed back to the operand's
shape (SumReduceLike), for numpy broadcasting and Caffe2's ``broadcast=1, axis=k``.
"""
from __future__ import annotations

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import ELEMENTWISE, PURE, declare
from ..types import TensorType
from .infer import tensors


# Caffe2's legacy broadcast arguments a gradient op takes from its forward op (axis_str and
# order name the axis as a letter of the layout: dslc/lower/ops.py turns them into axis)
LEGACY = ("broadcast", "axis", "axis_str", "order")


def _sum_reduce_like(types, attrs, n):
    dy, like = tensors("SumReduceLike", types)
    return [TensorType(dy.dtype or like.dtype, like.shape)]


declare("SumReduceLike", 2, _sum_reduce_like, attrs={"broadcast": 0, "axis": -1}, traits={PURE}, shape_operands=(1,),
        doc="Y = A summed over the dims broadcasting stretched to reach A's shape from B's; "
            "Y has B's shape")


def _reduce(g, k, src):
    """The gradient of input k: ``src`` (shaped like the output) summed back to input k's shape.
    (Under Caffe2's broadcast=1 only B is broadcast: A has the output's shape, and aligning it
    by ``axis`` as if it were B goes wrong where A has outer 1s, [1, N, 1].)"""
    return GradOp("SumReduceLike", [src, g.I[k]], [g.GI[k]], g.pick(*LEGACY) if k == 1 else {})


def _tmp(g, k, what):
    return f"{g.GI[k]}_{what}"


@gradient("Add")
def _(g):  # d(a + b) = dY, summed back where broadcast
    return [_reduce(g, 0, g.GO[0]), _reduce(g, 1, g.GO[0])]


@gradient("Sub")
def _(g):  # d(a - b): dY and -dY
    neg = _tmp(g, 1, "neg")
    return [_reduce(g, 0, g.GO[0]), GradOp("Negative", [g.GO[0]], [neg]), _reduce(g, 1, neg)]


@gradient("Mul")
def _(g):  # d(a * b): dY b and dY a
    bc = g.pick(*LEGACY)
    da, db = _tmp(g, 0, "full"), _tmp(g, 1, "full")
    # (dY a without the legacy arguments: under broadcast=1, a has dY's shape already)
    return [GradOp("Mul", [g.GO[0], g.I[1]], [da], bc), _reduce(g, 0, da),
            GradOp("Mul", [g.GO[0], g.I[0]], [db]), _reduce(g, 1, db)]


@gradient("Div")
def _(g):  # d(a / b): dY / b and -dY a / b^2 = -(dY / b) y
    bc = g.pick(*LEGACY)
    da, db, neg = _tmp(g, 0, "full"), _tmp(g, 1, "full"), _tmp(g, 1, "neg")
    return [GradOp("Div", [g.GO[0], g.I[1]], [da], bc), _reduce(g, 0, da),
            GradOp("Mul", [da, g.O[0]], [db]), GradOp("Negative", [db], [neg]), _reduce(g, 1, neg)]


@gradient("Sum")
def _(g):  # every input gets dY
    return [GradOp("Copy", [g.GO[0]], [gi]) for gi in g.GI]


no_gradient("ZerosLike")  # constant zeros

for _name in ("Copy", "Negative"):
    gradient(_name)(lambda g, _n=_name: [GradOp(_n, [g.GO[0]], [g.GI[0]])])


@gradient("Scale")
def _(g):
    return [GradOp("Scale", [g.GO[0]], [g.GI[0]], g.pick("scale"))]


@gradient("Exp")
def _(g):  # d exp(x) = dY y
    return [GradOp("Mul", [g.GO[0], g.O[0]], [g.GI[0]])]


@gradient("Log")
def _(g):  # d log(x) = dY / x
    return [GradOp("Div", [g.GO[0], g.I[0]], [g.GI[0]])]


@gradient("Sqr")
def _(g):  # d x^2 = 2 x dY
    t = _tmp(g, 0, "half")
    return [GradOp("Mul", [g.GO[0], g.I[0]], [t]), GradOp("Scale", [t], [g.GI[0]], {"scale": 2.0})]


@gradient("Sqrt")
def _(g):  # d sqrt(x) = dY / (2 y)
    t = _tmp(g, 0, "twice")
    return [GradOp("Div", [g.GO[0], g.O[0]], [t]), GradOp("Scale", [t], [g.GI[0]], {"scale": 0.5})]


# Max and Min: the output's gradient goes to every input equal to the output there
for _name in ("Max", "Min"):
    declare(_name + "Gradient", (3, None), lambda t, a, n, _n=_name: tensors(_n + "Gradient", t)[2:],
            results=(1, None), traits={PURE},
            doc=f"(dX0, dX1, ...) from (Y, dY, X0, X1, ...) of {_name}: dXi = dY where Xi equals Y, else 0")
    no_gradient(_name + "Gradient")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.O[0], g.GO[0]] + list(g.I), list(g.GI))])


declare("AbsGradient", 2, lambda t, a, n: [tensors("AbsGradient", t)[1]], traits={PURE, ELEMENTWISE},
        doc="dX = dY sign(x) (0 at 0), inputs (X, dY)")
gradient("Abs")(lambda g: [GradOp("AbsGradient", [g.I[0], g.GO[0]], [g.GI[0]])])


# Caffe2's gradient ops of the binary elementwise ops, for programs that call them by name
# (dslc's own makers above build the same gradients from plain ops): (dA, dB), each summed
# back to its operand's shape where numpy broadcasting stretched it.
#   AddGradient(dC, A, B)  SubGradient(dC, A, B)  MulGradient(dC, A, B)
#   DivGradient(dC, A, B, C), or Caffe2's older DivGradient(B, C, dC)
BINARY_GRAD_ATTRS = {"broadcast": 0, "axis": -1, "allow_broadcast_fastpath": 0}


def _binary_grad(name):
    def infer(types, attrs, n):
        ts = tensors(name, types)
        if name == "DivGradient" and len(ts) == 3:  # (B, C, dC): dA is shaped as C
            return [ts[1], ts[0]]
        return [ts[1], ts[2]]
    return infer


for _name in ("AddGradient", "SubGradient", "MulGradient", "DivGradient"):
    declare(_name, (3, 4) if _name == "DivGradient" else 3, _binary_grad(_name), results=2,
            attrs=dict(BINARY_GRAD_ATTRS), traits={PURE},
            doc=f"(dA, dB) of {_name[:-8]} from " + ("(dC, A, B, C) or (B, C, dC)" if _name == "DivGradient"
                                                      else "(dC, A, B)") + ", summed back to A's and B's shapes")
    no_gradient(_name)


def _unbroadcast(g, shape):
    """``g`` summed over the dims numpy broadcasting added or stretched to reach it from ``shape``."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes).reshape(shape) if axes else g


def _grads(da, db, a, b):
    return (_unbroadcast(da, a.shape).astype(a.dtype, copy=False),
            _unbroadcast(db, b.shape).astype(b.dtype, copy=False))


def add_grad(dc, a, b):
    return _grads(dc, dc, a, b)


def sub_grad(dc, a, b):
    return _grads(dc, -dc, a, b)


def mul_grad(dc, a, b):
    return _grads(dc * b, dc * a, a, b)


def div_grad(*xs):
    if len(xs) == 3:  # Caffe2's older form: (B, C, dC), A shaped as C
        b, c, dc = xs
        a = c
    else:
        dc, a, b, c = xs
    return _grads(dc / b, -dc * c / b, a, b)


FUNCTIONS = {"AddGradient": add_grad, "SubGradient": sub_grad, "MulGradient": mul_grad, "DivGradient": div_grad}
