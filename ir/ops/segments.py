"""Segment reductions: rows summed (or averaged) in consecutive segments given by LENGTHS,
and their sparse forms over rows picked by INDICES (an embedding table's bags).

    SparseLengthsSum(DATA, INDICES, LENGTHS)[s] = sum of DATA[INDICES[k]] for the k of segment s

The gradient of a sparse form is sparse: the table's rows at INDICES get dY's segment
rows (``LengthsSumGradient``, the rows of dY repeated by LENGTHS), so an optimizer
updates only the rows read. ``FUNCTIONS`` holds the numpy semantics the interpreter runs.
"""
from __future__ import annotations

import numpy as np

from ..budget import check_size, over, total
from ..gradients import GradOp, SparseGrad, gradient, no_gradient
from ..opdef import OPS, PURE, SIZED_BY_VALUES, declare, type_error
from ..types import TensorType
from .ids import checked
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


def _sparse_reduce(name, weighted=False, per_id=True):
    """``weighted``: WEIGHTS is the second input, one per id when ``per_id``."""
    def infer(types, attrs, n):
        ts = tensors(name, types)
        data, idx, lengths = (ts[0], ts[2], ts[3]) if weighted else ts
        indices(name, idx, "indices")
        if idx.shape is not None and len(idx.shape) != 1:
            type_error(f"{name}'s INDICES must be 1-D, got shape {list(idx.shape)}", "flatten the bags' ids")
        if weighted and per_id:
            weights_per_id(name, ts[1], idx)
        out = _segment_shape(name, data, lengths)
        # (Caffe2 adds a float16 table's rows in float32, and gives float32)
        return [TensorType("f32", out.shape) if data.dtype == "f16" else out]
    return infer


def weights_per_id(name, weights, idx):
    """A weighted bag's WEIGHTS: a vector with one weight per id (as Caffe2 requires; one
    weight is not spread over all the ids)."""
    if weights.shape is None:
        return
    if len(weights.shape) != 1:
        type_error(f"{name}'s WEIGHTS must be a vector, got shape {list(weights.shape)}",
                   "give one weight per id, as a 1-D tensor")
    if idx.shape is not None and None not in weights.shape + idx.shape and weights.shape[0] != idx.shape[0]:
        type_error(f"{name} has {weights.shape[0]} weights for {idx.shape[0]} ids", "give one weight per id")


def _tiled(name, weighted=False):
    """dDATA's rows from (dY, LENGTHS, ...); ``weighted``: from (WEIGHTS, dY, LENGTHS, ...), as
    Caffe2 orders a weighted bag's gradient inputs."""
    def infer(types, attrs, n):
        ts = tensors(name, types)
        dy, lengths = (ts[1], ts[2]) if weighted else (ts[0], ts[1])
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
        attrs={"grad_on_weights": 0}, traits={PURE},
        doc="Y[s] = the sum of WEIGHTS[k] DATA[INDICES[k]] over segment s; inputs (DATA, WEIGHTS, INDICES, "
            "LENGTHS); `grad_on_weights`: the gradient reaches WEIGHTS too")
declare("SparseLengthsWeightedSumWeightsGradient", 4,
        lambda t, a, n: [TensorType(tensors("SparseLengthsWeightedSumWeightsGradient", t)[3].dtype,
                                    tensors("SparseLengthsWeightedSumWeightsGradient", t)[1].shape)],
        traits={PURE}, doc="dWEIGHTS[k] = <dY[s], DATA[INDICES[k]]> for id k of segment s; inputs (DATA, INDICES, "
                           "LENGTHS, dY) of SparseLengthsWeightedSum")
no_gradient("SparseLengthsWeightedSumWeightsGradient")
declare("LengthsTile", 2, _tiled("LengthsTile"), traits={PURE, SIZED_BY_VALUES},
        doc="the rows of DATA repeated by LENGTHS (row s LENGTHS[s] times); inputs (DATA, LENGTHS)")
declare("LengthsSumGradient", 2, _tiled("LengthsSumGradient"), traits={PURE, SIZED_BY_VALUES},
        doc="the rows of dY repeated by LENGTHS (row s LENGTHS[s] times); inputs (dY, LENGTHS)")
declare("LengthsMeanGradient", 2, _tiled("LengthsMeanGradient"), traits={PURE, SIZED_BY_VALUES},
        doc="the rows of dY / LENGTHS[s] repeated by LENGTHS; inputs (dY, LENGTHS)")
declare("LengthsWeightedSumGradient", 3, _tiled("LengthsWeightedSumGradient", weighted=True),
        traits={PURE, SIZED_BY_VALUES},
        doc="the rows of dY repeated by LENGTHS, row k times WEIGHTS[k]; inputs (WEIGHTS, dY, LENGTHS), "
            "in Caffe2's order")
no_gradient("LengthsSumGradient", "LengthsMeanGradient", "LengthsWeightedSumGradient")
# Caffe2's older names of the same gradients (its SparseLengths* gradients before they
# were split): the same ops
OPS.alias("SparseLengthsSumGradient", "LengthsSumGradient")
OPS.alias("SparseLengthsMeanGradient", "LengthsMeanGradient")
for _kind in ("Sum", "Mean"):  # (dY, LENGTHS, INDICES): INDICES only says the rows' count
    _name = f"SparseLengthsIndicesInGradient{_kind}Gradient"
    declare(_name, 3, _tiled(_name), traits={PURE, SIZED_BY_VALUES},
            doc=f"Lengths{_kind}Gradient of (dY, LENGTHS), with the INDICES the rows are for as a third input")
    no_gradient(_name)
_name = "SparseLengthsIndicesInGradientWeightedSumGradient"  # (Caffe2's name for SLWS's gradient)
declare(_name, 4, _tiled(_name, weighted=True), traits={PURE, SIZED_BY_VALUES},
        doc="LengthsWeightedSumGradient of (WEIGHTS, dY, LENGTHS), with the INDICES the rows are for as a "
            "fourth input")
no_gradient(_name)


# --- lengths and segment ids
def _int_vector(name, cols=None, per_length=False):
    """An int32 vector (or [rows, cols] matrix); ``per_length``: one row per length given."""
    def infer(types, attrs, n):
        (t,) = tensors(name, types)
        indices(name, t, "lengths or segment ids")
        rows = t.shape[0] if per_length and t.shape is not None and len(t.shape) == 1 else None
        return [TensorType("i32", (rows,) if cols is None else (rows, cols))]
    return infer


for _name, _cols, _doc in [
        ("LengthsToSegmentIds", None, "segment s repeated LENGTHS[s] times (int32)"),
        ("LengthsToRanges", 2, "[offset, length] of each segment (int32)"),
        ("LengthsToOffsets", None, "each segment's first row: the sums of the lengths before it (int32); "
                                   "include_last_offset: then the sum of them all too"),
        ("SegmentIdsToLengths", None, "the rows of each segment 0 .. max id (0 for a gap; int32)"),
        ("SegmentIdsToRanges", 2, "[offset, length] of each segment 0 .. max id (sorted ids; int32)")]:
    _traits = {PURE} if _name in ("LengthsToRanges", "LengthsToOffsets") else {PURE, SIZED_BY_VALUES}
    declare(_name, 1, _int_vector(_name, _cols, per_length=_name == "LengthsToRanges"), traits=_traits, doc=_doc,
            attrs={"include_last_offset": 0} if _name == "LengthsToOffsets" else {})
    no_gradient(_name)


def _lengths_gather(types, attrs, n):
    items, lengths, idx = tensors("LengthsGather", types)
    _lengths("LengthsGather", lengths)
    indices("LengthsGather", idx, "indices")
    return [TensorType(items.dtype, None if items.shape is None else (None,) + tuple(items.shape[1:]))]


declare("LengthsGather", 3, _lengths_gather, traits={PURE, SIZED_BY_VALUES},
        doc="(ITEMS, LENGTHS, INDICES) -> the rows of the segments at INDICES, joined in that order")
no_gradient("LengthsGather")


def _lengths_to_weights(types, attrs, n):
    (t,) = tensors("LengthsToWeights", types)
    _lengths("LengthsToWeights", t)
    return [TensorType("f32", (None,))]


declare("LengthsToWeights", 1, _lengths_to_weights, attrs={"power": 0.5}, traits={PURE, SIZED_BY_VALUES},
        doc="1 / LENGTHS[s]^power for each row of segment s (float32)")
no_gradient("LengthsToWeights")


def _segment_ids_reduce(name):
    def infer(types, attrs, n):
        data, ids = tensors(name, types)
        indices(name, ids, "segment ids")
        if data.shape is None:
            return [TensorType(data.dtype, None)]
        return [TensorType(data.dtype, (None,) + tuple(data.shape[1:]))]
    return infer


def _sparse_segment_ids_reduce(name):
    def infer(types, attrs, n):
        data, idx, ids = tensors(name, types)
        indices(name, idx, "indices")
        return _segment_ids_reduce(name)([data, ids], attrs, n)
    return infer


def _segment_rows(name):
    """dDATA's type from (dY, SEGMENT_IDS): one row per id."""
    def infer(types, attrs, n):
        dy, ids = tensors(name, types)
        indices(name, ids, "segment ids")
        rows = ids.shape[0] if ids.shape is not None and len(ids.shape) == 1 else None
        return [TensorType(dy.dtype, None if dy.shape is None else (rows,) + tuple(dy.shape[1:]))]
    return infer


for _name, _what in [("SortedSegmentSum", "sum"), ("SortedSegmentMean", "mean"),
                     ("UnsortedSegmentSum", "sum"), ("UnsortedSegmentMean", "mean")]:
    _sorted = _name.startswith("Sorted")
    _traits = {PURE} if _sorted else {PURE, SIZED_BY_VALUES}  # (unsorted ids: as many rows as the largest)
    _ids = "ids sorted, without gaps)" if _sorted else "any order; 0 for an id no row has)"
    declare(_name, 2, _segment_ids_reduce(_name), traits=_traits,
            doc=f"Y[k] = the {_what} of DATA's rows whose SEGMENT_IDS is k (k = 0 .. max id; " + _ids)
    declare(_name + "Gradient", 2, _segment_rows(_name + "Gradient"), traits={PURE},
            doc=f"dDATA of {_name} from (dY, SEGMENT_IDS): row i gets dY[ids[i]]"
                + (" / the segment's rows" if _what == "mean" else ""))
    no_gradient(_name + "Gradient")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.GO[0], g.I[1]], [g.GI[0]])])
    # the sparse form: the rows DATA[INDICES] reduced by SEGMENT_IDS; its gradient the same
    # rows' gradient, at INDICES (a GradientSlice, as Caffe2's)
    declare("Sparse" + _name, 3, _sparse_segment_ids_reduce("Sparse" + _name), traits=_traits,
            doc=f"Y[k] = the {_what} of DATA[INDICES[i]] over the i whose SEGMENT_IDS is k; inputs "
                f"(DATA, INDICES, SEGMENT_IDS; " + _ids)
    gradient("Sparse" + _name)(lambda g, _n=_name: [
        GradOp(_n + "Gradient", [g.GO[0], g.I[2]], [f"{g.I[0]}_grad_values"]),
        SparseGrad(0, g.I[1], f"{g.I[0]}_grad_values")])

# reductions over a sorted segment's rows, elementwise: Caffe2's "range" reducers
_RANGES = {"Sum": "the sum", "Mean": "the mean", "Max": "the elementwise max",
           "LogSumExp": "log(sum(exp)) (stable)", "LogMeanExp": "log(mean(exp)) (stable)"}
for _kind, _what in _RANGES.items():
    _name = "SortedSegmentRange" + _kind
    declare(_name, 2, _segment_ids_reduce(_name), traits={PURE},
            doc=f"Y[k] = {_what} of DATA's rows whose SEGMENT_IDS is k (sorted ids, without gaps)")
    declare(_name + "Gradient", 4, lambda t, a, n, _n=_name + "Gradient": [tensors(_n, t)[0]], traits={PURE},
            doc=f"dDATA of {_name} from (DATA, Y, dY, SEGMENT_IDS), as Caffe2 orders them")
    no_gradient(_name + "Gradient")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.I[0], g.O[0], g.GO[0], g.I[1]], [g.GI[0]])])

declare("SparseLengthsPositionalWeightedSum", 4,
        _sparse_reduce("SparseLengthsPositionalWeightedSum", weighted=True, per_id=False),
        traits={PURE}, doc="Y[s] = the sum of WEIGHTS[j] DATA[INDICES[k]] over segment s, j the position "
                           "of k in its segment; inputs (DATA, WEIGHTS, INDICES, LENGTHS); no gradient, "
                           "as in Caffe2")

declare("LengthsMax", 2, _lengths_reduce("LengthsMax"), traits={PURE},
        doc=f"Y[s] = the elementwise max of segment s ({_DOC}; 0 for an empty one)")
_MAX_GRAD = "LengthsMaxWithMainInputAndForwardOutputGradient"  # (Caffe2's name)
declare(_MAX_GRAD, 4, lambda t, a, n: [tensors(_MAX_GRAD, t)[0]], traits={PURE},
        doc="dDATA of LengthsMax from (DATA, LENGTHS, Y, dY): dY[s] at every element of segment s "
            "equal to its max, 0 elsewhere")
no_gradient(_MAX_GRAD)
gradient("LengthsMax")(lambda g: [GradOp(_MAX_GRAD, [g.I[0], g.I[1], g.O[0], g.GO[0]], [g.GI[0]])])



def _tmp(g, what):
    return f"{g.I[0]}_{what}_rows"


@gradient("LengthsSum")
def _(g):
    return [GradOp("LengthsSumGradient", [g.GO[0], g.I[1]], [g.GI[0]])]


@gradient("LengthsTile")  # (tiling and summing segments are each other's transpose)
def _(g):
    return [GradOp("LengthsSum", [g.GO[0], g.I[1]], [g.GI[0]])]


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
def _(g):  # (WEIGHTS get a gradient only with grad_on_weights, as in Caffe2: a PositionWeighted bag's)
    rows = _tmp(g, "slws_grad")
    ops = [GradOp("LengthsWeightedSumGradient", [g.I[1], g.GO[0], g.I[3]], [rows]), SparseGrad(0, g.I[2], rows)]
    if g.args.get("grad_on_weights"):
        ops.append(GradOp("SparseLengthsWeightedSumWeightsGradient", [g.I[0], g.I[2], g.I[3], g.GO[0]], [g.GI[1]]))
    return ops


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
    return bag_sums(rows, starts, lengths), lengths


def bag_sums(rows, starts, lengths):
    """Each segment's rows (``lengths[s]`` of them from ``starts[s]``) added in order from zero,
    (((0 + r0) + r1) + ...), as Caffe2 adds a bag: 1e8, 1, -1e8, 1 sum to 1 there, and to 0 with
    numpy's reduceat, which pairs them. The rows go into a [longest bag, bags] grid padded with
    a zero row and one reduce adds the grid's rows in turn: no Python per bag; where one long
    bag would make the grid much larger than the rows, np.add.at adds them one by one."""
    n, bags, tail = rows.shape[0], lengths.size, rows.shape[1:]
    longest = int(lengths.max()) if bags else 0
    if longest * bags > 2 * n + 64:
        out = np.zeros((bags,) + tail, dtype=rows.dtype)
        np.add.at(out, np.repeat(np.arange(bags), lengths), rows)
        return out
    padded = np.empty((n + 1,) + tail, dtype=rows.dtype)
    padded[:n] = rows
    padded[n] = 0
    at = np.arange(longest)[:, None]
    grid = np.take(padded, np.where(at < lengths, starts + at, n).reshape(-1), axis=0)
    return np.add.reduce(grid.reshape((longest, bags) + tail), axis=0, initial=rows.dtype.type(0))


def _picked(data, idx, name):
    return np.take(data, checked(name, idx, data.shape[0]), axis=0)


def _bag_rows(data, idx, name):
    """A bag op's rows: float16 ones as float32, as Caffe2 adds them (and gives float32)."""
    rows = _picked(data, idx, name)
    return rows.astype(np.float32) if rows.dtype == np.float16 else rows


def check_weights(name, weights, n):
    """One weight per id, in a vector (Caffe2 refuses anything else)."""
    if np.ndim(weights) != 1 or np.size(weights) != n:
        raise SegmentError(f"{name}: WEIGHTS has shape {list(np.shape(weights))}, but there are {n} ids "
                           "(one weight per id, in a vector)")


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
    return _segment_sums(_bag_rows(data, idx, "SparseLengthsSum"), lengths, "SparseLengthsSum")[0]


def sparse_lengths_mean(data, idx, lengths):
    return _mean(*_segment_sums(_bag_rows(data, idx, "SparseLengthsMean"), lengths, "SparseLengthsMean"))


def sparse_lengths_weighted_sum(data, weights, idx, lengths, name="SparseLengthsWeightedSum"):
    check_weights(name, weights, np.size(idx))
    rows = _bag_rows(data, idx, name)
    w = weights.astype(rows.dtype, copy=False).reshape((-1,) + (1,) * (rows.ndim - 1))
    return _segment_sums(rows * w, lengths, name)[0]


def sparse_lengths_weighted_sum_weights_grad(data, idx, lengths, dy):
    name = "SparseLengthsWeightedSumWeightsGradient"
    rows = _bag_rows(data, idx, name).astype(dy.dtype, copy=False)
    per_id = lengths_sum_grad(dy, lengths, name)  # (dY's row s once per id of segment s)
    return (rows * per_id).reshape(len(rows), -1).sum(axis=1).astype(dy.dtype)


def _counts(name, lengths, segments=None):
    """LENGTHS as int64, none negative (and one per segment, when ``segments`` is given)."""
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise SegmentError(f"{name}: LENGTHS holds a negative length ({int(lengths.min())})")
    if segments is not None and lengths.size != segments:
        raise SegmentError(f"{name}: {lengths.size} LENGTHS for {segments} segments")
    return lengths


def _repeated(name, rows, lengths):
    """Row s of ``rows`` LENGTHS[s] times (lengths checked by ``_counts``), once the
    result is known to fit the memory budget."""
    n = total(lengths)
    if over(n * rows.itemsize * (rows.size // max(rows.shape[0], 1))):  # (the check, inlined: a hot op)
        check_size(name, (n,) + rows.shape[1:], rows.dtype)
    return np.repeat(rows, lengths, axis=0)


def lengths_sum_grad(dy, lengths, name="LengthsSumGradient"):
    return _repeated(name, dy, _counts(name, lengths, dy.shape[0]))


def lengths_mean_grad(dy, lengths, name="LengthsMeanGradient"):
    lengths = _counts(name, lengths, dy.shape[0])
    return _repeated(name, _mean(dy, lengths), lengths)


def lengths_weighted_sum_grad(weights, dy, lengths, name="LengthsWeightedSumGradient"):
    lengths = _counts(name, lengths, dy.shape[0])
    check_weights(name, weights, int(lengths.sum()))
    rows = _repeated(name, dy, lengths)
    return (rows * weights.astype(dy.dtype, copy=False).reshape((-1,) + (1,) * (dy.ndim - 1))).astype(dy.dtype)


def lengths_to_segment_ids(lengths):
    lengths = _counts("LengthsToSegmentIds", lengths)
    return _repeated("LengthsToSegmentIds", np.arange(lengths.size, dtype=np.int32), lengths)


def lengths_to_offsets(lengths, include_last_offset=0):
    ends = np.cumsum(lengths, dtype=np.int64)
    if include_last_offset:  # (N + 1 offsets: 0, then each segment's end)
        return np.concatenate([np.zeros(1, np.int64), ends]).astype(np.int32)
    return (ends - lengths).astype(np.int32)


def lengths_to_ranges(lengths):
    return np.stack([lengths_to_offsets(lengths), lengths.astype(np.int32)], axis=1).reshape(-1, 2)


def segment_ids_to_lengths(ids, name="SegmentIdsToLengths"):
    ids = ids.astype(np.int64).reshape(-1)
    if ids.size and (ids[0] < 0 or np.any(ids[1:] < ids[:-1])):
        raise SegmentError(f"{name}: segment ids must be sorted and not negative (got {_quoted(ids)})")
    check_size(name, (int(ids[-1]) + 1 if ids.size else 0,), np.int64)
    return np.bincount(ids, minlength=int(ids[-1]) + 1 if ids.size else 0).astype(np.int32)


def _quoted(ids, most=8):
    """The first few of ``ids`` as text (an error message quotes no unbounded list)."""
    head = ", ".join(str(int(v)) for v in ids[:most])
    return f"[{head}{', ...' if ids.size > most else ''}]"


def segment_ids_to_ranges(ids):
    return lengths_to_ranges(segment_ids_to_lengths(ids, "SegmentIdsToRanges"))


def lengths_to_weights(lengths, power=0.5):
    lengths = _counts("LengthsToWeights", lengths)
    w = 1.0 / np.power(np.maximum(lengths, 1).astype(np.float64), power)
    return _repeated("LengthsToWeights", w, lengths).astype(np.float32)


def _segment_counts(ids, k):
    return np.bincount(ids, minlength=k)[:k] if ids.size else np.zeros(k, np.int64)


def _check_sorted(ids, name):
    if ids.size and (ids[0] != 0 or np.any(np.diff(ids) < 0) or np.any(np.diff(ids) > 1)):
        raise SegmentError(f"{name}: segment ids must be sorted, start at 0 and have no gaps")


def _ids_reduce(name, mean, sorted_):
    def run(data, ids):
        ids = ids.astype(np.int64).reshape(-1)
        if ids.size != data.shape[0] or (ids.size and ids.min() < 0):
            raise SegmentError(f"{name}: one non-negative segment id per row of DATA "
                               f"({data.shape[0]} rows, {ids.size} ids)")
        if sorted_:
            _check_sorted(ids, name)
        k = int(ids.max()) + 1 if ids.size else 0
        check_size(name, (k,) + data.shape[1:], data.dtype)
        check_size(name, (k,), np.int64)  # (the rows' counts)
        out = np.zeros((k,) + data.shape[1:], dtype=data.dtype)
        add_rows_sorted = np.argsort(ids, kind="stable")
        starts = np.r_[0, np.flatnonzero(np.diff(ids[add_rows_sorted])) + 1] if ids.size else np.array([], int)
        if ids.size:
            out[ids[add_rows_sorted][starts]] = np.add.reduceat(data[add_rows_sorted], starts, axis=0)
        return _mean(out, _segment_counts(ids, k)) if mean else out
    return run


def _ids_reduce_grad(mean):
    def run(dy, data, ids):
        ids = ids.astype(np.int64).reshape(-1)
        rows = dy[ids]
        if mean:
            scale = (1.0 / np.maximum(_segment_counts(ids, dy.shape[0]), 1)).astype(dy.dtype)
            rows = rows * scale[ids].reshape((-1,) + (1,) * (dy.ndim - 1))
        return rows.astype(dy.dtype, copy=False)
    return run


def _ids_reduce_grad2(mean):
    run = _ids_reduce_grad(mean)
    return lambda dy, ids: run(dy, None, ids)


def _sparse_ids_reduce(name, mean, sorted_):
    run = _ids_reduce(name, mean, sorted_)
    return lambda data, idx, ids: run(_picked(data, idx, name), ids)


def _range_reduce(kind):
    name = "SortedSegmentRange" + kind

    def run(data, ids):
        ids = ids.astype(np.int64).reshape(-1)
        if ids.size != data.shape[0]:
            raise SegmentError(f"{name}: one segment id per row of DATA ({data.shape[0]} rows, {ids.size} ids)")
        _check_sorted(ids, name)
        k = int(ids.max()) + 1 if ids.size else 0
        out = np.zeros((k,) + data.shape[1:], dtype=data.dtype)
        if not ids.size:
            return out
        starts = np.r_[0, np.flatnonzero(np.diff(ids)) + 1]
        counts = np.diff(np.r_[starts, ids.size]).reshape((-1,) + (1,) * (data.ndim - 1))
        if kind == "Max":
            return np.maximum.reduceat(data, starts, axis=0)
        if kind in ("Sum", "Mean"):
            sums = np.add.reduceat(data, starts, axis=0)
            return sums if kind == "Sum" else (sums / counts).astype(data.dtype)
        top = np.maximum.reduceat(data, starts, axis=0)  # (log-sum-exp about each segment's max)
        lse = top + np.log(np.add.reduceat(np.exp(data - top[ids]), starts, axis=0))
        return (lse if kind == "LogSumExp" else lse - np.log(counts)).astype(data.dtype)
    return run


def _range_reduce_grad(kind):
    def run(data, y, dy, ids):
        ids = ids.astype(np.int64).reshape(-1)
        rows = dy[ids]
        if kind == "Sum":
            return rows.astype(data.dtype, copy=False)
        if kind == "Mean":
            counts = np.bincount(ids, minlength=dy.shape[0]).reshape((-1,) + (1,) * (dy.ndim - 1))
            return (rows / counts[ids]).astype(data.dtype)
        if kind == "Max":  # (every element equal to the max gets it, as Caffe2 does)
            return np.where(data == y[ids], rows, 0).astype(data.dtype)
        # d log(sum exp x) / dx_i = exp(x_i) / sum exp x, for the mean form too (its 1/n cancels)
        lse = y[ids] if kind == "LogSumExp" else y[ids] + np.log(
            np.bincount(ids, minlength=dy.shape[0]).reshape((-1,) + (1,) * (dy.ndim - 1))[ids])
        return (rows * np.exp(data - lse)).astype(data.dtype)
    return run


def sparse_lengths_positional_weighted_sum(data, weights, idx, lengths):
    starts, lens = _starts(lengths, idx.reshape(-1).shape[0], "SparseLengthsPositionalWeightedSum")
    pos = np.arange(int(lens.sum())) - np.repeat(starts, lens)  # (each id's place in its segment)
    if pos.size and pos.max() >= weights.shape[0]:
        raise SegmentError(f"SparseLengthsPositionalWeightedSum: a segment of {int(lens.max())} ids needs "
                           f"that many WEIGHTS, there are {weights.shape[0]}")
    return sparse_lengths_weighted_sum(data, weights.reshape(-1)[pos], idx, lengths,
                                       "SparseLengthsPositionalWeightedSum")


def lengths_max(data, lengths):
    starts, lengths = _starts(lengths, data.shape[0], "LengthsMax")
    out = np.zeros((lengths.size,) + data.shape[1:], dtype=data.dtype)
    full = lengths > 0
    if full.any():
        out[full] = np.maximum.reduceat(data, starts[full], axis=0)
    return out


def lengths_max_grad(data, lengths, y, dy):
    _, lengths = _starts(lengths, data.shape[0], "LengthsMax")
    seg = np.repeat(np.arange(lengths.size), lengths)
    return np.where(data == y[seg], dy[seg], 0).astype(data.dtype, copy=False)


def lengths_gather(items, lengths, idx):
    starts, lengths = _starts(lengths, items.shape[0], "LengthsGather")
    idx = checked("LengthsGather", idx, lengths.size, what="the {n} segments").reshape(-1)
    if not idx.size:
        return items[:0].copy()
    check_size("LengthsGather", (total(lengths[idx]),) + items.shape[1:], items.dtype)
    return np.concatenate([items[starts[i]:starts[i] + lengths[i]] for i in idx])


FUNCTIONS = {
    "LengthsGather": lengths_gather,
    _MAX_GRAD: lengths_max_grad,
    "LengthsToSegmentIds": lengths_to_segment_ids, "LengthsToOffsets": lengths_to_offsets,
    "LengthsToRanges": lengths_to_ranges, "SegmentIdsToLengths": segment_ids_to_lengths,
    "SegmentIdsToRanges": segment_ids_to_ranges, "LengthsToWeights": lengths_to_weights,
    "SortedSegmentSum": _ids_reduce("SortedSegmentSum", False, True),
    "SortedSegmentMean": _ids_reduce("SortedSegmentMean", True, True),
    "UnsortedSegmentSum": _ids_reduce("UnsortedSegmentSum", False, False),
    "UnsortedSegmentMean": _ids_reduce("UnsortedSegmentMean", True, False),
    "SortedSegmentSumGradient": _ids_reduce_grad2(False), "SortedSegmentMeanGradient": _ids_reduce_grad2(True),
    "UnsortedSegmentSumGradient": _ids_reduce_grad2(False), "UnsortedSegmentMeanGradient": _ids_reduce_grad2(True),
    **{f"Sparse{o}Segment{k}": _sparse_ids_reduce(f"Sparse{o}Segment{k}", k == "Mean", o == "Sorted")
       for o in ("Sorted", "Unsorted") for k in ("Sum", "Mean")},
    **{"SortedSegmentRange" + k: _range_reduce(k) for k in _RANGES},
    **{f"SortedSegmentRange{k}Gradient": _range_reduce_grad(k) for k in _RANGES},
    "SparseLengthsPositionalWeightedSum": sparse_lengths_positional_weighted_sum,
    "SparseLengthsIndicesInGradientSumGradient":
        lambda dy, lengths, idx: lengths_sum_grad(dy, lengths, "SparseLengthsIndicesInGradientSumGradient"),
    "SparseLengthsIndicesInGradientMeanGradient":
        lambda dy, lengths, idx: lengths_mean_grad(dy, lengths, "SparseLengthsIndicesInGradientMeanGradient"),
    "SparseLengthsIndicesInGradientWeightedSumGradient":
        lambda w, dy, lengths, idx: lengths_weighted_sum_grad(
            w, dy, lengths, "SparseLengthsIndicesInGradientWeightedSumGradient"),
    "LengthsMax": lengths_max,
    "LengthsSum": lengths_sum, "LengthsMean": lengths_mean, "SparseLengthsSum": sparse_lengths_sum,
    "SparseLengthsMean": sparse_lengths_mean, "SparseLengthsWeightedSum": sparse_lengths_weighted_sum,
    "LengthsSumGradient": lengths_sum_grad, "LengthsMeanGradient": lengths_mean_grad,
    "LengthsTile": lambda data, lengths: lengths_sum_grad(data, lengths, "LengthsTile"),
    "SparseLengthsWeightedSumWeightsGradient": sparse_lengths_weighted_sum_weights_grad,
    "LengthsWeightedSumGradient": lengths_weighted_sum_grad,
}
