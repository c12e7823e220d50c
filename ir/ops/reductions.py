"""Reductions over the leading or trailing dims (Caffe2's ReduceFront/Back Sum/Mean/Max),
over chosen axes (ReduceMax/Min/L1/L2; ReduceSum and ReduceMean live in nn.py) and their
gradients; ``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    ReduceFrontSum(X [a, b, c]) {num_reduce_dim = 1} -> [b, c];  ReduceBackMean: -> [a, b]
    ReduceL2(X [a, b]) {axes = [1], keepdims = 0} -> [a]
"""
from __future__ import annotations

import numpy as np

from ..budget import check_size
from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, SIZED_BY_VALUES, declare, type_error
from ..types import INT_DTYPES, TensorType
from . import nn_math as nm
from .nn import floats, indices, reduce_type, tensors

_ARGS = {"num_reduce_dim": 1}


def _infer(name, front):
    def infer(types, attrs, n):
        x, *lengths = tensors(name, types)
        floats(name, [x])
        if lengths:
            indices(name, lengths[0], "lengths")
        k = int(attrs["num_reduce_dim"])
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        if not 0 <= k <= len(x.shape):
            type_error(f"{name}: num_reduce_dim {k} for a tensor of rank {len(x.shape)}", "reduce at most every dim")
        return [TensorType(x.dtype, tuple(x.shape[k:]) if front else tuple(x.shape[:len(x.shape) - k]))]
    return infer


def _infer_grad(name):
    """dX has X's type; given X's shape (an integer vector) instead of X, dY's dtype."""
    def infer(types, attrs, n):
        dy, x = tensors(name, types)[:2]
        floats(name, [dy])
        if x.dtype in INT_DTYPES:
            return [TensorType(dy.dtype, None)]
        return [floats(name, [dy, x])[1]]
    return infer


for _side, _front in (("Front", True), ("Back", False)):
    for _what in ("Sum", "Mean", "Max"):
        _name = f"Reduce{_side}{_what}"
        _which = "first" if _front else "last"
        declare(_name, (1, 2), _infer(_name, _front), attrs=dict(_ARGS), traits={PURE},
                doc=f"Y = the {_what.lower()} over the {_which} num_reduce_dim dims of X; with LENGTHS, "
                    f"of only the {_which.replace('last', 'first')} LENGTHS[j] of each of the reduced slices")
        _grad_inputs = ["dY", "X", "Y"] if _what == "Max" else ["dY", "X or its shape"]
        declare(_name + "Gradient", (len(_grad_inputs), len(_grad_inputs) + 1), _infer_grad(_name + "Gradient"),
                attrs=dict(_ARGS), traits={PURE} if _what == "Max" else {PURE, SIZED_BY_VALUES},
                doc=f"dX from ({', '.join(_grad_inputs)}[, LENGTHS]) of {_name}"
                    + (": dY to every element equal to its max" if _what == "Max" else ""))
        no_gradient(_name + "Gradient")
        gradient(_name)(lambda g, _n=_name, _max=_what == "Max": [GradOp(
            _n + "Gradient", [g.GO[0], g.I[0]] + ([g.O[0]] if _max else []) + list(g.I[1:]), [g.GI[0]],
            g.pick("num_reduce_dim"))])


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


def _matrix_shape(shape, k, front):
    """X seen as [reduced, kept] (front) or [kept, reduced] (back)."""
    split = k if front else len(shape) - k
    return int(np.prod(shape[:split], dtype=np.int64)), int(np.prod(shape[split:], dtype=np.int64))


def _kept_mask(shape, k, front, lengths):
    """Which elements of X's [rows, cols] view a LENGTHS input keeps (None: no LENGTHS, all)."""
    if lengths is None:
        return None
    rows, cols = _matrix_shape(shape, k, front)
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1)
    slices, depth = (cols, rows) if front else (rows, cols)
    if lengths.size != slices or (lengths.size and (lengths.min() < 0 or lengths.max() > depth)):
        raise ValueError(f"LENGTHS holds {lengths.size} lengths for {slices} slices of {depth} elements, "
                         f"each length at most {depth}")
    mask = np.arange(depth)[:, None] < lengths[None, :]
    return mask if front else mask.T


def _reduce(what, front):
    def run(x, lengths=None, num_reduce_dim=1):
        k = int(num_reduce_dim)
        rows, cols = _matrix_shape(x.shape, k, front)
        m = x.reshape(rows, cols)
        mask = _kept_mask(x.shape, k, front, lengths)
        axis = 0 if front else 1
        out_shape = x.shape[k:] if front else x.shape[:x.ndim - k]
        count = m.shape[axis] if mask is None else mask.sum(axis=axis)
        if what == "Max":
            y = (m if mask is None else np.where(mask, m, -np.inf)).max(axis=axis, initial=-np.inf)
        else:
            y = (m if mask is None else np.where(mask, m, 0)).sum(axis=axis, dtype=np.float64)
            if what == "Mean":
                y = y / np.maximum(count, 1)
        y = np.where(count > 0, y, 0)  # (an empty slice reduces to 0, as in the Lengths* ops)
        return y.astype(x.dtype).reshape(out_shape)
    return run


def _reduce_grad(what, front):
    def run(dy, x, *rest, num_reduce_dim=1):
        k = int(num_reduce_dim)
        y, rest = (rest[0], rest[1:]) if what == "Max" else (None, rest)
        shape = tuple(int(d) for d in x) if x.dtype.kind in "iu" else x.shape
        if x.dtype.kind in "iu":  # (a shape given as values: what it asks for must fit, in float64)
            check_size(f"Reduce{'Front' if front else 'Back'}{what}Gradient", shape, np.float64)
        rows, cols = _matrix_shape(shape, k, front)
        mask = _kept_mask(shape, k, front, rest[0] if rest else None)
        axis = 0 if front else 1
        kept = (1, cols) if front else (rows, 1)
        g = np.broadcast_to(np.asarray(dy, np.float64).reshape(kept), (rows, cols))
        if what == "Mean":
            count = (rows, cols)[axis] if mask is None else mask.sum(axis=axis, keepdims=True)
            g = g / np.maximum(count, 1)
        elif what == "Max":
            g = np.where(x.reshape(rows, cols) == np.asarray(y).reshape(kept), g, 0)
        if mask is not None:
            g = np.where(mask, g, 0)
        return g.astype(dy.dtype).reshape(shape)
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


# RowwiseMax and ColwiseMax: the max over the last or the middle axis of a batch of
# matrices [B, M, N] (-> [B, M], [B, N]); their gradients are ReduceMax's over that axis.
for _name, _axis in (("RowwiseMax", 2), ("ColwiseMax", 1)):
    def _infer_wise(types, attrs, n, _name=_name, _axis=_axis):
        (x,) = floats(_name, tensors(_name, types))
        if x.shape is not None and len(x.shape) != 3:
            type_error(f"{_name} needs a batch of matrices [B, M, N], got rank {len(x.shape)}",
                       "reshape to [B, M, N] (B = 1 for one matrix)")
        return [TensorType(x.dtype, None if x.shape is None else x.shape[:_axis] + x.shape[_axis + 1:])]
    declare(_name, 1, _infer_wise, traits={PURE},
            doc=f"Y = the max over axis {_axis} of X [B, M, N]" + (" (each row's)" if _axis == 2 else
                                                                   " (each column's)"))
    gradient(_name)(lambda g, _axis=_axis: [GradOp("ReduceMaxGradient", [g.GO[0], g.I[0], g.O[0]], [g.GI[0]],
                                                   {"axes": [_axis], "keepdims": 0})])
    FUNCTIONS[_name] = lambda x, _axis=_axis: x.max(axis=_axis)
