"""Reductions over the leading or trailing dims (Caffe2's ReduceFront/Back Sum/Mean/Max),
over chosen axes (ReduceMax/Min/L1/L2; ReduceSum and ReduceMean live in nn.py) and their
gradients; ``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    ReduceFrontSum(X [a, b, c]) {num_reduce_dim = 1} -> [b, c];  ReduceBackMean: -> [a, b]
    ReduceL2(X [a, b]) {axes = [1], keepdims = 0} -> [a]
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from . import nn_math as nm
from .nn import floats, reduce_type

_ARGS = {"num_reduce_dim": 1}


def _infer(name, front):
    def infer(types, attrs, n):
        if len(types) != 1:
            type_error(f"{name} with a LENGTHS input is not supported", "reduce without lengths")
        (x,) = floats(name, types)
        k = int(attrs["num_reduce_dim"])
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        if not 0 <= k <= len(x.shape):
            type_error(f"{name}: num_reduce_dim {k} for a tensor of rank {len(x.shape)}", "reduce at most every dim")
        return [TensorType(x.dtype, tuple(x.shape[k:]) if front else tuple(x.shape[:len(x.shape) - k]))]
    return infer


for _side, _front in (("Front", True), ("Back", False)):
    for _what in ("Sum", "Mean", "Max"):
        _name = f"Reduce{_side}{_what}"
        declare(_name, 1, _infer(_name, _front), attrs=dict(_ARGS), traits={PURE},
                doc=f"Y = the {_what.lower()} over the {'first' if _front else 'last'} num_reduce_dim dims of X")
        _grad_inputs = ["dY", "X", "Y"] if _what == "Max" else ["dY", "X"]
        declare(_name + "Gradient", len(_grad_inputs),
                lambda t, a, n, _g=_name + "Gradient": [floats(_g, t)[1]], attrs=dict(_ARGS), traits={PURE},
                doc=f"dX from ({', '.join(_grad_inputs)}) of {_name}"
                    + (": dY to every element equal to its max" if _what == "Max" else ""))
        no_gradient(_name + "Gradient")
        gradient(_name)(lambda g, _n=_name, _max=_what == "Max": [GradOp(
            _n + "Gradient", [g.GO[0], g.I[0]] + ([g.O[0]] if _max else []), [g.GI[0]], g.pick("num_reduce_dim"))])


_AXES = {"axes": None, "keepdims": 1}
_AXES_DOC = {"Max": "the max", "Min": "the min", "L1": "the sum of |x|", "L2": "sqrt(the sum of x^2)"}
_AXES_GRAD_DOC = {"Max": "dY to every element equal to its max", "Min": "dY to every element equal to its min",
                  "L1": "dY sign(X)", "L2": "dY X / Y (dY where Y is 0)"}
for _what, _doc in _AXES_DOC.items():
    _name = f"Reduce{_what}"
    declare(_name, 1, reduce_type(_name), attrs=dict(_AXES), traits={PURE},
            doc=f"Y = {_doc} of X over `axes` (default all); reduced dims kept as 1 if `keepdims`")
    declare(_name + "Gradient", 3, lambda t, a, n, _g=_name + "Gradient": [floats(_g, t)[1]], attrs=dict(_AXES),
            traits={PURE}, doc=f"dX from (dY, X, Y) of {_name}: {_AXES_GRAD_DOC[_what]}")
    no_gradient(_name + "Gradient")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.GO[0], g.I[0], g.O[0]], [g.GI[0]],
                                                g.pick("axes", "keepdims"))])


declare("SumSqrElements", 1, lambda t, a, n: [TensorType(floats("SumSqrElements", t)[0].dtype, ())],
        attrs={"average": 0}, traits={PURE}, doc="y = the sum (average: the mean) of the squares of X's elements")
no_gradient("SumSqrElements")


def _axes(x, k, front):
    return tuple(range(k)) if front else tuple(range(x.ndim - k, x.ndim))


def _expand(y, x, k, front):
    """``y`` (reduced, or of its size) with the reduced dims put back as 1s, to broadcast against ``x``."""
    kept = x.shape[k:] if front else x.shape[:x.ndim - k]
    return y.reshape((1,) * k + kept) if front else y.reshape(kept + (1,) * k)


def _reduce(what, front):
    def run(x, num_reduce_dim=1):
        k = int(num_reduce_dim)
        if what == "Max":
            return np.max(x, axis=_axes(x, k, front)).astype(x.dtype)
        fn = np.sum if what == "Sum" else np.mean
        return fn(x, axis=_axes(x, k, front)).astype(x.dtype)
    return run


def _reduce_grad(what, front):
    def run(dy, x, *y, num_reduce_dim=1):
        k = int(num_reduce_dim)
        g = np.broadcast_to(_expand(dy, x, k, front), x.shape)
        if what == "Mean":
            g = g / np.prod([x.shape[a] for a in _axes(x, k, front)], dtype=np.float64)
        elif what == "Max":
            g = np.where(x == _expand(y[0], x, k, front), g, 0)
        return np.ascontiguousarray(g).astype(x.dtype)
    return run


def sum_sqr_elements(x, average=0):
    s = np.sum(np.square(x, dtype=np.float64))
    return x.dtype.type(s / x.size if average else s)


def _over_axes(what):
    def run(x, axes=None, keepdims=1):
        ax = nm._axes(x, axes)
        if what == "L1":
            y = np.abs(x).sum(axis=ax, keepdims=bool(keepdims))
        elif what == "L2":
            y = np.sqrt(np.square(x, dtype=np.float64).sum(axis=ax, keepdims=bool(keepdims)))
        else:
            y = (np.max if what == "Max" else np.min)(x, axis=ax, keepdims=bool(keepdims))
        return np.asarray(y).astype(x.dtype)[()]
    return run


def _over_axes_grad(what):
    def run(dy, x, y, axes=None, keepdims=1):
        dy, y = (nm.reduce_sum_grad(v, x, axes) for v in (dy, y))  # (both spread back over X's shape)
        if what in ("Max", "Min"):
            return np.where(x == y, dy, 0).astype(x.dtype)
        if what == "L1":
            return (dy * np.sign(x)).astype(x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y == 0, dy, dy * x / y).astype(x.dtype)
    return run


FUNCTIONS = {"SumSqrElements": sum_sqr_elements}
for _what in _AXES_DOC:
    FUNCTIONS[f"Reduce{_what}"] = _over_axes(_what)
    FUNCTIONS[f"Reduce{_what}Gradient"] = _over_axes_grad(_what)
for _side, _front in (("Front", True), ("Back", False)):
    for _what in ("Sum", "Mean", "Max"):
        FUNCTIONS[f"Reduce{_side}{_what}"] = _reduce(_what, _front)
        FUNCTIONS[f"Reduce{_side}{_what}Gradient"] = _reduce_grad(_what, _front)
