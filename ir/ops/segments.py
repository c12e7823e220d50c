"""Segment reductions: rows summed (or averaged) in consecutive segments given by LENGTHS,
and their sparse forms over rows picked by INDICES (an embedding table's bags).

    SparseLengthsSum(DATA, INDICES, LENGTHS)[s] = sum of DATA[INDICES[k]] for the k of segment s

The gradient of a sparse form is sparse: the table's rows at INDICES get dY's segment
rows (``LengthsSumGradient``, the rows of dY repeated by LENGTHS), so an optimizer
updates only the rows read. ``FUNCTIONS`` holds the numpy semantics the interpreter runs.
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, SparseGrad, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import indices


def _lengths(name, t):
    indices(name, t, "lengths")
    if t.shape is not None and len(t.shape) != 1:
        type_error(f"{name}'s LENGTHS must be 1-D, got shape {list(t.shape)}", "one length per segment")


def _segment_shape(name, data, lengths):
    if data.shape is not None and len(data.shape) == 0:
        type_error(f"{name} needs DATA of rank >= 1", "segments are made of DATA's rows")
    _lengths(name, lengths)
    if data.shape is None or lengths.shape is None:
        return TensorType(data.dtype, None)
    return TensorType(data.dtype, (lengths.shape[0],) + tuple(data.shape[1:]))


def _lengths_reduce(name):
    def infer(types, attrs, n):
        data, lengths = tensors(name, types)
        return [_segment_shape(name, data, lengths)]
    return infer


def _sparse_reduce(name, weighted=False):
    def infer(types, attrs, n):
        ts = tensors(name, types)
        data, idx, lengths = (ts[0], ts[2], ts[3]) if weighted else ts
        indices(name, idx, "indices")
        if idx.shape is not None and len(idx.shape) != 1:
            type_error(f"{name}'s INDICES must be 1-D, got shape {list(idx.shape)}", "flatten the bags' ids")
        return [_segment_shape(name, data, lengths)]
    return infer


def _tiled(name):
    def infer(types, attrs, n):
        ts = tensors(name, types)
        dy, lengths = ts[0], ts[1]
        _lengths(name, lengths)
        return [TensorType(dy.dtype, None if dy.shape is None else (None,) + tuple(dy.shape[1:]))]
    return infer


_DOC = "consecutive segments of DATA's rows, LENGTHS[s] rows in segment s"
declare("LengthsSum", 2, _lengths_reduce("LengthsSum"), traits={PURE},
        doc=f"Y[s] = the sum of segment s ({_DOC})")
declare("LengthsMean", 2, _lengths_reduce("LengthsMean"), traits={PURE},
        doc=f"Y[s] = the mean of segment s (0 for an empty one; {_DOC})")
declare("SparseLengthsSum", 3, _sparse_reduce("SparseLengthsSum"), traits={PURE},
        doc="Y[s] = the sum of DATA[INDICES[k]] over segment s of INDICES (LENGTHS[s] ids)")
declare("SparseLengthsMean", 3, _sparse_reduce("SparseLengthsMean"), traits={PURE},
        doc="Y[s] = the mean of DATA[INDICES[k]] over segment s of INDICES (0 for an empty one)")
declare("SparseLengthsWeightedSum", 4, _sparse_reduce("SparseLengthsWeightedSum", weighted=True),
        traits={PURE}, doc="Y[s] = the sum of WEIGHTS[k] DATA[INDICES[k]] over segment s; inputs "
                           "(DATA, WEIGHTS, INDICES, LENGTHS)")
declare("LengthsSumGradient", 2, _tiled("LengthsSumGradient"), traits={PURE},
        doc="the rows of dY repeated by LENGTHS (row s LENGTHS[s] times); inputs (dY, LENGTHS)")
declare("LengthsMeanGradient", 2, _tiled("LengthsMeanGradient"), traits={PURE},
        doc="the rows of dY / LENGTHS[s] repeated by LENGTHS; inputs (dY, LENGTHS)")
declare("LengthsWeightedSumGradient", 3, _tiled("LengthsWeightedSumGradient"), traits={PURE},
        doc="the rows of dY repeated by LENGTHS, row k times WEIGHTS[k]; inputs (dY, LENGTHS, WEIGHTS)")
no_gradient("LengthsSumGradient", "LengthsMeanGradient", "LengthsWeightedSumGradient")


def _tmp(g, what):
    return f"{g.I[0]}_{what}_rows"


@gradient("LengthsSum")
def _(g):
    return [GradOp("LengthsSumGradient", [g.GO[0], g.I[1]], [g.GI[0]])]


@gradient("LengthsMean")
def _(g):
    return [GradOp("LengthsMeanGradient", [g.GO[0], g.I[1]], [g.GI[0]])]


@gradient("SparseLengthsSum")
def _(g):  # the table's gradient: dY's segment rows, at INDICES
    rows = _tmp(g, "sls_grad")
    return [GradOp("LengthsSumGradient", [g.GO[0], g.I[2]], [rows]), SparseGrad(0, g.I[1], rows)]


@gradient("SparseLengthsMean")
def _(g):
    rows = _tmp(g, "slm_grad")
    return [GradOp("LengthsMeanGradient", [g.GO[0], g.I[2]], [rows]), SparseGrad(0, g.I[1], rows)]


@gradient("SparseLengthsWeightedSum")
def _(g):  # (no gradient for WEIGHTS, as in Caffe2 by default)
    rows = _tmp(g, "slws_grad")
    return [GradOp("LengthsWeightedSumGradient", [g.GO[0], g.I[3], g.I[1]], [rows]),
            SparseGrad(0, g.I[2], rows)]


# ----------------------------------------------------------------------------- numpy semantics

class SegmentError(ValueError):
    """LENGTHS that do not add up to the rows given, or an index outside the table."""


def _starts(lengths, total, name):
    lengths = lengths.astype(np.int64)
    if (lengths < 0).any() or int(lengths.sum()) != total:
        raise SegmentError(f"{name}: LENGTHS add up to {int(lengths.sum())}, but there are {total} rows "
                           "(and no length may be negative)")
    return np.cumsum(lengths) - lengths, lengths


def _segment_sums(rows, lengths, name):
    starts, lengths = _starts(lengths, rows.shape[0], name)
    out = np.zeros((lengths.size,) + rows.shape[1:], dtype=rows.dtype)
    full = lengths > 0
    if full.any():
        out[full] = np.add.reduceat(rows, starts[full], axis=0)
    return out, lengths


def _picked(data, idx, name):
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[0]):
        raise SegmentError(f"{name}: an index is outside DATA's {data.shape[0]} rows "
                           f"(got {idx.min()}..{idx.max()})")
    return data[idx]


def _mean(sums, lengths):
    """Each segment's row times 1 / its length, the reciprocal rounded to the rows' dtype
    first (as Caffe2 scales: 10 / 3 is 10 * float32(1 / 3) = 3.3333335 in float32)."""
    shape = (-1,) + (1,) * (sums.ndim - 1)
    scale = (1.0 / np.maximum(lengths, 1)).astype(sums.dtype).reshape(shape)
    return (sums * scale).astype(sums.dtype, copy=False)


def lengths_sum(data, lengths):
    return _segment_sums(data, lengths, "LengthsSum")[0]


def lengths_mean(data, lengths):
    return _mean(*_segment_sums(data, lengths, "LengthsMean"))


def sparse_lengths_sum(data, idx, lengths):
    return _segment_sums(_picked(data, idx, "SparseLengthsSum"), lengths, "SparseLengthsSum")[0]


def sparse_lengths_mean(data, idx, lengths):
    return _mean(*_segment_sums(_picked(data, idx, "SparseLengthsMean"), lengths, "SparseLengthsMean"))


def sparse_lengths_weighted_sum(data, weights, idx, lengths):
    rows = _picked(data, idx, "SparseLengthsWeightedSum")
    w = weights.astype(rows.dtype, copy=False).reshape((-1,) + (1,) * (rows.ndim - 1))
    return _segment_sums(rows * w, lengths, "SparseLengthsWeightedSum")[0]


def lengths_sum_grad(dy, lengths):
    return np.repeat(dy, lengths.astype(np.int64), axis=0)


def lengths_mean_grad(dy, lengths):
    return np.repeat(_mean(dy, lengths.astype(np.int64)), lengths.astype(np.int64), axis=0)


def lengths_weighted_sum_grad(dy, lengths, weights):
    rows = np.repeat(dy, lengths.astype(np.int64), axis=0)
    return (rows * weights.astype(dy.dtype, copy=False).reshape((-1,) + (1,) * (dy.ndim - 1))).astype(dy.dtype)


FUNCTIONS = {
    "LengthsSum": lengths_sum, "LengthsMean": lengths_mean, "SparseLengthsSum": sparse_lengths_sum,
    "SparseLengthsMean": sparse_lengths_mean, "SparseLengthsWeightedSum": sparse_lengths_weighted_sum,
    "LengthsSumGradient": lengths_sum_grad, "LengthsMeanGradient": lengths_mean_grad,
    "LengthsWeightedSumGradient": lengths_weighted_sum_grad,
}
