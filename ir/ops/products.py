"""Products of tensors beyond FC and MatMul: row-wise dot products and batched matrix
products, with their gradients; ``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    BatchMatMul(A [b, M, K], B [b, K, N]) -> [b, M, N];  broadcast=1: batch dims broadcast
    RowMul(X [N, ...], w [N]) -> Y[i, ...] = X[i, ...] w[i];  ReduceTailSum(X [N, ...]) -> [N]
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import floats, prod


def _dot_product(types, attrs, n):
    a, b = tensors("DotProduct", types)
    if a.shape is not None and b.shape is not None and None not in a.shape + b.shape and a.shape != b.shape:
        type_error(f"DotProduct needs inputs of one shape, got {list(a.shape)} and {list(b.shape)}",
                   "pair rows of equal length")
    return [TensorType(a.dtype, None if a.shape is None else (a.shape[0],) if a.shape else ())]


declare("DotProduct", 2, _dot_product, traits={PURE},
        doc="Y[i] = the dot product of row i of X and row i of Y (1-D inputs: elementwise products)")


@gradient("DotProduct")
def _(g):  # dX = dY[i] Y[i], dY_in = dY[i] X[i]
    return [GradOp("DotProductGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0], g.GI[1]])]


declare("DotProductGradient", 3, lambda t, a, n: tensors("DotProductGradient", t)[:2], results=2,
        traits={PURE}, doc="(dX, dY) of DotProduct from (X, Y, dOut)")
no_gradient("DotProductGradient")


_BMM = {"trans_a": 0, "trans_b": 0, "broadcast": 0}


def _mat(t, trans, right=False):
    """(batch dims, rows, cols) of a matrix operand; a 1-D one is, as numpy's matmul takes it,
    a row on the left and a column on the right."""
    shape = tuple(t.shape)
    if len(shape) == 1:
        return (), (shape[0], 1) if right else (1, shape[0])
    rows, cols = shape[-2:]
    return shape[:-2], (cols, rows) if trans else (rows, cols)


def _batch_mat_mul(types, attrs, n):
    a, b = tensors("BatchMatMul", types)
    if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
        type_error(f"BatchMatMul of {a.dtype} and {b.dtype}", "cast one operand to the other's dtype")
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, None)]
    (ba, (m, ka)), (bb, (kb, nn)) = _mat(a, attrs["trans_a"]), _mat(b, attrs["trans_b"], right=True)
    if None not in (ka, kb) and ka != kb:
        type_error(f"BatchMatMul: A's inner dimension {ka} is not B's {kb}", "use trans_a / trans_b to match them")
    if attrs["broadcast"]:
        try:
            batch = np.broadcast_shapes(tuple(1 if d is None else d for d in ba),
                                        tuple(1 if d is None else d for d in bb))
        except ValueError:
            type_error(f"BatchMatMul cannot broadcast batch dims {list(ba)} and {list(bb)}",
                       "batch dims must be equal or 1")
        if None in ba + bb:
            batch = tuple(None for _ in batch)
    else:
        if len(ba) != len(bb) or any(x is not None and y is not None and x != y for x, y in zip(ba, bb)):
            type_error(f"BatchMatMul batch dims {list(ba)} and {list(bb)} differ",
                       "pass broadcast=1 to broadcast them")
        batch = ba
    out = tuple(batch) + ((m,) if len(a.shape) > 1 else ()) + ((nn,) if len(b.shape) > 1 else ())
    return [TensorType(a.dtype, out)]


declare("BatchMatMul", 2, _batch_mat_mul, attrs=dict(_BMM), traits={PURE},
        doc="Y[...] = op(A[...]) op(B[...]) for every batch index (op: transposed if trans_a / "
            "trans_b); broadcast=1: batch dims broadcast as numpy's")
declare("BatchMatMulGradient", 3, lambda t, a, n: tensors("BatchMatMulGradient", t)[:2], results=2,
        attrs=dict(_BMM), traits={PURE}, doc="(dA, dB) of BatchMatMul from (A, B, dY)")
no_gradient("BatchMatMulGradient")


@gradient("BatchMatMul")
def _(g):
    return [GradOp("BatchMatMulGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0], g.GI[1]],
                   g.pick("trans_a", "trans_b", "broadcast"))]


def dot_product(x, y):
    if x.ndim <= 1:
        return (x * y).astype(x.dtype)
    return np.einsum("ij,ij->i", x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1)).astype(x.dtype)


def dot_product_grad(x, y, dz):
    scale = dz.reshape((-1,) + (1,) * (x.ndim - 1)) if x.ndim > 1 else dz
    return (scale * y).astype(x.dtype), (scale * x).astype(y.dtype)



def _t(x, trans):
    return np.swapaxes(x, -1, -2) if trans and x.ndim > 1 else x


def batch_mat_mul(a, b, trans_a=0, trans_b=0, broadcast=0):
    return np.matmul(_t(a, trans_a), _t(b, trans_b)).astype(a.dtype, copy=False)


def _reduce_to(x, shape):
    """``x`` summed over the dims broadcasting added to ``shape``."""
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    return x.sum(axis=tuple(k for k, d in enumerate(shape) if d == 1 and x.shape[k] != 1), keepdims=True) \
        .reshape(shape)


def batch_mat_mul_grad(a, b, dy, trans_a=0, trans_b=0, broadcast=0):
    """dA = dY op(B)^T and dB = op(A)^T dY, transposed back where the operand was, summed over
    broadcast batch dims (1-D operands as numpy's matmul treats them)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    dy2 = dy.reshape(dy.shape + ((1,) if b.ndim == 1 else ()))
    dy2 = dy2.reshape(dy2.shape[:-2] + (1,) + dy2.shape[-1:]) if a.ndim == 1 else dy2
    oa, ob = _t(a2, trans_a), _t(b2, trans_b)
    da = np.matmul(dy2, np.swapaxes(ob, -1, -2))
    db = np.matmul(np.swapaxes(oa, -1, -2), dy2)
    da, db = _t(da, trans_a), _t(db, trans_b)
    return (_reduce_to(da, a2.shape).reshape(a.shape).astype(a.dtype),
            _reduce_to(db, b2.shape).reshape(b.shape).astype(b.dtype))


# ----------------------------------------------------------------------------- RowMul
def _row_mul(types, attrs, n):
    x, w = floats("RowMul", types)
    if x.shape is not None and len(x.shape) < 1:
        type_error("RowMul's X must have a first dim (one row per element of w), got a scalar",
                   "pass X as [N, ...] and w with N elements")
    if x.shape is not None and w.shape is not None and None not in (x.shape[0], prod(w.shape)) \
            and prod(w.shape) != x.shape[0]:
        type_error(f"RowMul: w has {prod(w.shape)} elements for X's {x.shape[0]} rows",
                   "give w one element per row of X")
    return [x]


declare("RowMul", 2, _row_mul, traits={PURE}, doc="Y[i, ...] = X[i, ...] w[i] (w: N elements, any shape)")


@gradient("RowMul")
def _(g):  # dX = RowMul(dY, w); dw[i] = sum over row i of dY X (Caffe2's three ops)
    ops = [GradOp("RowMul", [g.GO[0], g.I[1]], [g.GI[0]])] if g.GI[0] else []
    if g.GI[1]:
        dyx = g.GI[1] + "_rowmul_dyx"
        ops += [GradOp("Mul", [g.GO[0], g.I[0]], [dyx]), GradOp("ReduceTailSum", [dyx], [g.GI[1]])]
    return ops


def _reduce_tail_sum(types, attrs, n):
    (x,) = floats("ReduceTailSum", types)
    if x.shape is not None and len(x.shape) < 1:
        type_error("ReduceTailSum needs X with a first dim, got a scalar", "pass X as [N, ...]")
    return [TensorType(x.dtype, None if x.shape is None else x.shape[:1])]


declare("ReduceTailSum", 1, _reduce_tail_sum, traits={PURE}, doc="Y[i] = the sum of X[i, ...] (all dims but the first)")
no_gradient("ReduceTailSum")  # (none in Caffe2 either)


def row_mul(x, w):
    if w.size != (x.shape[0] if x.ndim else -1):
        raise ValueError(f"RowMul: w has {w.size} elements for X's {x.shape[0] if x.ndim else 0} rows")
    return x * w.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype, copy=False)


def reduce_tail_sum(x):
    return x.reshape(x.shape[0], -1).sum(axis=1).astype(x.dtype, copy=False)


FUNCTIONS = {"RowMul": row_mul, "ReduceTailSum": reduce_tail_sum, "DotProduct": dot_product, "DotProductGradient": dot_product_grad,
             "BatchMatMul": batch_mat_mul, "BatchMatMulGradient": batch_mat_mul_grad}
