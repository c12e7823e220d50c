"""Shape operators: joining tensors along an axis and cutting one apart (Concat, Split).

Without ``axis`` both use Caffe2's ``order``: NCHW means axis 1, NHWC the last axis.
``add_axis`` stacks along a new axis (Concat) or drops the split axis (Split)::

    %y, %sizes = Concat(%a, %b) {axis = 0} : f32[5,2], i32[2]      a f32[2,2], b f32[3,2]
    %p, %q = Split(%y) {axis = 0, split = [1, 4]} : f32[1,2], f32[4,2]
"""
from __future__ import annotations

from ..cost import moves, nbytes
from ..gradients import GradOp, gradient
from ..opdef import PURE, declare, type_error
from ..types import INT_DTYPES, TensorType
from .infer import common_dtype, tensors

_ORDERS = ("NCHW", "NHWC")


def given_axis(op: str, attrs, rank: int | None):
    """The axis the op works on, from ``axis`` or ``order``, counted from 0 (None: rank unknown)."""
    axis = attrs["axis"]
    if axis is None:
        if attrs["order"] not in _ORDERS:
            type_error(f"{op} order must be NCHW or NHWC, got {attrs['order']!r}", "or pass axis=k")
        axis = 1 if attrs["order"] == "NCHW" else -1
    if rank is None:
        return None if axis < 0 else axis
    if not -rank <= axis < rank:
        type_error(f"{op} axis {axis} is out of range for rank {rank}",
                   f"use an axis between {-rank} and {rank - 1}")
    return axis % rank


def _unknown_dims(op) -> bool:
    """when an operand's shape is not fully known, so the dims may not line up at run time"""
    return any(not isinstance(v.type, TensorType) or v.type.shape is None or None in v.type.shape
               for v in op.operands)


def _concat(types, attrs, n):
    ts = tensors("Concat", types)
    dtype = common_dtype("Concat", ts)
    add = bool(attrs["add_axis"])
    ranks = {len(t.shape) for t in ts if t.shape is not None}
    if len(ranks) > 1:
        type_error(f"Concat needs operands of one rank, got ranks {sorted(ranks)}",
                   "Reshape the operands to one rank first")
    rank = ranks.pop() if ranks else None
    axis = given_axis("Concat", attrs, None if rank is None else rank + add)
    if rank is not None and rank == 0 and not add:
        type_error("Concat cannot join scalars along an axis", "pass add_axis=1 to stack them")
    sizes = TensorType("i32", (len(ts),))
    if rank is None or axis is None or any(t.shape is None for t in ts):
        return [TensorType(dtype, None if rank is None else (None,) * (rank + add)), sizes][:n]
    return [TensorType(dtype, _joined(ts, axis, add)), sizes][:n]


def _joined(ts, axis: int, add: bool) -> tuple:
    """The shape of the operands joined along ``axis`` (stacked if ``add``)."""
    out = []
    for k in range(len(ts[0].shape)):
        dims = {t.shape[k] for t in ts}
        if not add and k == axis:
            out.append(None if None in dims else sum(t.shape[k] for t in ts))
            continue
        fixed = dims - {None}
        if len(fixed) > 1:
            type_error(f"Concat operands differ in dim {k}: {' and '.join(str(list(t.shape)) for t in ts)}",
                       f"all dims but the concat axis ({axis}) must match")
        out.append(fixed.pop() if fixed else None)
    if add:
        out.insert(axis, len(ts))
    return tuple(out)


declare("Concat", (1, None), _concat, results=(1, 2), traits={PURE}, may_fail=_unknown_dims, cost=moves(),
        attrs={"axis": None, "order": "NCHW", "add_axis": 0},
        doc="the operands joined along axis (add_axis: stacked along a new axis), and the int32 "
            "sizes each contributed along it")


@gradient("Concat")
def _(g):  # dX_k = the k-th part of dY, cut at the sizes Concat reported
    if g.GO[0] is None:  # only the sizes reach the loss: they are integers, nothing flows back
        return []
    axis_args = g.pick("axis", "order", "add_axis")
    made = []
    sizes = g.O[1] if len(g.O) > 1 else None
    if sizes is None:  # recorded without its sizes output: join the inputs again to learn them
        joined, sizes = f"{g.GI[0]}_rejoined", f"{g.GI[0]}_sizes"
        made.append(GradOp("Concat", list(g.I), [joined, sizes], axis_args))
    return made + [GradOp("Split", [g.GO[0], sizes], list(g.GI), axis_args)]


def _split(types, attrs, n):
    (t,), rest = tensors("Split", types[:1]), tensors("Split", types[1:])
    split = attrs["split"]
    if rest and split:
        type_error("Split takes its sizes from the split argument or from an input, not both",
                   "drop one of them")
    if rest and rest[0].dtype is not None and rest[0].dtype not in INT_DTYPES:
        type_error(f"Split sizes must be integers, got {rest[0]}", "pass an int32 tensor of sizes")
    if split and len(split) != n:
        type_error(f"Split has {len(split)} sizes but {n} outputs", "give one size per output")
    if split and any(int(s) < 0 for s in split):
        type_error(f"Split sizes must be >= 0, got {list(split)}")
    rank = None if t.shape is None else len(t.shape)
    axis = given_axis("Split", attrs, rank)
    if rank is None or axis is None:
        return [TensorType(t.dtype, None if rank is None else (None,) * (rank - bool(attrs["add_axis"])))] * n
    if rank == 0:
        type_error("Split cannot cut a scalar", "pass a tensor of rank 1 or more")
    return [TensorType(t.dtype, _part(t.shape, axis, size, bool(attrs["add_axis"])))
            for size in _sizes(t.shape[axis], split, n, bool(rest), bool(attrs["add_axis"]))]


def _sizes(dim, split, n: int, dynamic: bool, add: bool) -> list:
    """Each output's size along the axis (None where known only at run time)."""
    if split:
        if dim is not None and sum(int(s) for s in split) != dim:
            type_error(f"Split sizes {list(split)} add up to {sum(split)}, the axis has {dim}",
                       "make the sizes add up to the axis length")
        return [int(s) for s in split]
    if dynamic or dim is None:
        return [1 if add else None] * n
    if dim % n:
        type_error(f"Split cannot cut an axis of {dim} into {n} equal parts",
                   "pass split=[...] with the size of each part")
    return [dim // n] * n


def _part(shape, axis: int, size, add: bool) -> tuple:
    if add:
        if size not in (1, None):
            type_error(f"Split with add_axis=1 makes parts of size 1 along the axis, got {size}",
                       "drop add_axis, or cut the axis into parts of 1")
        return shape[:axis] + shape[axis + 1:]
    return shape[:axis] + (size,) + shape[axis + 1:]


# (Split writes all of its data operand, whatever the parts' sizes: known before they are)
declare("Split", (1, 2), _split, results=(1, None), traits={PURE}, may_fail=_unknown_dims,
        cost=moves(written=lambda types, results: nbytes(types[0])),
        attrs={"axis": None, "order": "NCHW", "split": [], "add_axis": 0},
        doc="the operand cut along axis into parts of the sizes in split (or operand 1), equal "
            "parts if neither; add_axis drops the axis from each part")


def _split_by_lengths(types, attrs, n):
    t, lengths = tensors("SplitByLengths", types)
    if lengths.dtype is not None and lengths.dtype not in INT_DTYPES:
        type_error(f"SplitByLengths' lengths must be integers, got {lengths}", "pass an int32 tensor of lengths")
    rank = None if t.shape is None else len(t.shape)
    if rank == 0:
        type_error("SplitByLengths cannot cut a scalar", "pass a tensor of rank 1 or more")
    axis = int(attrs["axis"])
    if rank is not None and not -rank <= axis < rank:
        type_error(f"SplitByLengths axis={axis} is out of range for a rank-{rank} input")
    if rank is None:
        return [TensorType(t.dtype, None)] * n
    axis %= rank
    return [TensorType(t.dtype, t.shape[:axis] + (None,) + t.shape[axis + 1:])] * n


declare("SplitByLengths", 2, _split_by_lengths, results=(1, None), traits={PURE},
        attrs={"axis": 0, "use_scaling_lengths": 0},
        doc="(X, LENGTHS) -> n parts of X along axis: LENGTHS in n equal groups, part i the rows "
            "of group i's lengths; use_scaling_lengths: each length times dim / sum(LENGTHS)")


@gradient("SplitByLengths")
def _(g):  # dX = the parts' gradients joined back (zeros for a part no loss reads)
    made, parts = [], []
    for k, (part, grad) in enumerate(zip(g.O, g.GO)):
        if grad is None:
            grad = f"{g.GI[0]}_zeros_{k}"
            made.append(GradOp("ZerosLike", [part], [grad]))
        parts.append(grad)
    return made + [GradOp("Concat", parts, [g.GI[0]], {"axis": int(g.args.get("axis", 0))})]


@gradient("Split")
def _(g):  # dX = the parts' gradients joined back; a part no loss reads contributes zeros
    made, parts = [], []
    for k, (part, grad) in enumerate(zip(g.O, g.GO)):
        if grad is None:  # zeros of the part's dtype (Caffe2's are float32: docs/differences.md)
            grad = f"{g.GI[0]}_zeros_{k}"
            made.append(GradOp("ZerosLike", [part], [grad]))
        parts.append(grad)
    return made + [GradOp("Concat", parts, [g.GI[0]], g.pick("axis", "order", "add_axis"))]
