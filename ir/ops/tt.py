"""Tensor-train layers: ``TT``, a fully connected layer whose weight is a chain of small cores
(dslc.tt_core makes them), and ``TTSparseLengthsSum``, an embedding table held as three cores
and summed per segment as SparseLengthsSum does. ``FUNCTIONS`` holds the numpy semantics.

    TT(X [B, prod(inp_sizes)], b [prod(out_sizes)], cores [flat]) -> [B, prod(out_sizes)]
        X times each core in turn, the last core first (core k a [inp_k r_k+1, r_k out_k] matrix,
        stored last to first), plus b. No gradient: Caffe2 has none either.
    TTSparseLengthsSum(core0 [I0, 1, J0, R1], core1 [I1, R1, J1, R2], core2 [I2, R2, J2, 1],
                       index [n] i64, lengths [M] i32) {factor_i, factor_j, ranks, emb_size}
        -> Y [M, J0 J1 J2], core0_output [n, J0, R1], core1_output [n, J0 J1, R2], indices [n, 3]
        id = i0 + I0 (i1 + I1 i2) picks slice i_k of core k; the id's embedding is the product
        of the three slices, flattened; Y sums the embeddings of each segment. The gradient
        (dense, per core) reads the saved products and slice indices.
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, REQUIRED, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import indices


# ----------------------------------------------------------------------------- TT
def _tt_sizes(attrs):
    inp, out, ranks = (list(attrs[k]) for k in ("inp_sizes", "out_sizes", "tt_ranks"))
    if not inp or len(inp) != len(out) or len(ranks) != len(inp) + 1:
        type_error(f"TT takes as many inp_sizes as out_sizes ({len(inp)}, {len(out)}) and one more "
                   f"tt_ranks ({len(ranks)})", "pass inp_sizes, out_sizes (d each) and tt_ranks (d + 1)")
    return inp, out, ranks


def _tt(types, attrs, n):
    x, b, cores = tensors("TT", types)
    inp, out, ranks = _tt_sizes(attrs)
    for t, what in ((x, "X"), (b, "b"), (cores, "cores")):
        if t.dtype is not None and t.dtype != "f32":
            type_error(f"TT's {what} must be float32, got {t.dtype}")
    if x.shape is not None and len(x.shape) < 2:
        type_error(f"TT takes X as [batch, features], got rank {len(x.shape)}")
    if cores.shape is not None and len(cores.shape) != 1:
        type_error(f"TT's cores are one flat vector, got rank {len(cores.shape)}", "pass dslc.tt_core's cores")
    need = sum(inp[k] * ranks[k + 1] * ranks[k] * out[k] for k in range(len(inp)))
    if cores.shape and cores.shape[0] is not None and cores.shape[0] < need:
        type_error(f"TT's cores hold {cores.shape[0]} values; these sizes and ranks need {need}")
    batch = None if x.shape is None else x.shape[0]
    return [TensorType("f32", (batch, int(np.prod(out))))]


declare("TT", 3, _tt, attrs={"inp_sizes": REQUIRED, "out_sizes": REQUIRED, "tt_ranks": REQUIRED}, traits={PURE},
        doc="Y = X W^T + b with W held as TT cores (inp_sizes, out_sizes, tt_ranks), multiplied in turn")


def tt(x, b, cores, inp_sizes=(), out_sizes=(), tt_ranks=()):
    batch = x.shape[0]
    if int(np.prod(x.shape[1:])) != int(np.prod(inp_sizes)):
        raise ValueError(f"X has {int(np.prod(x.shape[1:]))} features, the product of inp_sizes is "
                         f"{int(np.prod(inp_sizes))}")
    cur, at = np.asarray(x, np.float32).reshape(-1), 0
    for k in range(len(inp_sizes) - 1, -1, -1):
        rows, cols = inp_sizes[k] * tt_ranks[k + 1], tt_ranks[k] * out_sizes[k]
        if at + rows * cols > cores.size:
            raise ValueError(f"the cores hold {cores.size} values; core {k} needs {at + rows * cols}")
        y = cur.reshape(-1, rows) @ cores[at:at + rows * cols].reshape(rows, cols)
        # (the out_k axis moves to the front: the next core contracts over r_k)
        cur = y.reshape(-1, out_sizes[k]).T.reshape(-1)
        at += rows * cols
    # (the batch ends up the last axis: [out_0 .. out_d-1, B]; Caffe2 transposes it as if it were
    # the first, which scrambles the rows of any batch over 1: docs/differences.md)
    y = cur.reshape(-1, batch).T
    if b.size != y.shape[1]:
        raise ValueError(f"b has {b.size} values for {y.shape[1]} outputs")
    return (y + b.reshape(1, -1)).astype(np.float32)


# ----------------------------------------------------------------------------- TTSparseLengthsSum
_TTSLS_ATTRS = {"factor_i": [1, 1, 1], "factor_j": [1, 1, 1], "ranks": [1, 1, 1, 1], "emb_size": 64}


def _ttsls(types, attrs, n):
    c0, c1, c2, idx, lengths = tensors("TTSparseLengthsSum", types)
    fi, fj, ranks = list(attrs["factor_i"]), list(attrs["factor_j"]), list(attrs["ranks"])
    if len(fi) != 3 or len(fj) != 3 or len(ranks) != 4:
        type_error("TTSparseLengthsSum takes three cores: factor_i and factor_j of 3 sizes, ranks of 4",
                   "pass factor_i=[I0, I1, I2], factor_j=[J0, J1, J2], ranks=[1, R1, R2, 1]")
    if ranks[0] != 1 or ranks[3] != 1:
        type_error(f"TTSparseLengthsSum's outer ranks must be 1, got {ranks}")
    emb = int(attrs["emb_size"])
    if emb != fj[0] * fj[1] * fj[2]:
        type_error(f"TTSparseLengthsSum: emb_size {emb} is not J0 J1 J2 = {fj[0] * fj[1] * fj[2]}",
                   "emb_size must be the product of factor_j")
    for k, c in enumerate((c0, c1, c2)):
        want = (fi[k], ranks[k], fj[k], ranks[k + 1])
        if c.dtype is not None and c.dtype != "f32":
            type_error(f"TTSparseLengthsSum's core{k} must be float32, got {c.dtype}")
        if c.shape is not None and (len(c.shape) != 4 or any(a is not None and a != w for a, w in zip(c.shape, want))):
            type_error(f"TTSparseLengthsSum's core{k} is {list(c.shape)}, factor_i/factor_j/ranks say {list(want)}")
    indices("TTSparseLengthsSum", idx, "indices")
    indices("TTSparseLengthsSum", lengths, "lengths")
    m = lengths.shape[0] if lengths.shape else None
    k = idx.shape[0] if idx.shape else None
    return [TensorType("f32", (m, emb)), TensorType("f32", (k, fj[0], ranks[1])),
            TensorType("f32", (k, fj[0] * fj[1], ranks[2])), TensorType("i64", (k, 3))]


declare("TTSparseLengthsSum", 5, _ttsls, results=4, attrs=dict(_TTSLS_ATTRS), traits={PURE},
        doc="(core0, core1, core2, index, lengths) -> per segment, the sum of the TT embeddings of its "
            "ids; also each id's partial products (core0, core0 core1) and its three slice indices")


def _ttsls_grad(types, attrs, n):
    c0, c1, c2 = tensors("TTSparseLengthsSumGradient", types)[:3]
    return [c0, c1, c2]


declare("TTSparseLengthsSumGradient", 8, _ttsls_grad, results=3, traits={PURE},
        doc="(core0, core1, core2, lengths, core0_output, core1_output, indices, dY) -> dcore0, dcore1, "
            "dcore2 of TTSparseLengthsSum (each id's share of dY back through its slices)")
no_gradient("TTSparseLengthsSumGradient")


@gradient("TTSparseLengthsSum")
def _(g):
    return [GradOp("TTSparseLengthsSumGradient", [g.I[0], g.I[1], g.I[2], g.I[4], g.O[1], g.O[2], g.O[3], g.GO[0]],
                   [g.GI[0], g.GI[1], g.GI[2]])]


def _segments(lengths, n):
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1)
    if lengths.min(initial=0) < 0 or lengths.sum() != n:
        raise ValueError(f"lengths {lengths.tolist()[:8]} do not add up to the {n} ids")
    return np.repeat(np.arange(lengths.size), lengths)


def tt_sparse_lengths_sum(c0, c1, c2, index, lengths, factor_i=(), factor_j=(), ranks=(), emb_size=64):
    index = np.asarray(index).astype(np.int64).reshape(-1)
    i0, i1, i2 = factor_i
    if index.size and (index.min() < 0 or index.max() >= i0 * i1 * i2):
        bad = index[(index < 0) | (index >= i0 * i1 * i2)][0]
        raise ValueError(f"id {bad} is outside the table of I0 I1 I2 = {i0 * i1 * i2} rows")
    subs = np.stack([index % i0, index % (i0 * i1) // i0, index // (i0 * i1)], axis=1)
    n, (j0, j1, j2), (_, r1, r2, _) = index.size, factor_j, ranks
    out0 = c0[subs[:, 0]].reshape(n, j0, r1)
    out1 = (out0 @ c1[subs[:, 1]].reshape(n, r1, j1 * r2)).reshape(n, j0 * j1, r2)
    emb = (out1 @ c2[subs[:, 2]].reshape(n, r2, j2)).reshape(n, j0 * j1 * j2)
    seg = _segments(lengths, n)
    y = np.zeros((np.asarray(lengths).size, emb.shape[1]), np.float32)
    np.add.at(y, seg, emb)
    return y, out0.astype(np.float32), out1.astype(np.float32), subs


def tt_sparse_lengths_sum_grad(c0, c1, c2, lengths, out0, out1, subs, dy):
    """Shapes come from the operands (as Caffe2's gradient takes them), not from attributes."""
    n = subs.shape[0]
    a, r2 = out1.shape[1], c2.shape[1]          # J0 J1, R2
    j0, r1 = out0.shape[1], c1.shape[1]          # J0, R1
    g2 = dy[_segments(lengths, n)].reshape(n, a, -1)          # each id's share of dY, [J0 J1, J2]
    d2 = np.zeros_like(c2)
    np.add.at(d2.reshape(c2.shape[0], -1), subs[:, 2], (out1.transpose(0, 2, 1) @ g2).reshape(n, -1))
    g1 = (g2 @ c2[subs[:, 2]].reshape(n, r2, -1).transpose(0, 2, 1)).reshape(n, j0, -1)  # d out1, [J0, J1 R2]
    d1 = np.zeros_like(c1)
    np.add.at(d1.reshape(c1.shape[0], -1), subs[:, 1], (out0.transpose(0, 2, 1) @ g1).reshape(n, -1))
    g0 = g1 @ c1[subs[:, 1]].reshape(n, r1, -1).transpose(0, 2, 1)                     # d out0, [J0, R1]
    d0 = np.zeros_like(c0)
    np.add.at(d0.reshape(c0.shape[0], -1), subs[:, 0], g0.reshape(n, -1))
    return d0, d1, d2


FUNCTIONS = {
    "TT": tt, "TTSparseLengthsSum": tt_sparse_lengths_sum, "TTSparseLengthsSumGradient": tt_sparse_lengths_sum_grad,
}
