"""Gradients of the elementwise ops declared in ir/ops/tensor.py, and SumReduceLike.

A broadcast operand's gradient is the output's gradient summed back to the operand's
shape (SumReduceLike), for numpy broadcasting and Caffe2's ``broadcast=1, axis=k``.
"""
from __future__ import annotations

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import ELEMENTWISE, PURE, declare
from ..types import TensorType
from .infer import tensors


def _sum_reduce_like(types, attrs, n):
    dy, like = tensors("SumReduceLike", types)
    return [TensorType(dy.dtype or like.dtype, like.shape)]


declare("SumReduceLike", 2, _sum_reduce_like, attrs={"broadcast": 0, "axis": -1}, traits={PURE},
        doc="Y = A summed over the dims broadcasting stretched to reach A's shape from B's; "
            "Y has B's shape")


def _reduce(g, k, src):
    """The gradient of input k: ``src`` (shaped like the output) summed back to input k's shape."""
    return GradOp("SumReduceLike", [src, g.I[k]], [g.GI[k]], g.pick("broadcast", "axis"))


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
    bc = g.pick("broadcast", "axis")
    da, db = _tmp(g, 0, "full"), _tmp(g, 1, "full")
    return [GradOp("Mul", [g.GO[0], g.I[1]], [da], bc), _reduce(g, 0, da),
            GradOp("Mul", [g.GO[0], g.I[0]], [db], bc), _reduce(g, 1, db)]


@gradient("Div")
def _(g):  # d(a / b): dY / b and -dY a / b^2 = -(dY / b) y
    bc = g.pick("broadcast", "axis")
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
