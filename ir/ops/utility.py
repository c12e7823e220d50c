"""Small utility operators of Caffe2 (one-hot encodings, sizes, shapes, ranges, diagonal
fills); ``FUNCTIONS`` holds the numpy semantics the interpreter runs. A size read from an
input is checked against the memory bound before anything is allocated.

    OneHot([2, 0], 4) -> [[0, 0, 1, 0], [1, 0, 0, 0]]   (float32)
    LengthsRangeFill([2, 3]) -> [0, 1, 0, 1, 2];  LengthsToShape([2, 2, 2]) -> [3, 2]
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import OPS, PURE, SIZED_BY_VALUES, Effect, declare, type_error
from ..types import NUMPY_DTYPES, TensorType
from .infer import dtype_from_code, tensors
from .nn import indices
from ..budget import check_size, total


def _one_hot(types, attrs, n):
    idx, size = tensors("OneHot", types)
    indices("OneHot", idx, "indices")
    if idx.shape is not None and len(idx.shape) != 1:
        type_error(f"OneHot's indices must be 1-D, got {list(idx.shape)}", "one index per row")
    return [TensorType("f32", (None if idx.shape is None else idx.shape[0], None))]


declare("OneHot", 2, _one_hot, traits={PURE, SIZED_BY_VALUES},
        doc="Y[i, INDICES[i]] = 1 in a float32 [len(INDICES), INDEX_SIZE] of zeros")


def _batch_one_hot(types, attrs, n):
    x, lens, vals = tensors("BatchOneHot", types)
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"BatchOneHot's X must be [N, D], got {list(x.shape)}", "one row per example")
    return [TensorType(x.dtype, (None if x.shape is None else x.shape[0], None))]


declare("BatchOneHot", 3, _batch_one_hot, traits={PURE, SIZED_BY_VALUES},
        doc="(X [N, D], LENS [D], VALS) -> Y [N, sum LENS]: column j of feature d is X[:, d] == its VALS "
            "value (VALS holds LENS[d] values per feature)")

def _batch_bucket_one_hot(types, attrs, n):
    x, lens, bounds = tensors("BatchBucketOneHot", types)
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"BatchBucketOneHot's X must be [N, D], got {list(x.shape)}", "one row per example")
    width = None if lens.shape is None or bounds.shape is None or None in lens.shape + bounds.shape \
        else lens.shape[0] + bounds.shape[0]
    return [TensorType(x.dtype, (None if x.shape is None else x.shape[0], width))]


declare("BatchBucketOneHot", 3, _batch_bucket_one_hot, traits={PURE, SIZED_BY_VALUES},
        doc="(X [N, D], LENS [D], BOUNDARIES [sum LENS]) -> Y [N, D + sum LENS]: feature d's LENS[d] "
            "sorted boundaries cut it into LENS[d] + 1 buckets, and Y is 1 at X's bucket")


def _segment_one_hot(types, attrs, n):
    lengths, idx, size = tensors("SegmentOneHot", types)
    indices("SegmentOneHot", idx, "indices")
    return [TensorType("f32", (None if lengths.shape is None else lengths.shape[0], None))]


declare("SegmentOneHot", 3, _segment_one_hot, traits={PURE, SIZED_BY_VALUES},
        doc="(LENGTHS, INDICES, SIZE) -> Y [len(LENGTHS), SIZE] float32: row s is 1 at every index of segment s")

declare("Size", 1, lambda t, a, n: [TensorType("i64", ())], traits={PURE},
        doc="the number of elements of X (int64 scalar)")


def _shape(types, attrs, n):
    x = tensors("Shape", types)[0]
    axes = list(attrs["axes"])
    if axes and x.shape is not None:
        shape_axes(x.shape, axes)
    return [TensorType("i64", (len(axes),) if axes else (None if x.shape is None else len(x.shape),))]


def shape_axes(shape, axes):
    """The dims of ``shape`` at ``axes``, each in 0..rank-1 (Caffe2 takes no negative axis
    here), a repeated one repeated."""
    for a in axes:
        if not 0 <= a < len(shape):
            type_error(f"Shape axis {a} is outside the rank-{len(shape)} input's axes",
                       f"give axes in 0..{len(shape) - 1} (Shape takes no negative axis)")
    return [shape[a] for a in axes]


declare("Shape", 1, _shape, attrs={"axes": []}, traits={PURE},
        doc="the dims of X (1-D int64); with `axes`, the dims at those axes, in their order (repeats repeat)")


def _range(types, attrs, n):
    ts = tensors("Range", types)
    dt = ts[0].dtype
    if any(t.shape not in (None, ()) and t.shape != (1,) for t in ts):
        type_error("Range takes scalars (stop; or start, stop; or start, stop, step)", "pass 0-d tensors")
    return [TensorType(dt, (None,))]


declare("Range", (1, 3), _range, traits={PURE, SIZED_BY_VALUES},
        doc="[start, start + step, ...) below stop, from (stop), (start, stop) or (start, stop, step)")


def _lengths_op(name, out):
    def infer(types, attrs, n):
        (lengths,) = tensors(name, types)
        indices(name, lengths, "lengths")
        if lengths.shape is not None and len(lengths.shape) != 1:
            type_error(f"{name} takes 1-D lengths, got shape {list(lengths.shape)}", "pass one length per segment")
        return [TensorType("i32", out(lengths))]  # (int32 whatever the lengths' type, as Caffe2's)
    return infer


declare("LengthsRangeFill", 1, _lengths_op("LengthsRangeFill", lambda t: (None,)), traits={PURE, SIZED_BY_VALUES},
        doc="0, 1, ..., LENGTHS[i] - 1 for each segment i, one after another")
declare("LengthsToShape", 1, _lengths_op("LengthsToShape", lambda t: (2,)), traits={PURE},
        doc="[len(LENGTHS), the length] for LENGTHS all equal (a ragged batch that is not ragged)")


def _diagonal_fill(types, attrs, n):
    dt = dtype_from_code("DiagonalFill", attrs["dtype"])
    if types:
        (x,) = tensors("DiagonalFill", types)
        shape = x.shape
    elif attrs["shape"] is None:
        type_error("DiagonalFill needs a shape", "pass shape=[...] or an input of that shape")
    else:
        shape = tuple(int(d) for d in attrs["shape"])
    if shape is not None and len(shape) < 2:
        type_error(f"DiagonalFill needs a rank >= 2 shape, got {list(shape)}", "give at least two dims")
    return [TensorType(dt, shape)]


declare("DiagonalFill", (0, 1), _diagonal_fill, attrs={"shape": None, "value": 0.0, "dtype": 1}, traits={PURE, SIZED_BY_VALUES},
        doc="zeros of `shape` (or the input's) with `value` where every index is the same")
no_gradient("OneHot", "BatchOneHot", "BatchBucketOneHot", "SegmentOneHot", "Size", "Shape", "Range", "LengthsRangeFill", "LengthsToShape",
            "DiagonalFill")
OPS.alias("Alias", "Copy")  # (Caffe2's Alias shares the buffer; a value is a value here)


def _nan_check(types, attrs, n):
    ts = tensors("NanCheck", types)
    return [ts[0]]


declare("NanCheck", (1, None), _nan_check, traits={PURE},
        may_fail=lambda op: True,  # (its whole point: it stops a run whose values went bad)
        doc="Y = X, after checking that no input holds a NaN or an infinity (an error if one does)")
gradient("NanCheck")(lambda g: [GradOp("NanCheck", [g.GO[0]], [g.GI[0]])])  # (the gradient checked too)


class NanCheckError(ValueError):
    """A NanCheck that found a NaN or an infinity."""


def nan_check(x, *others):
    for k, v in enumerate((x,) + others):
        arr = np.asarray(v)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            raise NanCheckError(f"NanCheck: input {k} holds a NaN or an infinity")
    return np.array(x, copy=True)


def _free(types, attrs, n):
    ts = tensors("Free", types)
    if n != len(ts):
        type_error(f"Free writes each input back emptied: {len(ts)} inputs, {n} outputs", "name the inputs as outputs")
    return [TensorType(t.dtype, (0,)) for t in ts]


declare("Free", (1, None), _free, results=(1, None), traits={PURE},
        doc="each input emptied (a 0-element tensor of its dtype): memonger's release of a blob after its last read")
no_gradient("Free")


def free(*xs):
    out = [np.zeros(0, dtype=np.asarray(x).dtype) for x in xs]
    return out[0] if len(out) == 1 else tuple(out)


def one_hot(idx, size):
    idx = idx.astype(np.int64).reshape(-1)
    n = int(np.asarray(size).reshape(-1)[0])
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"OneHot: an index is outside 0..{n - 1}")
    check_size("OneHot", (idx.size, n), np.float32)
    out = np.zeros((idx.size, n), np.float32)
    out[np.arange(idx.size), idx] = 1
    return out


def batch_one_hot(x, lens, vals):
    lens = lens.astype(np.int64)
    if x.shape[1] != lens.size or int(lens.sum()) != vals.size:
        raise ValueError(f"BatchOneHot: X has {x.shape[1]} features, LENS {lens.size}, and LENS add up to "
                         f"{int(lens.sum())} for {vals.size} values")
    check_size("BatchOneHot", (x.shape[0], vals.size), x.dtype)
    feature = np.repeat(np.arange(lens.size), lens)
    return (x[:, feature] == vals[None, :]).astype(x.dtype)


def batch_bucket_one_hot(x, lens, bounds):
    lens = lens.astype(np.int64).reshape(-1)
    if x.shape[1] != lens.size or int(lens.sum()) != bounds.size:
        raise ValueError(f"BatchBucketOneHot: X has {x.shape[1]} features, LENS {lens.size}, and LENS add up to "
                         f"{int(lens.sum())} for {bounds.size} boundaries")
    check_size("BatchBucketOneHot", (x.shape[0], lens.size + bounds.size), x.dtype)
    out = np.zeros((x.shape[0], lens.size + bounds.size), dtype=x.dtype)
    start = col = 0
    rows = np.arange(x.shape[0])
    for d, k in enumerate(lens):
        b = bounds[start:start + k]
        # (a value equal to a boundary, or to several equal ones, lands between Caffe2's two counts)
        bucket = (np.searchsorted(b, x[:, d], side="left") + np.searchsorted(b, x[:, d], side="right")) // 2
        out[rows, col + bucket] = 1
        start, col = start + k, col + k + 1
    return out


def segment_one_hot(lengths, idx, size):
    lengths = lengths.astype(np.int64).reshape(-1)
    idx = idx.astype(np.int64).reshape(-1)
    n = int(np.asarray(size).reshape(-1)[0])
    if int(lengths.sum()) != idx.size or (idx.size and (idx.min() < 0 or idx.max() >= n)):
        raise ValueError(f"SegmentOneHot: LENGTHS add up to {int(lengths.sum())} for {idx.size} indices, each "
                         f"must be in [0, {n})")
    check_size("SegmentOneHot", (lengths.size, n), np.float32)
    out = np.zeros((lengths.size, n), np.float32)
    out[np.repeat(np.arange(lengths.size), lengths), idx] = 1
    return out


def size(x):
    return np.int64(np.asarray(x).size)


def shape(x, axes=()):
    dims = np.shape(x)
    return np.asarray(shape_axes(dims, list(axes)) if len(axes) else dims, np.int64)


def range_(*args):
    values = [np.asarray(a).reshape(-1)[0] for a in args]
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (values + [1])[:3]
    if step == 0:
        raise ValueError("Step size cannot be 0 (Range's third input)")
    check_size("Range", (max(0, int(np.ceil((float(stop) - float(start)) / float(step)))),), np.asarray(args[0]).dtype)
    return np.arange(start, stop, step, dtype=np.asarray(args[0]).dtype)


def lengths_range_fill(lengths):
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"LengthsRangeFill: a length is negative ({int(lengths.min())})")
    n = total(lengths)
    check_size("LengthsRangeFill", (n,), np.int64)  # (np.arange's int64, then int32)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.arange(n) - starts).astype(np.int32)


def lengths_to_shape(lengths):
    lengths = np.asarray(lengths).reshape(-1)
    if lengths.size and (lengths != lengths[0]).any():
        raise ValueError(f"LengthsToShape: the lengths differ ({lengths.tolist()[:8]}...); they make no shape")
    return np.array([lengths.size, lengths[0] if lengths.size else 0], np.int32)


def diagonal_fill(*x, shape=None, value=0.0, dtype=1):
    dims = np.shape(x[0]) if x else tuple(int(d) for d in shape)
    dt = NUMPY_DTYPES[dtype_from_code("DiagonalFill", dtype)]
    check_size("DiagonalFill", dims, dt)
    out = np.zeros(dims, dt)
    k = np.arange(min(dims))
    out[(k,) * len(dims)] = value
    return out


# Summarize and Unique (statistics of a tensor; deduplicated indices)
def _summarize(types, attrs, n):
    (x,) = tensors("Summarize", types)
    return [TensorType(x.dtype, (4,))][:n]


# (it writes a file with to_file=1: an effect, so it stays where it is even without an output)
declare("Summarize", 1, _summarize, results=(0, 1), attrs={"to_file": 0, "blob": ""},
        effects=(Effect("io", "write"),),
        doc="Y = [min, max, mean, standard deviation (n - 1)] of X's elements (X not empty); with "
            "to_file, also a line of them in <root folder>/<blob>.summary")
no_gradient("Summarize")


def _unique(types, attrs, n):
    (x,) = tensors("Unique", types)
    indices("Unique", x, "indices")
    if x.shape is not None and len(x.shape) != 1:
        type_error(f"Unique takes a vector of indices, got {list(x.shape)}", "flatten it first")
    return [TensorType(x.dtype, (None,)), TensorType("i32", x.shape)][:n]


declare("Unique", 1, _unique, results=(1, 2), traits={PURE},
        doc="(the distinct values of INDICES, sorted[, each element's position among them, int32])")
no_gradient("Unique")


class SummarizeError(ValueError):
    """Summarize of an empty tensor (no statistics to give)."""


def summarize(x, to_file=0):
    v = x.astype(np.float64).reshape(-1)
    if v.size == 0:
        raise SummarizeError("Summarize of an empty tensor: it has no minimum or mean")
    std = float(np.std(v, ddof=1)) if v.size > 1 else 0.0
    return np.array([v.min(), v.max(), v.mean(), std], dtype=x.dtype)


def unique(x):
    values, inverse = np.unique(x, return_inverse=True)
    return values.astype(x.dtype, copy=False), inverse.astype(np.int32).reshape(x.shape)


def _stump(types, attrs, n):
    (x,) = tensors("StumpFunc", types)
    if x.dtype is not None and x.dtype != "f32":
        type_error(f"StumpFunc takes float32, got {x.dtype}", "Cast the input to float first")
    return [x]


declare("StumpFunc", 1, _stump, attrs={"threshold": 0.0, "low_value": 0.0, "high_value": 0.0}, traits={PURE},
        doc="Y = low_value where X <= threshold, else high_value")
no_gradient("StumpFunc")


def stump_func(x, threshold=0.0, low_value=0.0, high_value=0.0):
    return np.where(x <= threshold, low_value, high_value).astype(x.dtype)


def _merge_id_lists(types, attrs, n):
    ts = tensors("MergeIdLists", types)
    if not ts or len(ts) % 2:
        type_error(f"MergeIdLists takes (LENGTHS, VALUES) pairs, got {len(ts)} inputs")
    for k in range(0, len(ts), 2):
        indices("MergeIdLists", ts[k], "lengths")
        indices("MergeIdLists", ts[k + 1], "ids")
    return [TensorType(ts[0].dtype, ts[0].shape), TensorType(ts[1].dtype, (None,))]


declare("MergeIdLists", (2, None), _merge_id_lists, results=2, traits={PURE},
        doc="(LENGTHS, VALUES) id lists (LENGTHS_1, VALUES_1, ...) of one batch merged: each example's ids of all "
            "the lists, once each, ascending")
no_gradient("MergeIdLists")


def merge_id_lists(*pairs):
    lengths = [np.asarray(pairs[k]).astype(np.int64) for k in range(0, len(pairs), 2)]
    values = [np.asarray(pairs[k + 1]) for k in range(0, len(pairs), 2)]
    n = len(lengths[0])
    if any(len(ls) != n for ls in lengths):
        raise ValueError("MergeIdLists: the lists have different batch sizes")
    starts = [np.concatenate([[0], np.cumsum(ls)]) for ls in lengths]
    rows, out_lengths = [], []
    for i in range(n):
        ids = np.unique(np.concatenate([v[s[i]:s[i + 1]] for v, s in zip(values, starts)]))
        rows.append(ids)
        out_lengths.append(len(ids))
    merged = np.concatenate(rows).astype(values[0].dtype) if rows else np.zeros(0, values[0].dtype)
    return np.array(out_lengths, dtype=pairs[0].dtype), merged


FUNCTIONS = {"StumpFunc": stump_func, "MergeIdLists": merge_id_lists, "NanCheck": nan_check, "BatchBucketOneHot": batch_bucket_one_hot, "SegmentOneHot": segment_one_hot, "Free": free, "OneHot": one_hot, "BatchOneHot": batch_one_hot, "Size": size, "Shape": shape, "Range": range_,
             "LengthsRangeFill": lengths_range_fill, "LengthsToShape": lengths_to_shape, "DiagonalFill": diagonal_fill}
