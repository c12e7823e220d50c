"""Neural-network tensor ops: matrix products, shape ops, reductions, activations.

Each op is declared with Caffe2's argument names and defaults, its numpy semantics in
``nn_math``, and its gradient right after it (``ir.gradients``). Losses, metrics and
dropout are in ``ir/ops/losses.py``; fills and optimizers in ``ir/ops/optim.py``.
"""
from __future__ import annotations

from ..cost import products
from ..gradients import SparseGrad, GradOp, gradient, no_gradient, unary
from ..opdef import ELEMENTWISE, PURE, REQUIRED, SIZED_BY_VALUES, Effect, declare, type_error
from ..types import FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, TensorType
from .ids import wraps
from .infer import common_dtype, require, tensors

PURE_EW = {PURE, ELEMENTWISE}
# Random ops draw from their own seeded stream, which advances per run: never folded,
# merged or dropped, and kept in order.
RANDOM = (Effect("random", "write"),)


# --- inference helpers shared by the nn modules
def floats(name: str, types, n=None) -> list[TensorType]:
    """Operands that must be float tensors of one dtype (the first ``n``, or all)."""
    ts = tensors(name, types)
    head = ts if n is None else ts[:n]
    require(name, common_dtype(name, head), FLOAT_DTYPES, "float")
    return ts


def indices(name: str, t: TensorType, what: str) -> None:
    if t.dtype is not None and t.dtype not in INT_DTYPES:
        type_error(f"{name} {what} must be integers, got {t.dtype}",
                   "Cast them with Cast(to=core.DataType.INT32) first")


def prod(dims):
    """The product of ``dims``, or None if one is unknown."""
    out = 1
    for d in dims:
        if d is None:
            return None
        out *= d
    return out


def norm_axis(name: str, axis: int, rank: int, arg: str = "axis") -> int:
    """``axis`` as a non-negative index; an ``axis_end`` (where a matrix view splits the
    dims) may also be ``rank``: all dims outer, an inner dim of 1."""
    top = rank if arg == "axis_end" else rank - 1
    if not -rank <= axis <= top:
        type_error(f"{name} {arg}={axis} is out of range for a rank-{rank} input",
                   f"use an {arg} between {-rank} and {top}")
    return axis + rank if axis < 0 else axis


def split2d(name: str, t: TensorType, axis: int, arg: str = "axis"):
    """(outer dims, M, K) of t seen as a matrix at ``axis`` (None where unknown)."""
    if t.shape is None:
        return None, None, None
    if len(t.shape) == 0:
        type_error(f"{name} needs a tensor of rank >= 1, got a scalar", "Reshape it to [1] first")
    a = norm_axis(name, axis, len(t.shape), arg)
    return t.shape[:a], prod(t.shape[:a]), prod(t.shape[a:])


def mismatch(name: str, what: str, a, b, hint):
    """An error if both are known and differ; ``hint`` is made only then (shapes may be unknown)."""
    if a is not None and b is not None and a != b:
        type_error(f"{name}: {what} ({a} vs {b})", hint())


# --- matrix products
def _fc(types, attrs, n):
    x, w, b = floats("FC", types)
    outer, _, k = split2d("FC", x, int(attrs["axis"]))
    _, nw, kw = split2d("FC", w, int(attrs["axis_w"]), "axis_w")
    mismatch("FC", "the input's K differs from the weight's K", k, kw,
             lambda: f"X {list(x.shape)} must have prod(dims[axis:]) equal to W {list(w.shape)}'s "
             "prod(dims[axis_w:]); W is [N, K] for Y = X W^T + b")
    if b.shape is not None and w.shape is not None:
        mismatch("FC", "the bias length differs from N", prod(b.shape), nw,
                 lambda: f"b must have N = {nw} elements (W is {list(w.shape)})")
    shape = None if outer is None else tuple(outer) + (nw,)
    return [TensorType(x.dtype or w.dtype, shape)]


def _fc_flops(types, attrs, results):
    """2 M N K + M N: a multiply and an add per (row, output, input), and the bias (Caffe2's)."""
    x, y = types[0], results[0]
    m, n = prod(y.shape[:-1]), y.shape[-1]
    return 2 * m * n * (prod(x.shape) // m) + m * n


declare("FC", 3, _fc, attrs={"axis": 1, "axis_w": 1}, traits={PURE}, cost=products(_fc_flops),
        doc="Y = X W^T + b, X seen as [M, K] at `axis`, W as [N, K] at `axis_w`; Y is X.dims[:axis] + [N]")


def _fc_grad(types, attrs, n):
    x, w, dy = floats("FCGradient", types)
    return [w, TensorType(w.dtype, None if w.shape is None else (split2d("FC", w, int(attrs["axis_w"]))[1],)), x][:n]


declare("FCGradient", 3, _fc_grad, results=(2, 3), attrs={"axis": 1, "axis_w": 1}, traits={PURE},
        optional_results=1, doc="(dW, db[, dX]) of FC from (X, W, dY)")


@gradient("FC")
def _(g):
    return [GradOp("FCGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[2], g.GI[0]],
                   g.pick("axis", "axis_w"))]


def _fc_transposed(types, attrs, n):
    x, w, b = floats("FCTransposed", types)
    outer, _, k = split2d("FCTransposed", x, int(attrs["axis"]))
    _, kw, nw = split2d("FCTransposed", w, int(attrs["axis_w"]), "axis_w")
    mismatch("FCTransposed", "the input's K differs from the weight's K", k, kw,
             lambda: f"X {list(x.shape)} must have prod(dims[axis:]) equal to W {list(w.shape)}'s "
             "prod(dims[:axis_w]); W is [K, N] for Y = X W + b")
    if b.shape is not None and w.shape is not None:
        mismatch("FCTransposed", "the bias length differs from N", prod(b.shape), nw,
                 lambda: f"b must have N = {nw} elements (W is {list(w.shape)})")
    return [TensorType(x.dtype or w.dtype, None if outer is None else tuple(outer) + (nw,))]


declare("FCTransposed", 3, _fc_transposed, attrs={"axis": 1, "axis_w": 1}, traits={PURE},
        doc="Y = X W + b: FC with its weight stored [K, N] (W seen as a matrix at `axis_w`)")


def _fc_transposed_grad(types, attrs, n):
    x, w, dy = floats("FCTransposedGradient", types)
    bias = None if w.shape is None else (split2d("FC", w, int(attrs["axis_w"]), "axis_w")[2],)
    return [w, TensorType(w.dtype, bias), x]


declare("FCTransposedGradient", 3, _fc_transposed_grad, results=3, attrs={"axis": 1, "axis_w": 1}, traits={PURE},
        doc="(dW, db, dX) of FCTransposed from (X, W, dY)")
no_gradient("FCTransposedGradient")


@gradient("FCTransposed")
def _(g):
    return [GradOp("FCTransposedGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[2], g.GI[0]],
                   g.pick("axis", "axis_w"))]


def _matmul(types, attrs, n):
    a, b = floats("MatMul", types[:2])
    _, a0, a1 = split2d("MatMul", a, int(attrs["axis_a"]), "axis_a")
    _, b0, b1 = split2d("MatMul", b, int(attrs["axis_b"]), "axis_b")
    m, ka = (a1, a0) if attrs["trans_a"] else (a0, a1)
    kb, nn = (b1, b0) if attrs["trans_b"] else (b0, b1)
    mismatch("MatMul", "the inner dimensions differ", ka, kb,
             lambda: f"A {list(a.shape)} (axis_a={attrs['axis_a']}, trans_a={attrs['trans_a']}) times "
             f"B {list(b.shape)} (axis_b={attrs['axis_b']}, trans_b={attrs['trans_b']}) needs equal inner "
             "dims; A is seen as [prod(dims[:axis_a]), prod(dims[axis_a:])], B likewise")
    if len(types) == 3:  # the gradient's form: Y takes the third input's shape
        (like,) = tensors("MatMul", types[2:])
        size = None if like.shape is None else prod(like.shape)
        mismatch("MatMul", "the product's size differs from the third input's", None if m is None or nn is None
                 else m * nn, size, lambda: f"the third input ({list(like.shape)}) gives Y its shape")
        return [TensorType(a.dtype or b.dtype, like.shape)]
    return [TensorType(a.dtype or b.dtype, (m, nn))]


declare("MatMul", (2, 3), _matmul, attrs={"trans_a": 0, "trans_b": 0, "axis_a": 1, "axis_b": 1}, traits={PURE},
        doc="Y = op(A) op(B), A seen as a matrix at `axis_a` (B at `axis_b`); op transposes when "
            "trans_a / trans_b; Y is 2-D, or shaped like a third input (as the gradient uses it)")


@gradient("MatMul")
def _(g):
    a, b, dy = g.I[0], g.I[1], g.GO[0]
    ta, tb = int(g.args.get("trans_a", 0)), int(g.args.get("trans_b", 0))
    axa, axb = int(g.args.get("axis_a", 1)), int(g.args.get("axis_b", 1))
    # dA = dY op(B)^T (transposed back when A was), dB likewise: MatMuls that see A and B as
    # the forward did, shaped like A and B by their third input (Caffe2's form; Caffe2's own
    # maker passes the wrong axes when they are not 1, and its backward fails)
    da = GradOp("MatMul", [b, dy, a], [g.GI[0]], {"trans_a": tb, "trans_b": 1, "axis_a": axb}) if ta else \
        GradOp("MatMul", [dy, b, a], [g.GI[0]], {"trans_a": 0, "trans_b": 1 - tb, "axis_b": axb})
    db = GradOp("MatMul", [dy, a, b], [g.GI[1]], {"trans_a": 1, "trans_b": ta, "axis_b": axa}) if tb else \
        GradOp("MatMul", [a, dy, b], [g.GI[1]], {"trans_a": 1 - ta, "trans_b": 0, "axis_a": axa})
    return [da, db]


# --- shape ops
def _transpose(types, attrs, n):
    (x,) = tensors("Transpose", types)
    axes = attrs["axes"]
    if x.shape is None:
        return [x]
    perm = list(axes) if axes else list(range(len(x.shape)))[::-1]
    if sorted(perm) != list(range(len(x.shape))):
        type_error(f"Transpose axes {list(axes)} are not a permutation of 0..{len(x.shape) - 1}",
                   "list every axis of the input once")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


declare("Transpose", 1, _transpose, attrs={"axes": []}, traits={PURE},
        doc="Y = X with its axes permuted by `axes` (default: reversed)")


@gradient("Transpose")
def _(g):
    axes = list(g.args.get("axes") or [])
    inverse = {"axes": [axes.index(k) for k in range(len(axes))]} if axes else {}
    return [GradOp("Transpose", [g.GO[0]], [g.GI[0]], inverse)]


def _reshape(types, attrs, n):
    x, *given = tensors("Reshape", types)
    shape = attrs["shape"]
    old = TensorType("i64", (None if x.shape is None else len(x.shape),))
    if given:  # the new shape as a tensor: known when the op runs
        if shape is not None:
            type_error("Reshape got both a shape input and the `shape` argument", "give the new shape once")
        indices("Reshape", given[0], "shape input values")
        rank = given[0].shape[0] if given[0].shape is not None and len(given[0].shape) == 1 else None
        return [TensorType(x.dtype, None if rank is None else (None,) * rank), old][:n]
    if shape is None:
        type_error("Reshape needs the `shape` argument", "pass shape=[...] (0 keeps a dim, -1 infers one)")
    if sum(1 for d in shape if d == -1) > 1:
        type_error(f"Reshape shape {list(shape)} has more than one -1", "infer at most one dim")
    out = _reshaped(x, [int(d) for d in shape])
    return [TensorType(x.dtype, out), old][:n]


def _reshaped(x: TensorType, shape: list):
    if x.shape is None:
        return tuple(None if d in (0, -1) else d for d in shape)
    out = [x.shape[i] if d == 0 and i < len(x.shape) else d for i, d in enumerate(shape)]
    total = prod(x.shape)
    if -1 in out:
        known = prod(d for d in out if d != -1)
        out[out.index(-1)] = None if total is None or known is None else (total // known if known else 0)
    if total is not None and prod(out) is not None and prod(out) != total:
        type_error(f"Reshape cannot make shape {list(shape)} from {list(x.shape)} ({total} elements)",
                   "the new shape must hold as many elements as the input")
    return tuple(out)


declare("Reshape", (1, 2), _reshape, results=(1, 2), attrs={"shape": None}, traits={PURE},
        doc="(Y, old_shape): X with the dims `shape` or the second input's values (0 keeps X's dim, "
            "-1 takes the rest), and X's shape as int64")
declare("ResizeLike", 2, lambda t, a, n: [TensorType(tensors("ResizeLike", t)[0].dtype,
                                                     tensors("ResizeLike", t)[1].shape)],
        traits={PURE}, doc="Y = X reshaped to the shape of the second input (same element count)")


def _like_input(name):
    @gradient(name)
    def make(g):  # the ops only move elements: dX is dY reshaped back
        return [GradOp("ResizeLike", [g.GO[0], g.I[0]], [g.GI[0]])]
    return make


_like_input("Reshape")


def _flatten(types, attrs, n):
    (x,) = tensors("Flatten", types)
    outer, m, k = split2d("Flatten", x, int(attrs["axis"]), "axis_end")
    return [TensorType(x.dtype, None if x.shape is None else (m, k))]


declare("Flatten", 1, _flatten, attrs={"axis": 1}, traits={PURE},
        doc="Y = X as a matrix [prod(dims[:axis]), prod(dims[axis:])]")
_like_input("Flatten")


def _flatten_to_vec(types, attrs, n):
    (x,) = tensors("FlattenToVec", types)
    return [TensorType(x.dtype, None if x.shape is None else (prod(x.shape),))]


declare("FlattenToVec", 1, _flatten_to_vec, traits={PURE}, doc="Y = X as a vector of all its elements")
_like_input("FlattenToVec")

# NHWC2NCHW and NCHW2NHWC: an image batch's channels moved (each the other's gradient)
for _name, _perm in (("NHWC2NCHW", (0, 3, 1, 2)), ("NCHW2NHWC", (0, 2, 3, 1))):
    def _layout(types, attrs, n, _name=_name, _perm=_perm):
        (x,) = tensors(_name, types)
        if x.shape is not None and len(x.shape) != 4:
            type_error(f"{_name} needs a 4-D image batch, got rank {len(x.shape)}", "pass X [N, H, W, C] or [N, C, H, W]")
        return [TensorType(x.dtype, None if x.shape is None else tuple(x.shape[p] for p in _perm))]
    declare(_name, 1, _layout, traits={PURE}, doc=f"Y = X transposed by axes {list(_perm)}")
    gradient(_name)(lambda g, _other="NCHW2NHWC" if _name == "NHWC2NCHW" else "NHWC2NCHW":
                    [GradOp(_other, [g.GO[0]], [g.GI[0]])])


def _dims_attr(name, attrs) -> list:
    # (a repeated axis counts once: Caffe2 sorts and dedups dims, with a warning)
    return sorted({int(d) for d in attrs["dims"] or []})


def _expand_dims(types, attrs, n):
    (x,) = tensors("ExpandDims", types)
    dims = _dims_attr("ExpandDims", attrs)
    if x.shape is None:
        return [x]
    out = list(x.shape)
    for d in dims:
        if d > len(out):
            type_error(f"ExpandDims dim {d} is past the end of a rank-{len(out)} shape",
                       "dims are positions in the output")
        out.insert(d, 1)
    return [TensorType(x.dtype, tuple(out))]


def _squeeze(types, attrs, n):
    (x,) = tensors("Squeeze", types)
    dims = _dims_attr("Squeeze", attrs)
    if x.shape is None:
        return [x]
    for d in dims:
        if d >= len(x.shape) or x.shape[d] not in (1, None):
            type_error(f"Squeeze dim {d} of shape {list(x.shape)} is not 1", "squeeze only dims of size 1")
    return [TensorType(x.dtype, tuple(s for k, s in enumerate(x.shape) if k not in dims))]


declare("ExpandDims", 1, _expand_dims, attrs={"dims": REQUIRED}, traits={PURE},
        doc="Y = X with size-1 dims inserted at the positions `dims`")
declare("Squeeze", 1, _squeeze, attrs={"dims": REQUIRED}, traits={PURE},
        doc="Y = X without its size-1 dims at `dims`")
# ExpandDims and Squeeze undo each other: their gradients read only dY and `dims` (not X),
# so they stay right when the op runs in place (Caffe2's BatchNormalization layer squeezes in place)
@gradient("ExpandDims")
def _expand_dims_grad(g):
    return [GradOp("Squeeze", [g.GO[0]], [g.GI[0]], {"dims": g.args["dims"]})]


@gradient("Squeeze")
def _squeeze_grad(g):
    return [GradOp("ExpandDims", [g.GO[0]], [g.GI[0]], {"dims": g.args["dims"]})]


def _slice(types, attrs, n):
    x = tensors("Slice", types)[0]
    starts, ends = attrs["starts"], attrs["ends"]
    if starts is None or ends is None or len(starts) != len(ends):
        type_error("Slice needs `starts` and `ends` lists of one length",
                   "pass starts=[...], ends=[...] (end -1 means the dim's end)")
    if x.shape is None:
        return [TensorType(x.dtype, None)]
    if len(starts) > len(x.shape):
        type_error(f"Slice has {len(starts)} starts for a rank-{len(x.shape)} input", "one per dim at most")
    out = list(x.shape)
    for k, (s, e) in enumerate(zip(starts, ends)):
        dim = x.shape[k]
        if dim is None:
            out[k] = None
            continue
        s, e = (dim + 1 + s if s < 0 else s), (dim + 1 + e if e < 0 else e)
        if not 0 <= s <= e <= dim:
            type_error(f"Slice [{starts[k]}:{ends[k]}] is outside dim {k} of size {dim}",
                       "starts and ends must be within the dim (negative counts from the end, -1 = end)")
        out[k] = e - s
    return [TensorType(x.dtype, tuple(out))]


declare("Slice", 1, _slice, attrs={"starts": None, "ends": None}, traits={PURE},
        doc="Y = X[starts[0]:ends[0], ...]; a negative index i means dim + 1 + i")
declare("SliceGradient", 2, lambda t, a, n: [tensors("SliceGradient", t)[0]],
        attrs={"starts": None, "ends": None}, traits={PURE},
        doc="dX: zeros of X's shape with dY in the sliced part; inputs (X, dY)")


@gradient("Slice")
def _(g):
    return [GradOp("SliceGradient", [g.I[0], g.GO[0]], [g.GI[0]], g.pick("starts", "ends"))]


def _gather(types, attrs, n, name="Gather"):
    data, idx = tensors(name, types)
    indices(name, idx, "indices")
    if data.shape is not None and len(data.shape) == 0:
        type_error(f"{name} needs data of rank >= 1", "gather rows of a vector or matrix")
    if data.shape is None or idx.shape is None:
        return [TensorType(data.dtype, None)]
    rank, axis = len(data.shape), int(attrs["axis"])
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        type_error(f"{name} axis={axis} is out of range for data of rank {rank}", f"use an axis in [{-rank}, {rank})")
    if attrs["match_outer"]:
        if tuple(idx.shape[:a]) != tuple(data.shape[:a]) and None not in idx.shape[:a] + data.shape[:a]:
            type_error(f"{name} match_outer: the indices' outer dims {list(idx.shape[:a])} are not the data's "
                       f"{list(data.shape[:a])}", "give one list of indices per outer position")
        return [TensorType(data.dtype, tuple(data.shape[:a]) + tuple(idx.shape[a:]) + tuple(data.shape[a + 1:]))]
    return [TensorType(data.dtype, tuple(data.shape[:a]) + tuple(idx.shape) + tuple(data.shape[a + 1:]))]


declare("Gather", 2, _gather, attrs={"axis": 0, "match_outer": 0, "wrap_indices": -1, "dense_gradient": 0},
        traits={PURE},
        doc="Y = DATA[INDICES] along `axis` (numpy's take); match_outer: the indices' outer dims pair "
            "with the data's, Y[i, ...] = DATA[i, INDICES[i, ...]]; a negative id counts from the end "
            "where `wrap_indices` says so (-1, the default: along axis 0 only, as in Caffe2); any other "
            "id outside the axis is an error. Along axis 0 its gradient is sparse, unless dense_gradient")
declare("BatchGather", 2, lambda t, a, n: _gather(t, dict(a, axis=1), n, "BatchGather"), attrs={"match_outer": 0},
        traits={PURE}, doc="Gather along axis 1 (the rows of every batch item); every id in 0..dim-1")
declare("BatchGatherGradient", 3, lambda t, a, n: [tensors("BatchGatherGradient", t)[0]],
        attrs={"axis": 1, "match_outer": 0, "wrap_indices": 0}, traits={PURE},
        doc="dDATA of a Gather along `axis` from (DATA, INDICES, dY): zeros, dY added at the gathered places "
            "(wrap_indices: a negative id counts from the end, else it is an error)")
no_gradient("BatchGatherGradient")


@gradient("Gather")
def _(g):  # along the first axis, dDATA is sparse: the rows of dY, at INDICES
    axis = int(g.args.get("axis", 0))
    # (a negative id the forward wrapped lands where it read; Caffe2's gradient refuses it)
    wrap = int(wraps(axis, g.args.get("wrap_indices", -1)))
    if axis == 0 and not g.args.get("match_outer", 0):
        if g.args.get("dense_gradient", 0):  # (Caffe2's: the rows of dY added into zeros like DATA)
            return [GradOp("SparseToDense", [g.I[1], g.GO[0], g.I[0]], [g.GI[0]], {"wrap_indices": wrap})]
        return [SparseGrad(0, g.I[1], g.GO[0])]
    return [GradOp("BatchGatherGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0]],
                   {"axis": axis, "match_outer": g.args.get("match_outer", 0), "wrap_indices": wrap})]


@gradient("BatchGather")
def _(g):
    return [GradOp("BatchGatherGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0]], {"axis": 1, **g.pick("match_outer")})]


def _sparse_to_dense(types, attrs, n):
    idx, values, *data = tensors("SparseToDense", types)
    indices("SparseToDense", idx, "indices")
    if values.shape is not None and idx.shape is not None:
        k = len(idx.shape)
        if len(values.shape) < max(k, 1) or (None not in values.shape[:k] + idx.shape
                                              and values.shape[:k] != idx.shape):
            type_error(f"SparseToDense has {list(idx.shape)} indices and values of shape {list(values.shape)}",
                       "give one row of VALUES per index (VALUES' first dims are the indices' shape)")
    if data and data[0].shape is not None and len(data[0].shape) == 0:
        type_error("SparseToDense's DATA (whose first dim the output takes) is a scalar",
                   "pass a tensor with as many rows as the output, or leave it out")
    if data and int(attrs["output_first_dim"]) > 0:
        type_error("SparseToDense takes output_first_dim only without a third input",
                   "leave out DATA or output_first_dim (as Caffe2)")
    if values.shape is None or idx.shape is None:
        return [TensorType(values.dtype, None)]
    rows = data[0].shape[0] if data and data[0].shape is not None else \
        int(attrs["output_first_dim"]) if not data and int(attrs["output_first_dim"]) > 0 else None
    return [TensorType(values.dtype, (rows,) + tuple(values.shape[len(idx.shape):]))]


declare("SparseToDense", (2, 3), _sparse_to_dense, attrs={"output_first_dim": 0, "wrap_indices": 0},
        traits={PURE, SIZED_BY_VALUES},
        doc="(INDICES, VALUES[, DATA]) -> zeros with VALUES' rows added at INDICES (repeats add up): "
            "as many rows as DATA has, else `output_first_dim`, else the largest index + 1 (a sparse "
            "gradient made dense); each index in 0..rows-1 (wrap_indices: -rows..-1 count from the end)")


@gradient("SparseToDense")
def _(g):  # dVALUES: the rows of dY at INDICES (Caffe2's Gather); the indices and DATA's shape get none
    return [GradOp("Gather", [g.GO[0], g.I[0]], [g.GI[1]], {"wrap_indices": int(bool(g.args.get("wrap_indices", 0)))})]


# --- reductions
def _sum_elements(types, attrs, n):
    (x,) = tensors("SumElements", types)
    require("SumElements", x.dtype, NUMERIC_DTYPES, "numeric")
    return [TensorType(x.dtype, ())]


declare("SumElements", 1, _sum_elements, attrs={"average": 0}, traits={PURE},
        doc="y = sum of all elements of X (their mean if `average`), a scalar")
declare("SumElementsGradient", 2, lambda t, a, n: [tensors("SumElementsGradient", t)[0]],
        attrs={"average": 0}, traits={PURE}, doc="dX from (X, dY) of SumElements")


def _sum_elements_int(types, attrs, n):
    (x,) = tensors("SumElementsInt", types)
    require("SumElementsInt", x.dtype, ("i32",), "int32")
    return [TensorType("i32", ())]


declare("SumElementsInt", 1, _sum_elements_int, traits={PURE}, doc="y = the sum of an int32 tensor's elements")
no_gradient("SumElementsInt")


@gradient("SumElements")
def _(g):
    return [GradOp("SumElementsGradient", [g.I[0], g.GO[0]], [g.GI[0]], g.pick("average"))]


def reduce_type(name):
    def infer(types, attrs, n):
        (x,) = tensors(name, types)
        require(name, x.dtype, NUMERIC_DTYPES, "numeric")
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        rank = len(x.shape)
        axes = [norm_axis(name, int(a), rank) for a in (attrs["axes"] or range(rank))]
        keep = int(attrs["keepdims"])
        shape = [1 if k in axes else d for k, d in enumerate(x.shape) if keep or k not in axes]
        return [TensorType(x.dtype, tuple(shape))]
    return infer


for _name, _what in (("ReduceSum", "sum"), ("ReduceMean", "mean")):
    declare(_name, 1, reduce_type(_name), attrs={"axes": None, "keepdims": 1}, traits={PURE},
            doc=f"Y = the {_what} of X over `axes` (default all); reduced dims kept as 1 if `keepdims`")
    declare(_name + "Gradient", 2, lambda t, a, n: [tensors("ReduceGradient", t)[1]],
            attrs={"axes": None, "keepdims": 1}, traits={PURE},
            doc=f"dX from (dY, X) of {_name}: dY spread back over the reduced dims")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.GO[0], g.I[0]], [g.GI[0]],
                                                g.pick("axes", "keepdims"))])


def _row_wise_arg_max(types, attrs, n):
    (x,) = tensors("RowWiseArgMax", types)
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"RowWiseArgMax needs a 2-D input, got shape {list(x.shape)}", "Flatten it first")
    return [TensorType("i64", (None if x.shape is None else x.shape[0], 1))]


declare("RowWiseArgMax", 1, _row_wise_arg_max, traits={PURE},
        doc="Y[i, 0] = the column of row i's largest value (the first of ties), int64")
no_gradient("RowWiseArgMax")


# --- activations
def _float_unary(name, doc, attrs=None):
    declare(name, 1, lambda t, a, n: [floats(name, t)[0]], attrs=attrs or {}, traits=PURE_EW, doc=doc)


def _float_grad(name, doc, attrs=None, traits=PURE_EW):
    declare(name, 2, lambda t, a, n: [floats(name, t)[1]], attrs=attrs or {}, traits=traits, doc=doc)


_float_unary("Sigmoid", "y = 1 / (1 + exp(-x))")
_float_grad("SigmoidGradient", "dX = dY * y * (1 - y), inputs (Y, dY)")
unary("Sigmoid", "SigmoidGradient")
_float_unary("Tanh", "y = tanh(x)")
_float_grad("TanhGradient", "dX = dY * (1 - y^2), inputs (Y, dY)")
unary("Tanh", "TanhGradient")
_float_grad("ReluGradient", "dX = dY where y > 0, else 0; inputs (Y, dY)")
unary("Relu", "ReluGradient")

declare("Softmax", 1, lambda t, a, n: [floats("Softmax", t)[0]], attrs={"axis": 1}, traits={PURE},
        doc="Y = exp(X) / sum(exp(X)) over each row of X seen as a matrix at `axis`")
_float_grad("SoftmaxGradient", "dX from (Y, dY) of Softmax", attrs={"axis": 1}, traits={PURE})
unary("Softmax", "SoftmaxGradient", args=("axis",))

_CLIP = {"min": None, "max": None}
_float_unary("Clip", "y = x limited to [min, max] (unset bounds are open)", _CLIP)
_float_grad("ClipGradient", "dX = dY where min < y < max, else 0; inputs (Y, dY)", _CLIP)
unary("Clip", "ClipGradient", args=("min", "max"))
