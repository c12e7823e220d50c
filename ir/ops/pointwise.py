"""Selections, membership, per-column affine maps and a few reductions of Caffe2's, with
their gradients. ``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    Where(C, X, Y) -> X where C else Y (broadcast_on_rows: C picks whole rows)
    IsMemberOf(X, value=[0, 3]) -> X in {0, 3}, as bool
    ReplaceNaN(X, value=v) -> X with NaN replaced by v
    ElementwiseLinear(X [N, D], a [D], b [D]) -> X a + b (per column; axis=1 flattens X to 2-D)
    Perplexity(P [N]) -> prod P^(-1/N)
    DotProductWithPadding(X [N, M], Y [N, K]) -> [N]: row dot products, the shorter row padded
        with pad_value (or, replicate=True, repeated to the longer's length)
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import floats


# --- Where: elementwise select
def _where(types, attrs, n):
    c, x, y = tensors("Where", types)
    if c.dtype is not None and c.dtype != "bool":
        type_error(f"Where's condition must be bool, got {c.dtype}", "compare first (GT, EQ ...) to get a bool tensor")
    if x.dtype is not None and y.dtype is not None and x.dtype != y.dtype:
        type_error(f"Where's two choices must have one dtype, got {x.dtype} and {y.dtype}", "Cast one of them")
    if attrs["broadcast_on_rows"] and c.shape is not None and len(c.shape) != 1:
        type_error(f"Where with broadcast_on_rows takes a 1-D condition (one per row), got rank {len(c.shape)}",
                   "pass one bool per row of X")
    return [TensorType(x.dtype or y.dtype, x.shape)]


declare("Where", 3, _where, attrs={"broadcast_on_rows": 0}, traits={PURE},
        doc="Z = X where C else Y (same shapes; broadcast_on_rows: C [N] picks rows of X, Y [N, ...])")
no_gradient("Where")


def where(c, x, y, broadcast_on_rows=0):
    if broadcast_on_rows:
        if c.shape[0] != x.shape[0]:
            raise ValueError(f"Where: {c.shape[0]} conditions for {x.shape[0]} rows")
        c = c.reshape(c.shape + (1,) * (x.ndim - 1))
    elif c.shape != x.shape or x.shape != y.shape:
        raise ValueError(f"Where: condition {list(c.shape)} and choices {list(x.shape)}, {list(y.shape)} "
                         "must have one shape")
    return np.where(c, x, y).astype(x.dtype, copy=False)


# --- IsMemberOf: X in a set of values
def _is_member_of(types, attrs, n):
    (x,) = tensors("IsMemberOf", types)
    if attrs["value"] is None:
        type_error("IsMemberOf needs value=[...]: the set X's elements are looked up in")
    return [TensorType("bool", x.shape)]


declare("IsMemberOf", 1, _is_member_of, attrs={"value": None, "dtype": None}, traits={PURE},
        doc="Y = X in set(value), elementwise (bool)")
no_gradient("IsMemberOf")


def is_member_of(x, value=None, dtype=None):
    values = np.asarray(list(value) if not isinstance(value, np.ndarray) else value)
    return np.isin(x, values.astype(x.dtype) if x.dtype.kind in "iuf" else values)


# --- ReplaceNaN
declare("ReplaceNaN", 1, lambda t, a, n: [floats("ReplaceNaN", t)[0]], attrs={"value": 0.0}, traits={PURE},
        doc="Y = X with every NaN replaced by `value`")
no_gradient("ReplaceNaN")


def replace_nan(x, value=0.0):
    return np.where(np.isnan(x), np.asarray(value, dtype=x.dtype), x)


# --- ElementwiseLinear: Y = X a + b per column
def _elementwise_linear(types, attrs, n):
    x, a, b = floats("ElementwiseLinear", types)
    for t, what in ((a, "a"), (b, "b")):
        if t.shape is not None and len(t.shape) != 1:
            type_error(f"ElementwiseLinear's {what} must be 1-D (one per column), got rank {len(t.shape)}")
    return [x]


declare("ElementwiseLinear", 3, _elementwise_linear, attrs={"axis": 1}, traits={PURE},
        doc="Y = X a + b, X seen as [N, D] (dims before `axis` are N), a and b of size D")
declare("ElementwiseLinearGradient", 3,
        lambda t, a, n: [floats("ElementwiseLinearGradient", t)[1]] + [floats("ElementwiseLinearGradient", t)[2]] * 2,
        results=3, attrs={"axis": 1}, traits={PURE},
        doc="(dX, da, db) from (dY, X, a) of ElementwiseLinear: dX = dY a, da = sum_n dY X, db = sum_n dY")
no_gradient("ElementwiseLinearGradient")


@gradient("ElementwiseLinear")
def _(g):
    return [GradOp("ElementwiseLinearGradient", [g.GO[0], g.I[0], g.I[1]], [g.GI[0], g.GI[1], g.GI[2]],
                   g.pick("axis"))]


def _as_matrix(x, axis):
    n = int(np.prod(x.shape[:axis])) if axis else 1
    return x.reshape(n, -1)


def elementwise_linear(x, a, b, axis=1):
    m = _as_matrix(x, axis)
    if m.shape[1] != a.size or a.size != b.size:
        raise ValueError(f"ElementwiseLinear: X has {m.shape[1]} columns, a {a.size} and b {b.size} values")
    return (m * a.reshape(1, -1) + b.reshape(1, -1)).reshape(x.shape).astype(x.dtype, copy=False)


def elementwise_linear_grad(dy, x, a, axis=1):
    dm, m = _as_matrix(dy, axis), _as_matrix(x, axis)
    dx = (dm * a.reshape(1, -1)).reshape(x.shape).astype(x.dtype, copy=False)
    da = (dm * m).sum(axis=0).astype(a.dtype)
    db = dm.sum(axis=0).astype(a.dtype)
    return dx, da, db


# --- Perplexity: prod p^(-1/N) over a batch of target probabilities
def _perplexity(types, attrs, n):
    (p,) = floats("Perplexity", types)
    return [TensorType(p.dtype, ())]


declare("Perplexity", 1, _perplexity, traits={PURE},
        doc="y = prod_i P[i]^(-1/N), N = P's size (the perplexity of a batch of target probabilities)")
no_gradient("Perplexity")


def perplexity(p):
    flat = p.reshape(-1).astype(np.float64)
    n = max(flat.size, 1)
    return np.asarray(np.prod(np.power(flat, -1.0 / n)), dtype=p.dtype)


# --- DotProductWithPadding
def _dot_padded(types, attrs, n):
    x, y = floats("DotProductWithPadding", types)
    for t in (x, y):
        if t.shape is not None and len(t.shape) not in (1, 2):
            type_error(f"DotProductWithPadding takes 1-D or 2-D inputs, got rank {len(t.shape)}")
    rows = x.shape[0] if x.shape else None
    return [TensorType(x.dtype, (rows,))]


declare("DotProductWithPadding", 2, _dot_padded, attrs={"pad_value": 0.0, "replicate": 0}, traits={PURE},
        doc="Z[i] = X[i] . Y[i], the shorter row padded with pad_value to the longer's length "
            "(replicate: the shorter row repeated; the longer's length must be a multiple)")
declare("DotProductWithPaddingGradient", 3,
        lambda t, a, n: floats("DotProductWithPaddingGradient", t)[:2], results=2,
        attrs={"pad_value": 0.0, "replicate": 0}, traits={PURE},
        doc="(dX, dY) from (X, Y, dZ) of DotProductWithPadding")
no_gradient("DotProductWithPaddingGradient")


@gradient("DotProductWithPadding")
def _(g):
    return [GradOp("DotProductWithPaddingGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0], g.GI[1]],
                   g.pick("pad_value", "replicate"))]


def _rows(a):
    return a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)


def _widened(short, width, pad_value, replicate):
    """``short`` [N, m] made [N, width]: repeated (replicate) or padded with pad_value."""
    m = short.shape[1]
    if replicate:
        if width % m:
            raise ValueError(f"DotProductWithPadding(replicate=True): {width} is not a multiple of {m}")
        return np.tile(short, (1, width // m))
    out = np.full((short.shape[0], width), pad_value, dtype=short.dtype)
    out[:, :m] = short
    return out


def dot_product_with_padding(x, y, pad_value=0.0, replicate=0):
    a, b = _rows(x), _rows(y)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"DotProductWithPadding: X has {a.shape[0]} rows, Y {b.shape[0]}")
    width = max(a.shape[1], b.shape[1])
    if a.shape[1] < width:
        a = _widened(a, width, pad_value, replicate)
    else:
        b = _widened(b, width, pad_value, replicate)
    return (a * b).sum(axis=1).astype(x.dtype)


def dot_product_with_padding_grad(x, y, dz, pad_value=0.0, replicate=0):
    a, b = _rows(x), _rows(y)
    width = max(a.shape[1], b.shape[1])
    d = dz.reshape(-1, 1)
    wide_a = a if a.shape[1] == width else _widened(a, width, pad_value, replicate)
    wide_b = b if b.shape[1] == width else _widened(b, width, pad_value, replicate)
    da_wide, db_wide = d * wide_b, d * wide_a

    def narrowed(grad_wide, m):
        if m == width:
            return grad_wide
        if replicate:  # each element was used width/m times
            return grad_wide.reshape(grad_wide.shape[0], width // m, m).sum(axis=1)
        return grad_wide[:, :m]  # (the padding is a constant)
    dx = narrowed(da_wide, a.shape[1]).reshape(x.shape).astype(x.dtype)
    dy = narrowed(db_wide, b.shape[1]).reshape(y.shape).astype(y.dtype)
    return dx, dy


FUNCTIONS = {
    "Where": where, "IsMemberOf": is_member_of, "ReplaceNaN": replace_nan,
    "ElementwiseLinear": elementwise_linear, "ElementwiseLinearGradient": elementwise_linear_grad,
    "Perplexity": perplexity,
    "DotProductWithPadding": dot_product_with_padding, "DotProductWithPaddingGradient": dot_product_with_padding_grad,
}
