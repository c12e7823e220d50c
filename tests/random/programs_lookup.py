"""Random lookup programs: every lookup op at negative and edge ids, with a numpy evaluator.

A ``Program`` has a float table ``x0`` (1 to 5 rows, drawn from a seed) and statements,
each a lookup (Gather along axis 0 or 1 with each ``wrap_indices``, BatchGather, the
SparseLengths* bags, the sparse segment sums, LengthsGather, SparseToDense with 2 or 3
inputs, ScatterWeightedSum, ScatterAssign, SparseAdagrad) of an earlier tensor. Ids are
drawn mostly at the edges: -n-1, -n, -1, 0, n-1 and n for a table of n rows, and empty
lists now and then. ``evaluate(p)`` computes each tensor from Caffe2's definition of its op,
without dslc, or says which statements refuse their ids (``Refused``): the first such
statement whose inputs were made is where a run must stop, with a located error naming
the op and the id.

What each op takes, from its Caffe2 definition (ir/ops/ids.py has dslc's side):
- an id in 0..n-1 always; -n..-1 counting from the end for Gather along axis 0 unless
  ``wrap_indices=0``, Gather with ``wrap_indices=1``, and the updates (ScatterWeightedSum,
  ScatterAssign, SparseAdagrad; Caffe2 writes outside the tensor there: docs/differences.md);
- nothing is checked where no value moves (an empty batch).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import programs_tensor
from dslc.core import DataType
from dslc.net_builder import ops
from dslc.task import Task, final_output

BAGS = ("SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum")
SEGMENTS = ("SparseSortedSegmentSum", "SparseSortedSegmentMean", "SparseUnsortedSegmentSum",
            "SparseUnsortedSegmentMean")
UPDATES = ("ScatterWeightedSum", "ScatterAssign", "SparseAdagrad")
OPS = ("Gather", "BatchGather", *BAGS, *SEGMENTS, "LengthsGather", "SparseToDense", *UPDATES)
DIFFERENTIABLE = ("Gather", "BatchGather", *BAGS, *SEGMENTS)  # (their table's gradient is declared)
MAX_SIZE = 60  # elements of one tensor


@dataclass(frozen=True)
class Stmt:
    """``x{dst} = op(x{src}, ...)`` with int ``ids`` (and ``aux``: lengths, segment ids or
    SparseToDense's DATA rows), ``attrs`` as (name, value) pairs, constants ``c{k}``."""
    dst: int
    op: str
    src: int
    ids: tuple
    aux: tuple = ()
    consts: tuple = ()  # names of the float constants it reads
    attrs: tuple = ()


@dataclass(frozen=True)
class Program:
    dtype: str
    int_dtype: str            # of the ids: "int32" or "int64"
    seed: int
    table: tuple              # x0's shape
    const_shapes: tuple       # of c0..
    body: tuple

    def arrays(self) -> dict:
        """x0 and the constants: float32-exact numbers in [-1.5, 1.5)."""
        rng = np.random.default_rng(self.seed)
        named = [("x0", self.table)] + [(f"c{k}", s) for k, s in enumerate(self.const_shapes)]
        return {n: rng.uniform(-1.5, 1.5, s).astype(np.float32).astype(self.dtype) for n, s in named}


def render(p: Program) -> str:
    lines = [f"dtype {p.dtype}, ids {p.int_dtype}, seed {p.seed}, x0 {p.table}, constants {p.const_shapes}"]
    for s in p.body:
        extra = f", aux {list(s.aux)}" if s.aux or s.op in ("LengthsGather",) + BAGS + SEGMENTS else ""
        lines.append(f"x{s.dst} = {s.op}(x{s.src}, ids {list(s.ids)}{extra}, {', '.join(s.consts)})"
                     f"{dict(s.attrs) or ''}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- generation
def _id(draw, n: int) -> int:
    """An id for an axis of ``n``: mostly an edge (-n-1, -n, -1, 0, n-1, n), else any in range."""
    if n and draw(st.integers(0, 2)) == 0:
        return draw(st.integers(0, n - 1))
    return draw(st.sampled_from([-n - 1, -n, -1, 0, n - 1, n]))


def _ids(draw, n: int, count=None) -> tuple:
    k = draw(st.sampled_from([0, 1, 2, 3, 4])) if count is None else count
    return tuple(_id(draw, n) for _ in range(k))


def _cuts(draw, total: int) -> tuple:
    """Lengths adding up to ``total``, empty bags included (none when ``total`` is 0, now and then)."""
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=2)))
    return tuple(b - a for a, b in zip([0] + cuts, cuts + [total]))


class _Drawer(programs_tensor._Drawer):
    """Draws lookup statements (the shapes and constants kept as programs_tensor's are)."""

    def stmt(self, dst: int):
        draw = self.draw
        k = len(self.shapes) - 1 if draw(st.booleans()) else draw(st.integers(0, len(self.shapes) - 1))
        shape = self.shapes[k]
        if not shape:
            return None
        op = draw(st.sampled_from(sorted(self.allowed)))
        n = shape[0]
        if op == "Gather":
            axis = draw(st.sampled_from([0, 1])) if len(shape) > 1 else 0
            wrap = draw(st.sampled_from([None, 0, 1]))
            ids = _ids(draw, shape[axis])
            two_d = bool(ids) and len(ids) % 2 == 0 and draw(st.booleans())  # ([2, k/2] ids)
            attrs = (("axis", axis),) + ((("wrap_indices", wrap),) if wrap is not None else ())
            id_shape = (2, len(ids) // 2) if two_d else (len(ids),)
            out = shape[:axis] + id_shape + shape[axis + 1:]
            return Stmt(dst, op, k, ids, (int(two_d),), attrs=attrs), out
        if op == "BatchGather":
            if len(shape) < 2:
                return None
            ids = _ids(draw, shape[1])
            return Stmt(dst, op, k, ids), shape[:1] + (len(ids),) + shape[2:]
        if op in BAGS:
            ids = _ids(draw, n)
            lengths = _cuts(draw, len(ids))
            consts = (self.const((len(ids),)),) if op == "SparseLengthsWeightedSum" else ()
            return Stmt(dst, op, k, ids, lengths, consts), (len(lengths),) + shape[1:]
        if op in SEGMENTS:
            ids = _ids(draw, n)
            if op.startswith("SparseSorted"):  # (sorted, from 0, without gaps)
                seg = tuple(np.cumsum([0] + [int(draw(st.booleans())) for _ in ids[1:]]).tolist()) if ids else ()
            else:
                seg = tuple(draw(st.integers(0, 2)) for _ in ids)
            return Stmt(dst, op, k, ids, seg), ((max(seg) + 1 if seg else 0),) + shape[1:]
        if op == "LengthsGather":
            lengths = _cuts(draw, n)
            ids = _ids(draw, len(lengths))
            rows = sum(lengths[i] for i in ids if 0 <= i < len(lengths))
            return Stmt(dst, op, k, ids, lengths), (rows,) + shape[1:]
        if op == "SparseToDense":  # (the rows of x{k} are the values, one id each)
            ids = _ids(draw, draw(st.integers(1, 4)), count=n)
            data_rows = draw(st.sampled_from([None, 0, 1, 2, 3, 4]))
            consts = () if data_rows is None else (self.const((data_rows,)),)
            rows = data_rows if data_rows is not None else (max(ids) + 1 if ids and max(ids) >= 0 else 0)
            return Stmt(dst, op, k, ids, consts=consts), (rows,) + shape[1:]
        # the updates: slices of the table's row shape, one per id
        ids = _ids(draw, n)
        slices = self.const((len(ids),) + shape[1:])
        if op == "ScatterWeightedSum":
            consts = (self.const((1,)), slices, self.const((1,)))
        elif op == "SparseAdagrad":
            consts = (self.const(shape), slices, self.const((1,)))
        else:
            consts = (slices,)
        return Stmt(dst, op, k, ids, consts=consts), shape


@st.composite
def programs(draw, dtypes=("float32", "float64"), only=OPS):
    d = _Drawer(draw, set(only))
    rank = draw(st.integers(1, 3))
    d.shapes = [tuple([draw(st.integers(1, 5))] + [draw(st.integers(1, 3)) for _ in range(rank - 1)])]
    body = []
    for _ in range(draw(st.integers(1, 4))):
        made = d.stmt(len(d.shapes))
        if made is None or int(np.prod(made[1])) > MAX_SIZE:
            d.consts = d.consts[:sum(len(s.consts) for s in body)]
            continue
        body.append(made[0])
        d.shapes.append(tuple(made[1]))
    if not body:  # (a statement every table takes)
        body.append(Stmt(1, "Gather", 0, (0,), (0,), attrs=(("axis", 0),)))
    return Program(draw(st.sampled_from(dtypes)), draw(st.sampled_from(["int32", "int64"])),
                   draw(st.integers(0, 2**32 - 1)), d.shapes[0], tuple(d.consts), tuple(body))


# ----------------------------------------------------------------------------- recording
_DTYPE = {"float32": DataType.FLOAT, "float64": DataType.DOUBLE}


def _ints(net, name, values, dtype, shape=None):
    fill = net.GivenTensorInt64Fill if dtype == "int64" else net.GivenTensorIntFill
    return fill([], [name], shape=list(shape or (len(values),)), values=list(values))


def record(p: Program, net) -> None:
    """Record ``p``'s statements into ``net`` (a Net, or ``ops`` in a Task)."""
    for s in p.body:
        out, x = f"x{s.dst}", f"x{s.src}"
        shape = (2, len(s.ids) // 2) if s.op == "Gather" and s.aux[0] else None
        ids = _ints(net, f"{out}_ids", s.ids, p.int_dtype, shape)
        c = list(s.consts)
        if s.op == "Gather":
            net.Gather([x, ids], [out], **dict(s.attrs))
        elif s.op == "BatchGather":
            net.BatchGather([x, ids], [out])
        elif s.op in BAGS:
            lengths = _ints(net, f"{out}_lengths", s.aux, "int32")
            net.__getattr__(s.op)([x] + c + [ids, lengths], [out])
        elif s.op in SEGMENTS:
            seg = _ints(net, f"{out}_segments", s.aux, "int32")
            net.__getattr__(s.op)([x, ids, seg], [out])
        elif s.op == "LengthsGather":
            lengths = _ints(net, f"{out}_lengths", s.aux, "int32")
            net.LengthsGather([x, lengths, ids], [out])
        elif s.op == "SparseToDense":
            net.SparseToDense([ids, x] + c, [out])
        elif s.op == "ScatterWeightedSum":
            net.ScatterWeightedSum([x, c[0], ids, c[1], c[2]], [out])
        elif s.op == "ScatterAssign":
            net.ScatterAssign([x, ids, c[0]], [out])
        else:  # SparseAdagrad: the new table (the moment: a constant's magnitudes)
            moment = net.Abs([c[0]], [f"{out}_moment_in"])
            net.SparseAdagrad([x, moment, ids, c[1], c[2]], [out, f"{out}_moment"])


def build_net(p: Program):
    """``p`` in a new Net whose inputs (x0, c0..) the caller feeds: (net, values)."""
    from dslc import core
    net = core.Net("lookup_program")
    record(p, net)
    return net, p.arrays()


def build(p: Program):
    """``p`` in a new Task: (task, {name: TaskOutput}) for every statement's tensor."""
    with Task() as task:
        for name, v in p.arrays().items():
            made = ops.Const(v.astype(np.float32))
            ops.Cast([made], [name], to=_DTYPE[p.dtype]) if p.dtype == "float64" else ops.Copy([made], [name])
        record(p, ops)
        outputs = {f"x{s.dst}": final_output(f"x{s.dst}") for s in p.body}
    return task, outputs


# ----------------------------------------------------------------------------- the evaluator
class Refused(Exception):
    """A statement's op refuses an id: ``op`` and ``id`` are what its error names."""

    def __init__(self, op, bad):
        super().__init__(f"{op}: id {bad}")
        self.op, self.id = op, bad


def _row(op, i, n, wrap=False):
    """Id ``i`` of an axis of ``n`` as a row number, as ``op`` takes it."""
    if 0 <= i < n:
        return i
    if wrap and -n <= i < 0:
        return i + n
    raise Refused(op, i)


def _rows(op, ids, n, wrap=False):
    return [_row(op, i, n, wrap) for i in ids]


def _bag_sums(rows, lengths, mean=False, weights=None):
    out, k = np.zeros((len(lengths),) + rows.shape[1:], rows.dtype), 0
    for s, m in enumerate(lengths):
        for j in range(k, k + m):
            out[s] = out[s] + (rows[j] * weights[j] if weights is not None else rows[j])
        if mean and m:
            out[s] = out[s] * rows.dtype.type(1.0 / m)  # (Caffe2 scales by 1 / length in the dtype)
        k += m
    return out


def _apply(s: Stmt, x, consts, dt, strict=False):
    op = s.op
    if op == "Gather":
        a = dict(s.attrs)
        axis, wrap = a["axis"], a.get("wrap_indices", -1)
        wrap = axis == 0 if wrap in (-1, None) else bool(wrap)
        id_shape = (2, len(s.ids) // 2) if s.aux[0] else (len(s.ids),)
        out_shape = x.shape[:axis] + id_shape + x.shape[axis + 1:]
        if not np.prod(out_shape):
            if strict:
                _rows(op, s.ids, x.shape[axis], wrap)
            return np.zeros(out_shape, dt)
        rows = np.array(_rows(op, s.ids, x.shape[axis], wrap), np.int64).reshape(id_shape)
        return np.take(x, rows, axis=axis)
    if op == "BatchGather":
        if not x.shape[0] * len(s.ids) * int(np.prod(x.shape[2:])):
            if strict:
                _rows(op, s.ids, x.shape[1])
            return np.zeros(x.shape[:1] + (len(s.ids),) + x.shape[2:], dt)
        return np.take(x, np.array(_rows(op, s.ids, x.shape[1]), np.int64), axis=1)
    if op in BAGS:
        rows = x[_rows(op, s.ids, x.shape[0])] if s.ids else x[:0]
        w = consts[0] if op == "SparseLengthsWeightedSum" else None
        return _bag_sums(rows, s.aux, mean=op == "SparseLengthsMean", weights=w)
    if op in SEGMENTS:
        rows = x[_rows(op, s.ids, x.shape[0])] if s.ids else x[:0]
        k = max(s.aux) + 1 if s.aux else 0
        out = np.zeros((k,) + x.shape[1:], dt)
        counts = np.zeros(k, np.int64)
        for r, g in zip(rows, s.aux):
            out[g] = out[g] + r
            counts[g] += 1
        if op.endswith("Mean"):
            for g in range(k):
                if counts[g]:
                    out[g] = out[g] * dt.type(1.0 / counts[g])
        return out
    if op == "LengthsGather":
        starts = np.cumsum((0,) + s.aux)
        picked = [x[starts[i]:starts[i + 1]] for i in _rows(op, s.ids, len(s.aux))]
        return np.concatenate(picked) if picked else x[:0].copy()
    if op == "SparseToDense":
        rows = consts[0].shape[0] if consts else (max(s.ids) + 1 if s.ids and max(s.ids) >= 0 else 0)
        out = np.zeros((rows,) + x.shape[1:], dt)
        for v, r in zip(x, _rows(op, s.ids, rows)):
            out[r] = out[r] + v
        return out
    out = x.copy()
    rows = _rows(op, s.ids, x.shape[0], wrap=True)
    if op == "ScatterWeightedSum":  # each occurrence scales its row by w0, then every slice adds
        w0, slices, w1 = consts
        for r in rows:
            out[r] = out[r] * w0[0]
        for j, r in enumerate(rows):
            out[r] = out[r] + slices[j] * w1[0]
    elif op == "ScatterAssign":
        for j, r in enumerate(rows):
            out[r] = consts[0][j]
    else:  # SparseAdagrad, per id in order: m += g^2, p += lr g / (sqrt(m) + 1e-5)
        m, g, lr = np.abs(consts[0]), consts[1], consts[2]
        for j, r in enumerate(rows):
            m[r] = m[r] + g[j] * g[j]
            out[r] = out[r] + lr[0] * g[j] / (np.sqrt(m[r]) + dt.type(1e-5))
    return out


def evaluate(p: Program, values: dict | None = None, strict: bool = False):
    """(every made tensor ``x{k}`` by name, the statements that refuse an id with their
    inputs made: ``Refused`` errors, in program order). ``strict``: an id outside its axis
    is refused even where it moves no value (a gradient made dense places it: as in Caffe2,
    SparseToDense checks it)."""
    env = dict(values if values is not None else p.arrays())
    dt = np.dtype(p.dtype)
    refused = []
    for s in p.body:
        if f"x{s.src}" not in env:
            continue  # (its input was never made)
        try:
            env[f"x{s.dst}"] = np.asarray(_apply(s, env[f"x{s.src}"], [env[c] for c in s.consts], dt, strict), dt)
        except Refused as e:
            refused.append(e)
    return {f"x{s.dst}": env[f"x{s.dst}"] for s in p.body if f"x{s.dst}" in env}, refused


# ----------------------------------------------------------------------------- fixed examples
# (CI's derandomized draws start small; these always run: each once disagreed with Caffe2)
def _one(op, ids, table=(3, 4), aux=(), consts=(), const_shapes=(), attrs=(), dtype="float32"):
    return Program(dtype, "int64", 7, table, const_shapes, (Stmt(1, op, 0, ids, aux, consts, attrs),))


EXAMPLES = [
    _one("BatchGather", (-1,)),                                          # refused (dslc wrapped it)
    _one("Gather", (-1,), aux=(0,), attrs=(("axis", 1),)),               # refused along axis 1
    _one("Gather", (-1,), aux=(0,), attrs=(("axis", 0), ("wrap_indices", 0))),  # refused
    _one("Gather", (-1, 0), aux=(0,), attrs=(("axis", 1), ("wrap_indices", 1))),  # wraps
    _one("SparseToDense", (2, -1, 0), consts=("c0",), const_shapes=((4,),)),      # refused: -1
    _one("SparseToDense", (1, 4, 4), table=(3, 2)),                      # 5 rows, from the ids
    _one("ScatterWeightedSum", (-1, 2, -3), consts=("c0", "c1", "c2"), const_shapes=((1,), (3, 4), (1,))),
    _one("SparseAdagrad", (-1, 0, -1), consts=("c0", "c1", "c2"), const_shapes=((3, 4), (3, 4), (1,))),
    _one("LengthsGather", (2, -1), aux=(1, 0, 2)),                       # refused: -1
]
GRADIENT_EXAMPLES = [
    _one("Gather", (-1, 0, -1), aux=(0,), attrs=(("axis", 0),), dtype="float64"),  # sparse, at row 2
    _one("Gather", (-1, 1), aux=(0,), attrs=(("axis", 1), ("wrap_indices", 1)), dtype="float64"),
    _one("BatchGather", (3, 0, 3), dtype="float64"),
    _one("SparseLengthsWeightedSum", (2, 0, 2), aux=(1, 0, 2), consts=("c0",), const_shapes=((3,),),
         dtype="float64"),
]
