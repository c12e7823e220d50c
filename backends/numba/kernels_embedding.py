"""The numba backend's kernels for an embedding model's step (ir/ops/segments.py, nn.py,
shape.py, losses.py): bag reductions over a table's rows and their gradients, the same
bags as Gather and ReduceSum, the Concat and Split between the bags and the dense layers,
SquaredL2Distance.

With these, a recommendation model's forward and backward (DLRM's shape: bags of ids,
concatenated, an MLP, a loss) compile into one function; only the sparse updates, which
write the tables in place, run between islands (``sparse``). Each kernel gives the
interpreter's answer: rows added in the order the interpreter adds them, a mean scaled by
1 / length rounded to the table's dtype. A failing check (an index outside the table,
lengths that do not add up, split sizes that do not cut the axis) raises ``KernelFail``
with the op's own inputs; the interpreter's kernel then runs on them and reports its error.
"""
from __future__ import annotations

from dslc.ir.budget import max_tensor_bytes
from dslc.ir.ops.ids import wraps
from dslc.ir.ops.shape import given_axis

from .failures import CHECKS, interpreted
from .kernels import kernel as _register
from .kernels import tensor
from .kernels_nn import helper

SUM, MEAN, WEIGHTED = 0, 1, 2  # the helpers' ``mode``


def _floats(*vs, ranks=None) -> bool:
    """Each value a f32/f64 tensor (of the given rank) of one dtype."""
    ts = [tensor(v) for v in vs]
    if any(t is None or t.dtype not in ("f32", "f64") for t in ts) or len({t.dtype for t in ts}) != 1:
        return False
    return ranks is None or all(len(t.shape) == r for t, r in zip(ts, ranks))


def _ints(*vs) -> bool:
    """Each value a 1-D integer tensor."""
    return all((t := tensor(v)) is not None and t.dtype.startswith(("i", "u")) and len(t.shape) == 1 for v in vs)


# ----------------------------------------------------------------------------- bags
# The check every bag kernel makes first (the float bags' and the 8-bit ones'): the text
# stands at the head of each one's helper source (helper() decorates its first function).
_BAD_BAGS = """
def _bad_bags(idx, lengths, rows, nweights, mode):
    # an id outside the table's ROWS, a negative length, lengths that do not add up to the
    # ids, or (mode 2) not one weight per id: the interpreter's error
    for k in range(idx.size):
        if idx[k] < 0 or idx[k] >= rows:
            return True
    total = 0
    for s in range(lengths.size):
        if lengths[s] < 0:
            return True
        total += lengths[s]
    return total != idx.size or (mode == 2 and nweights != idx.size)


@njit(nogil=True)"""

helper(("SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum"), _BAD_BAGS + """
def _bags(data, weights, idx, lengths, mode, site):
    # Y[s] = the rows DATA[INDICES[k]] of segment s added in order (numpy's reduceat: the
    # first row, then each next one added to it); mode 1 scales by 1 / length rounded to
    # DATA's dtype, mode 2 multiplies row k by WEIGHTS[k] (as DATA's dtype) first
    rows, d = data.shape
    if _bad_bags(idx, lengths, rows, weights.size, mode):
        raise KernelFail(site, mode, data, weights, idx, lengths)
    out = np.zeros((lengths.size, d), data.dtype)
    k = 0
    for s in range(lengths.size):
        n = lengths[s]
        if n == 0:
            continue
        r = idx[k]
        if mode == 2:
            w = data.dtype.type(weights[k])
            for j in range(d):
                out[s, j] = data[r, j] * w
            for t in range(k + 1, k + n):
                r, w = idx[t], data.dtype.type(weights[t])
                for j in range(d):
                    out[s, j] += data[r, j] * w
        else:
            for j in range(d):
                out[s, j] = data[r, j]
            for t in range(k + 1, k + n):
                r = idx[t]
                for j in range(d):
                    out[s, j] += data[r, j]
            if mode == 1:
                scale = data.dtype.type(1.0 / n)
                for j in range(d):
                    out[s, j] = out[s, j] * scale
        k += n
    return out
""")


@_register("SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum")
def _bag_kernel(op, a, site):
    weighted = op.name == "SparseLengthsWeightedSum"
    data, idx, lengths = (op.operands[0], op.operands[2], op.operands[3]) if weighted else op.operands
    if not _floats(data, ranks=(2,)) or not _ints(idx, lengths) or \
            (weighted and not _floats(op.operands[1], ranks=(1,)) and not _ints(op.operands[1])):
        return None
    if weighted:
        return f"_bags({a[0]}, {a[1]}, {a[2]}, {a[3]}, {WEIGHTED}, {site('bags')})"
    mode = MEAN if op.name == "SparseLengthsMean" else SUM
    return f"_bags({a[0]}, {a[0]}.ravel()[:0], {a[1]}, {a[2]}, {mode}, {site('bags')})"


def _check_bags(op, mode, data, weights, idx, lengths):
    interpreted(op, *((data, weights, idx, lengths) if mode == WEIGHTED else (data, idx, lengths)))


CHECKS["bags"] = _check_bags


# ----------------------------------------------------------------------------- 8-bit row-wise bags
_Q8_FUSED = ("SparseLengthsSumFused8BitRowwise", "SparseLengthsMeanFused8BitRowwise",
             "SparseLengthsWeightedSumFused8BitRowwise")
_Q8_SPLIT = ("SparseLengthsSum8BitsRowwise", "SparseLengthsMean8BitsRowwise", "SparseLengthsWeightedSum8BitsRowwise")

helper(_Q8_FUSED + _Q8_SPLIT, _BAD_BAGS + """
def _q8_bags(q, sb, weights, idx, lengths, mode, fused, site):
    # the interpreter's order of rounding (ir/ops/quantized.py, Caffe2's): per id in bag order,
    # out = f32(f64(f32(w scale)) q + f32(out + f32(w bias))); scale and bias are the row's
    # last 8 bytes (fused) or its SCALE_BIAS row; mode 1 then scales by f32(1 / length)
    rows = q.shape[0]
    d = q.shape[1] - 8 if fused else q.shape[1]
    if d < 0 or (not fused and (sb.shape[0] != rows or sb.shape[1] != 2)) or \\
            _bad_bags(idx, lengths, rows, weights.size, mode):
        raise KernelFail(site, mode, fused, q, sb, weights, idx, lengths)
    out = np.zeros((lengths.size, d), np.float32)
    tail = np.empty(8, np.uint8)
    k = 0
    for s in range(lengths.size):
        for t in range(k, k + lengths[s]):
            r = idx[t]
            if fused:
                for j in range(8):
                    tail[j] = q[r, d + j]
                pair = tail.view(np.float32)
                scale, bias = pair[0], pair[1]
            else:
                scale, bias = np.float32(sb[r, 0]), np.float32(sb[r, 1])
            w = np.float32(weights[t]) if mode == 2 else np.float32(1.0)
            ws, wb = np.float32(w * scale), np.float32(w * bias)
            for j in range(d):
                shifted = np.float32(out[s, j] + wb)
                out[s, j] = np.float32(np.float64(ws) * np.float64(q[r, j]) + np.float64(shifted))
        if mode == 1:
            inv = np.float32(1.0 / max(lengths[s], 1))
            for j in range(d):
                out[s, j] = np.float32(out[s, j] * inv)
        k += lengths[s]
    return out
""")


def _table(v, rank=2) -> bool:
    return (t := tensor(v)) is not None and t.dtype == "u8" and len(t.shape) == rank


@_register(*_Q8_FUSED, *_Q8_SPLIT)
def _q8_bag_kernel(op, a, site):
    fused, weighted = op.name in _Q8_FUSED, "Weighted" in op.name
    mode = WEIGHTED if weighted else MEAN if "Mean" in op.name else SUM
    q, idx, lengths = (op.operands[0], op.operands[2], op.operands[3]) if weighted else op.operands[:3]
    w = op.operands[1] if weighted else None
    sb = None if fused else op.operands[-1]
    if not _table(q) or not _ints(idx, lengths) or (sb is not None and not _floats(sb, ranks=(2,))) or \
            (weighted and not _floats(w, ranks=(1,)) and not _ints(w)):
        return None
    ai, al = (a[2], a[3]) if weighted else (a[1], a[2])
    weights = a[1] if weighted else "np.zeros(0, np.float32)"
    scales = "np.zeros((0, 2), np.float32)" if fused else a[-1]
    return f"_q8_bags({a[0]}, {scales}, {weights}, {ai}, {al}, {mode}, {fused}, {site('q8_bags')})"


def _check_q8_bags(op, mode, fused, q, sb, weights, idx, lengths):
    ins = [q] + ([weights] if mode == WEIGHTED else []) + [idx, lengths] + ([] if fused else [sb])
    interpreted(op, *ins)


CHECKS["q8_bags"] = _check_q8_bags


helper(("LengthsSumGradient", "LengthsMeanGradient", "LengthsWeightedSumGradient"), """
def _bag_rows(dy, lengths, weights, mode, site, most):
    # the rows of dY repeated by LENGTHS (numpy's repeat); mode 1 scales row s by
    # 1 / LENGTHS[s] rounded to dY's dtype first, mode 2 multiplies row k by WEIGHTS[k];
    # more than ``most`` bytes (the memory budget; counted in float64, which cannot wrap
    # around) is the interpreter's error
    total = 0
    rows = 0.0
    bad = lengths.size != dy.shape[0]
    for s in range(lengths.size):
        if lengths[s] < 0:
            bad = True
        total += lengths[s]
        rows += lengths[s]
    if bad or rows * dy.shape[1] * dy.itemsize > most or (mode == 2 and weights.size != total):
        raise KernelFail(site, mode, dy, lengths, weights)
    d = dy.shape[1]
    out = np.empty((total, d), dy.dtype)
    k = 0
    for s in range(lengths.size):
        scale = dy.dtype.type(1.0 / max(lengths[s], 1))
        for t in range(k, k + lengths[s]):
            w = dy.dtype.type(weights[t]) if mode == 2 else scale
            if mode == 0:
                for j in range(d):
                    out[t, j] = dy[s, j]
            else:
                for j in range(d):
                    out[t, j] = dy[s, j] * w
        k += lengths[s]
    return out
""")


@_register("LengthsSumGradient", "LengthsMeanGradient", "LengthsWeightedSumGradient")
def _bag_rows_kernel(op, a, site):
    weighted = op.name == "LengthsWeightedSumGradient"  # (WEIGHTS, dY, LENGTHS), as Caffe2's
    dy, lengths = op.operands[1:3] if weighted else op.operands[:2]
    if not _floats(dy, ranks=(2,)) or not _ints(lengths) or \
            (weighted and not _floats(op.operands[0], ranks=(1,)) and not _ints(op.operands[0])):
        return None
    if weighted:
        return f"_bag_rows({a[1]}, {a[2]}, {a[0]}, {WEIGHTED}, {site('bag_rows')}, {max_tensor_bytes()})"
    mode = MEAN if op.name == "LengthsMeanGradient" else SUM
    return f"_bag_rows({a[0]}, {a[1]}, {a[0]}.ravel()[:0], {mode}, {site('bag_rows')}, {max_tensor_bytes()})"


def _check_bag_rows(op, mode, dy, lengths, weights):
    interpreted(op, *((weights, dy, lengths) if mode == WEIGHTED else (dy, lengths)))


CHECKS["bag_rows"] = _check_bag_rows


# ----------------------------------------------------------------------------- Gather, ReduceSum
# The other way to write a bag: Gather the rows (ids shaped [batch, bag]), ReduceSum over
# the bag axis; Gather's gradient is sparse (the rows of dY at the ids), ReduceSum's
# spreads dY back over the bag.
helper(("Gather",), """
def _gather_rows(data, idx, wrap, site):
    # DATA's rows at the (flat) indices; with ``wrap`` a negative index counts from the end
    # (ir/ops/ids.py); nothing is checked when nothing moves (rows of no elements)
    rows, d = data.shape
    out = np.empty((idx.size, d), data.dtype)
    if d == 0:
        return out
    for k in range(idx.size):
        r = idx[k] + rows if wrap and idx[k] < 0 else idx[k]
        if r < 0 or r >= rows:
            raise KernelFail(site, data, idx)
        for j in range(d):
            out[k, j] = data[r, j]
    return out
""")


@_register("Gather")
def _gather(op, a, site):
    data, idx = op.operands
    t = tensor(idx)
    if int(op.attrs["axis"]) != 0 or op.attrs["match_outer"] or not _floats(data, ranks=(2,)) or \
            t is None or not t.dtype.startswith(("i", "u")) or not t.shape:
        return None
    wrap = wraps(op.attrs["axis"], op.attrs["wrap_indices"])
    return f"_gather_rows({a[0]}, {a[1]}.ravel(), {wrap}, {site('gather')}).reshape({a[1]}.shape + ({a[0]}.shape[1],))"


CHECKS["gather"] = interpreted

helper(("ReduceSum", "ReduceSumGradient"), """
def _as_3d(x, k):
    # x seen as [prod(dims[:k]), dims[k], prod(dims[k+1:])]
    outer, inner = 1, 1
    for i in range(k):
        outer *= x.shape[i]
    for i in range(k + 1, x.ndim):
        inner *= x.shape[i]
    return np.ascontiguousarray(x).reshape(outer, x.shape[k], inner)


@njit(nogil=True)
def _sum_middle(x):
    # [a, n, b] -> [a, b]: the n slices added in order (numpy's order over an axis that is
    # not the last: the first slice, then each next one added to it)
    a, n, b = x.shape
    out = np.zeros((a, b), x.dtype)
    for i in range(a):
        if n > 0:
            for j in range(b):
                out[i, j] = x[i, 0, j]
        for m in range(1, n):
            for j in range(b):
                out[i, j] += x[i, m, j]
    return out


@njit(nogil=True)
def _spread_middle(dy, n):
    # [a, b] -> [a, n, b]: dY copied into each of the n slices
    a, b = dy.shape
    out = np.empty((a, n, b), dy.dtype)
    for i in range(a):
        for m in range(n):
            for j in range(b):
                out[i, m, j] = dy[i, j]
    return out
""")


def _middle_axis(op, x) -> int | None:
    """ReduceSum's one axis, if it is not the last (whose sum numpy adds pairwise)."""
    t = tensor(x)
    if not _floats(x) or len(t.shape) < 2 or not op.attrs["axes"] or len(op.attrs["axes"]) != 1:
        return None
    k = int(op.attrs["axes"][0]) % len(t.shape)
    return k if k < len(t.shape) - 1 else None


def _shape(dims: list) -> str:
    return "(" + "".join(f"{d}, " for d in dims) + ")"


@_register("ReduceSum")
def _reduce_sum(op, a, site):
    k = _middle_axis(op, op.operands[0])
    if k is None:
        return None
    rank, x = len(tensor(op.operands[0]).shape), a[0]
    dims = [("1" if i == k else f"{x}.shape[{i}]") for i in range(rank) if op.attrs["keepdims"] or i != k]
    return f"_sum_middle(_as_3d({x}, {k})).reshape({_shape(dims)})"


@_register("ReduceSumGradient")
def _reduce_sum_grad(op, a, site):
    dy, x = op.operands
    k = _middle_axis(op, x)
    if k is None or not _floats(dy, x):
        return None
    outer = " * ".join([f"{a[1]}.shape[{i}]" for i in range(k)]) or "1"
    # (dY's elements in order are the [outer, inner] matrix, with or without the kept dim)
    return (f"_spread_middle(np.ascontiguousarray({a[0]}).reshape({outer}, {a[0]}.size // max({outer}, 1)), "
            f"{a[1]}.shape[{k}]).reshape({a[1]}.shape)")


# ----------------------------------------------------------------------------- Concat, Split
helper(("Concat",), """
def _with_sizes(y, sizes):
    # Concat's second output: each input's size along the axis, as int32
    return y, np.asarray(sizes).astype(np.int32)
""")


def _axis(op, rank: int) -> int | None:
    """The op's axis in 0..rank-1 (``axis``, else from ``order``), or None with ``add_axis``."""
    if op.attrs.get("add_axis"):
        return None
    return given_axis(op.name, op.attrs, rank)  # (the verifier has checked it)


@_register("Concat")
def _concat(op, a, site):
    ts = [tensor(v) for v in op.operands]
    if any(t is None for t in ts) or len({(t.dtype, len(t.shape)) for t in ts}) != 1 or not ts[0].shape \
            or any(None in t.shape for t in ts) or op.opdef.fails(op):
        return None  # (unknown dims: the interpreter's checks and message)
    axis = _axis(op, len(ts[0].shape))
    if axis is None or any(t.shape[:axis] + t.shape[axis + 1:] != ts[0].shape[:axis] + ts[0].shape[axis + 1:]
                           for t in ts):
        return None
    y = f"np.concatenate(({', '.join(a)},), axis={axis})"
    if len(op.results) == 1:
        return y
    return f"_with_sizes({y}, ({', '.join(f'{x}.shape[{axis}]' for x in a)},))"


helper(("Split",), """
def _split(x, sizes, n, axis, given, site):
    # x cut along axis 0 or 1 into parts of the given sizes (none given: n equal ones),
    # each a copy
    dim = x.shape[axis]
    cuts = np.empty(n + 1, np.int64)
    cuts[0] = 0
    ok = sizes.size == n or (sizes.size == 0 and dim % n == 0)
    if ok:
        for i in range(n):
            size = sizes[i] if sizes.size else dim // n
            ok = ok and size >= 0
            cuts[i + 1] = cuts[i] + size
        ok = ok and cuts[n] == dim
    if not ok:
        raise KernelFail(site, given, x, sizes)
    parts = []
    for i in range(n):
        parts.append(np.ascontiguousarray(x[cuts[i]:cuts[i + 1]] if axis == 0 else x[:, cuts[i]:cuts[i + 1]]))
    return parts
""")


@_register("Split")
def _split_kernel(op, a, site):
    x = tensor(op.operands[0])
    if x is None or x.dtype not in ("f32", "f64", "i32", "i64") or len(x.shape) != 2 or \
            any(tensor(r) is None for r in op.results):
        return None
    axis = _axis(op, 2)
    if axis is None:
        return None
    n = len(op.results)
    if len(op.operands) == 2:
        if op.attrs.get("split") or not _ints(op.operands[1]):
            return None
        sizes, given = a[1], "True"
    else:
        split = op.attrs.get("split") or ()
        sizes = f"np.array(({', '.join(str(int(s)) for s in split)},), np.int64)" if split else "np.zeros(0, np.int64)"
        given = "False"
    call = f"_split({a[0]}, {sizes}, {n}, {axis}, {given}, {site('split')})"
    return call if n > 1 else f"{call}[0]"


def _check_split(op, given, x, sizes):
    interpreted(op, *((x, sizes) if given else (x,)))


CHECKS["split"] = _check_split


# ----------------------------------------------------------------------------- SquaredL2Distance
helper(("SquaredL2Distance",), """
def _squared_l2(x, y):
    # 0.5 * the sum of (x - y)^2 over each row, in x's dtype
    n, d = x.shape
    out = np.empty(n, x.dtype)
    half = x.dtype.type(0.5)
    for i in range(n):
        s = x.dtype.type(0)
        for j in range(d):
            e = x[i, j] - y[i, j]
            s += e * e
        out[i] = half * s
    return out
""")
helper(("SquaredL2DistanceGradient",), """
def _squared_l2_grad(x, y, dd):
    # ((x - y) dD[i], -(x - y) dD[i]) row by row
    n, d = x.shape
    gx, gy = np.empty_like(x), np.empty_like(x)
    for i in range(n):
        for j in range(d):
            g = (x[i, j] - y[i, j]) * dd[i]
            gx[i, j] = g
            gy[i, j] = -g
    return gx, gy
""")


def _same_known(x, y) -> bool:
    """Two 2-D float tensors of one dtype and one fully known shape (no broadcasting)."""
    return _floats(x, y, ranks=(2, 2)) and None not in tensor(x).shape and tensor(x).shape == tensor(y).shape


@_register("SquaredL2Distance")
def _squared_l2(op, a, site):
    return f"_squared_l2({a[0]}, {a[1]})" if _same_known(*op.operands) else None


@_register("SquaredL2DistanceGradient")
def _squared_l2_grad(op, a, site):
    x, y, dd = op.operands
    if not _same_known(x, y) or not _floats(x, dd, ranks=(2, 1)):
        return None
    return f"_squared_l2_grad({a[0]}, {a[1]}, {a[2]})"
