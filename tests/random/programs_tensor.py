"""Random tensor programs: chains of shape, reduction, activation, matrix, convolution,
pooling and loop ops on float32 or float64 tensors of random shapes, with a plain numpy
evaluator (convolutions and pooling by definition: programs_windows.py).

A ``Program`` has input tensors ``x0..`` (drawn from a seed) and statements, each making
one new tensor from earlier ones (and, for MatMul / FC / Concat / SquaredL2Distance, from new constant
tensors ``c0..``). ``build(p)`` records it in a Task; ``build_net(p)`` records it in a Net
fed from the workspace (for gradients); ``evaluate(p)`` computes every tensor with numpy
from Caffe2's definitions of the ops, without dslc.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from dslc import core
from dslc.core import DataType
from dslc.net_builder import ops
from dslc.task import Task, final_output

import programs_windows as windows

ELEMENTWISE = ("Sigmoid", "Tanh", "Relu", "Negative", "Abs", "Scale", "Clip", "Sqr", "Exp", "Sqrt", "Log",
               "LeakyRelu", "Elu", "ReluN", "Softsign", "Softplus", "Swish", "HardSigmoid", "Cube",
               "Reciprocal", "Rsqrt", "Cbrt", "Sin", "Cos", "Gelu", "Log1p")
BINARY = ("Add", "Sub", "Mul")
# where the op has no derivative (Clip: its bounds; Reciprocal and Cbrt: 0, where it is not finite)
KINKS = {"Relu": (0.0,), "Abs": (0.0,), "LeakyRelu": (0.0,), "Elu": (0.0,), "ReluN": (0.0, 1.0),
         "HardSigmoid": (-2.5, 2.5), "Reciprocal": (0.0,), "Cbrt": (0.0,)}
POSITIVE = ("Sqrt", "Log", "Rsqrt", "Log1p")
ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")  # drawn 3 times as often as the other elementwise ops  # defined (with a derivative) only for positive inputs
MAX_SIZE = 48  # elements of one tensor
# the statements a program draws from, by kind; "Accumulate" is a loop adding a tensor
BAGS = ("SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum", "Gather")  # a table's rows
KINDS = {"elementwise": ELEMENTWISE, "binary": BINARY, "Reduce": ("ReduceSum", "ReduceMean"), "Bags": BAGS,
         **{k: (k,) for k in ("Transpose", "Reshape", "Flatten", "ExpandDims", "Squeeze", "Slice",
                              "SumElements", "Softmax", "MatMul", "FC", "Concat", "SquaredL2Distance", "Conv",
                              "ConvTranspose", "Accumulate")},
         "Pool": ("MaxPool", "AveragePool")}
# elementwise chains are what fusion and its kernels work on: drawn more often
WEIGHTS = {"elementwise": 4, "binary": 2, "Bags": 2, "Conv": 2, "Pool": 2}
SCALAR_KINDS = ("elementwise", "binary", "ExpandDims", "SumElements", "Accumulate")  # take 0-d
ALL_OPS = frozenset(op for names in KINDS.values() for op in names)


@dataclass(frozen=True)
class Stmt:
    """``x{dst} = op(operands)``: operands name earlier tensors ("x3") or constants ("c0")."""
    dst: int
    op: str
    operands: tuple
    attrs: tuple = ()  # (name, value) pairs
    count: int = 0     # Accumulate: x{dst} = x + x + ... (1 + count terms) in a loop


@dataclass(frozen=True)
class Program:
    dtype: str                  # "float32" or "float64"
    seed: int                   # draws the inputs' and constants' values
    input_shapes: tuple         # of x0.. (the first tensors)
    const_shapes: tuple         # of c0..
    body: tuple                 # Stmt...

    def arrays(self) -> dict:
        """The inputs' and constants' values: float32-exact numbers in [-1.5, 1.5)."""
        rng = np.random.default_rng(self.seed)
        named = [(f"x{k}", s) for k, s in enumerate(self.input_shapes)]
        named += [(f"c{k}", s) for k, s in enumerate(self.const_shapes)]
        return {n: rng.uniform(-1.5, 1.5, s).astype(np.float32).astype(self.dtype) for n, s in named}


def render(p: Program) -> str:
    lines = [f"dtype {p.dtype}, seed {p.seed}, inputs {p.input_shapes}, constants {p.const_shapes}"]
    for s in p.body:
        extra = f" x{1 + s.count}" if s.op == "Accumulate" else ""
        lines.append(f"x{s.dst} = {s.op}({', '.join(s.operands)}){dict(s.attrs) or ''}{extra}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- generation
def _factor(draw, size: int, rank: int) -> tuple:
    """A shape of ``rank`` dims whose product is ``size``."""
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        size //= d
    return tuple(dims) + (size,)


def _shape(draw, max_rank=4, min_rank=1) -> tuple:
    rank = draw(st.integers(min_rank, max_rank))
    if rank < 4:
        return tuple(draw(st.integers(1, 4 if rank < 4 else 3)) for _ in range(rank))
    # (an image batch [N, C, H, W] for Conv now and then: smaller dims, at most 48 elements)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    h, w = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    while n * c * h * w > MAX_SIZE:
        n, c = (n - 1, c) if n > 1 else (n, c - 1)
    return n, c, h, w


class _Drawer:
    """Draws statements, tracking every tensor's shape."""

    def __init__(self, draw, allowed: set):
        self.draw, self.allowed = draw, allowed
        self.shapes: list = []
        self.consts: list = []

    def const(self, shape) -> str:
        self.consts.append(tuple(shape))
        return f"c{len(self.consts) - 1}"

    def stmt(self, dst: int) -> Stmt | None:
        draw = self.draw
        last = len(self.shapes) - 1  # (as in a model, most statements read the latest tensor)
        k = last if draw(st.booleans()) else draw(st.integers(0, last))
        shape = self.shapes[k]
        kind = draw(st.sampled_from([kind for kind, names in KINDS.items() if self.allowed & set(names)
                                     for _ in range(WEIGHTS.get(kind, 1))]))
        if not shape and kind not in SCALAR_KINDS:
            return None
        return getattr(self, "draw_" + kind)(dst, f"x{k}", shape)

    def pick(self, names):
        return self.draw(st.sampled_from([n for n in names if n in self.allowed]))

    def draw_elementwise(self, dst, x, shape):
        op = self.pick(ELEMENTWISE + ACTIVATIONS * 2)
        attrs = ()
        if op == "Scale":
            attrs = (("scale", self.draw(st.sampled_from([-2.0, -0.5, 0.25, 1.5]))),)
        elif op == "Clip":
            attrs = (("min", -0.75), ("max", self.draw(st.sampled_from([0.5, 1.0]))))
        elif op in ("LeakyRelu", "Elu"):
            attrs = (("alpha", self.draw(st.sampled_from([0.1, 0.5]))),)
        elif op == "ReluN":
            attrs = (("n", 1.0),)
        return Stmt(dst, op, (x,), attrs), shape

    def draw_binary(self, dst, x, shape):
        same = [f"x{j}" for j, s in enumerate(self.shapes) if s == shape]
        return Stmt(dst, self.pick(BINARY), (x, self.draw(st.sampled_from(same)))), shape

    def draw_Transpose(self, dst, x, shape):
        axes = tuple(self.draw(st.permutations(range(len(shape)))))
        return Stmt(dst, "Transpose", (x,), (("axes", axes),)), tuple(shape[a] for a in axes)

    def draw_Reshape(self, dst, x, shape):
        new = _factor(self.draw, int(np.prod(shape)), self.draw(st.integers(1, 3)))
        spelled = list(new)
        if self.draw(st.booleans()):
            spelled[self.draw(st.integers(0, len(new) - 1))] = -1
        return Stmt(dst, "Reshape", (x,), (("shape", tuple(spelled)),)), new

    def draw_Flatten(self, dst, x, shape):
        axis = self.draw(st.integers(0, len(shape)))
        return (Stmt(dst, "Flatten", (x,), (("axis", axis),)),
                (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))

    def draw_ExpandDims(self, dst, x, shape):
        if len(shape) >= 4:
            return None
        pos = self.draw(st.integers(0, len(shape)))
        return Stmt(dst, "ExpandDims", (x,), (("dims", (pos,)),)), shape[:pos] + (1,) + shape[pos:]

    def draw_Squeeze(self, dst, x, shape):
        ones = [i for i, d in enumerate(shape) if d == 1]
        if not ones or len(shape) == 1:
            return None
        dims = tuple(sorted(self.draw(st.sets(st.sampled_from(ones), min_size=1))))
        if len(dims) == len(shape):
            dims = dims[:-1]
        return Stmt(dst, "Squeeze", (x,), (("dims", dims),)), tuple(d for i, d in enumerate(shape)
                                                                     if i not in dims)

    def draw_Slice(self, dst, x, shape):
        starts = tuple(self.draw(st.integers(0, d - 1)) for d in shape)
        ends = tuple(self.draw(st.sampled_from([s + 1, d, -1])) for s, d in zip(starts, shape))
        stops = [d if e == -1 else e for e, d in zip(ends, shape)]
        return (Stmt(dst, "Slice", (x,), (("starts", starts), ("ends", ends))),
                tuple(e - s for s, e in zip(starts, stops)))

    def draw_Reduce(self, dst, x, shape):
        op = self.pick(KINDS["Reduce"])
        axes = tuple(sorted(self.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
        keep = self.draw(st.sampled_from([0, 1]))
        out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)
        return Stmt(dst, op, (x,), (("axes", axes), ("keepdims", keep))), out

    def draw_SumElements(self, dst, x, shape):
        return Stmt(dst, "SumElements", (x,), (("average", self.draw(st.sampled_from([0, 1]))),)), ()

    def draw_Softmax(self, dst, x, shape):
        axis = self.draw(st.integers(0, len(shape) - 1))
        return Stmt(dst, "Softmax", (x,), (("axis", axis),)), shape

    def draw_MatMul(self, dst, x, shape):
        if len(shape) != 2:
            return None
        ta, tb = self.draw(st.sampled_from([0, 1])), self.draw(st.sampled_from([0, 1]))
        m, k = shape[::-1] if ta else shape
        n = self.draw(st.integers(1, 4))
        c = self.const((n, k) if tb else (k, n))
        return Stmt(dst, "MatMul", (x, c), (("trans_a", ta), ("trans_b", tb))), (m, n)

    def draw_FC(self, dst, x, shape):
        if len(shape) < 2:
            return None
        k, n = int(np.prod(shape[1:])), self.draw(st.integers(1, 4))
        return Stmt(dst, "FC", (x, self.const((n, k)), self.const((n,)))), (shape[0], n)

    def draw_Concat(self, dst, x, shape):
        axis = self.draw(st.integers(0, len(shape) - 1))
        extra = self.draw(st.integers(1, 3))
        other = self.const(shape[:axis] + (extra,) + shape[axis + 1:])
        out = shape[:axis] + (shape[axis] + extra,) + shape[axis + 1:]
        return Stmt(dst, "Concat", (x, other), (("axis", axis),)), out

    def draw_SquaredL2Distance(self, dst, x, shape):
        return Stmt(dst, "SquaredL2Distance", (x, self.const(shape))), shape[:1]

    def draw_Bags(self, dst, x, shape):
        """Rows of ``x`` (a table: its first dim) picked by ids: summed (or averaged, or weighted)
        in bags of given lengths, or gathered; the ids and lengths are attributes (int
        constants the recording makes), the weights a new constant."""
        op = self.pick(BAGS)
        # (Gather along axis 0 takes a negative id as counting from the end, as Caffe2's; the
        # bags refuse one: tests/random/programs_lookup.py draws those, and ids out of range)
        low = -shape[0] if op == "Gather" else 0
        ids = tuple(self.draw(st.lists(st.integers(low, shape[0] - 1), min_size=1, max_size=6)))
        if op == "Gather":
            return Stmt(dst, op, (x,), (("ids", ids),)), (len(ids),) + shape[1:]
        cuts = sorted(self.draw(st.lists(st.integers(0, len(ids)), max_size=2)))
        lengths = tuple(b - a for a, b in zip([0] + cuts, cuts + [len(ids)]))  # (empty bags too)
        operands = (x, self.const((len(ids),))) if op == "SparseLengthsWeightedSum" else (x,)
        return Stmt(dst, op, operands, (("ids", ids), ("lengths", lengths))), (len(lengths),) + shape[1:]

    def _window_stmt(self, dst, made):
        """A statement from programs_windows' (op, operands, attrs, shape), or None."""
        if made is None or made[0] not in self.allowed:
            return None
        op, operands, attrs, shape = made
        return Stmt(dst, op, operands, attrs), shape

    def draw_Conv(self, dst, x, shape):
        """A convolution (in groups, every legacy_pad mode) with new weight and bias constants."""
        return self._window_stmt(dst, windows.draw_conv(self.draw, self.const, x, shape))

    def draw_ConvTranspose(self, dst, x, shape):
        return self._window_stmt(dst, windows.draw_conv_transpose(self.draw, self.const, x, shape))

    def draw_Pool(self, dst, x, shape):
        return self._window_stmt(dst, windows.draw_pool(self.draw, self.const, x, shape))

    def draw_Accumulate(self, dst, x, shape):
        return Stmt(dst, "Accumulate", (x,), count=self.draw(st.integers(0, 3))), shape


@st.composite
def programs(draw, dtypes=("float32", "float64"), only=None, images=False):
    """A program of the ops in ``only`` (op names; default: all, and loops); ``images``:
    its inputs are image batches ([N, C, W] or [N, C, H, W])."""
    allowed = set(ALL_OPS if only is None else only)
    d = _Drawer(draw, allowed)
    d.shapes = [_shape(draw, min_rank=3 if images else 1) for _ in range(draw(st.integers(1, 2)))]
    n_inputs = len(d.shapes)
    body = []
    for _ in range(draw(st.integers(1, 8))):
        made = d.stmt(len(d.shapes))
        if made is None or int(np.prod(made[1])) > MAX_SIZE:
            d.consts = d.consts[:_consts_used(body)]
            continue
        body.append(made[0])
        d.shapes.append(tuple(made[1]))
    if not body:  # every draw was refused: one statement all programs can take
        body.append(Stmt(len(d.shapes), "Negative", ("x0",)))
    return Program(draw(st.sampled_from(dtypes)), draw(st.integers(0, 2**32 - 1)),
                   tuple(d.shapes[:n_inputs]), tuple(d.consts), tuple(body))


def _consts_used(body) -> int:
    return sum(1 for s in body for o in s.operands if o.startswith("c"))


# ----------------------------------------------------------------------------- recording
_DTYPE = {"float32": DataType.FLOAT, "float64": DataType.DOUBLE}


def _record(p: Program, net, named: dict) -> None:
    """Record ``p``'s statements into ``net`` (a Net, or ``ops`` in a Task)."""
    for s in p.body:
        out = f"x{s.dst}"
        args = [named.get(o, o) for o in s.operands]
        if s.op == "Accumulate":
            net.Copy(args, [out])
            with ops.loop(s.count):
                net.Add([out, args[0]], [out])
        elif s.op == "Concat":
            net.Concat(args, [out, f"{out}_split"], **dict(s.attrs))
        elif s.op == "Reshape":
            net.Reshape(args, [out, f"{out}_old_shape"], shape=list(dict(s.attrs)["shape"]))
        elif s.op in BAGS:
            a = dict(s.attrs)
            ids = net.GivenTensorInt64Fill([], [f"{out}_ids"], shape=[len(a["ids"])], values=list(a["ids"]))
            if s.op == "Gather":
                net.Gather([args[0], ids], [out])
                continue
            lengths = net.GivenTensorIntFill([], [f"{out}_lengths"], shape=[len(a["lengths"])],
                                             values=list(a["lengths"]))
            getattr(net, s.op)(args[:1] + args[1:] + [ids, lengths], [out])
        else:
            attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in s.attrs}
            getattr(net, s.op)(args, [out], **attrs)


def build(p: Program):
    """Record ``p`` in a new Task: (task, {name: TaskOutput}) for every tensor."""
    values = p.arrays()
    with Task() as task:
        for name, v in values.items():
            made = ops.Const(v.astype(np.float32))
            ops.Cast([made], [name], to=_DTYPE[p.dtype]) if p.dtype == "float64" else \
                ops.Copy([made], [name])
        _record(p, ops, {})
        outputs = {f"x{s.dst}": final_output(f"x{s.dst}") for s in p.body}
    return task, outputs


def build_net(p: Program):
    """Record ``p`` in a new Net whose inputs (x0.., c0..) the caller feeds: (net, values)."""
    net = core.Net("tensor_program")
    _record(p, net, {})
    return net, p.arrays()


def with_inputs(net, values: dict):
    """A Task running a net that makes ``values`` as constants, then ``net`` (as a job file
    with an init net: the passes then fold what depends on the inputs alone)."""
    init = core.Net("inputs")
    for name, v in values.items():  # (Net.Const makes float32, as Caffe2's: Cast for float64)
        made = init.Const(v.astype(np.float32))
        init.Cast([made], [name], to=_DTYPE[str(v.dtype)]) if v.dtype == np.float64 else init.Copy([made], [name])
    with Task() as task:
        ops.net(init)
        ops.net(net)
    return task


# ----------------------------------------------------------------------------- the evaluator
def _softmax(x, axis):
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


def _as_matrix(x, axis):
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def _slice(x, starts, ends):
    return x[tuple(slice(s, d if e == -1 else e) for s, e, d in zip(starts, ends, x.shape))]


def _bags(op, table, args, a):
    """Each bag's rows of ``table`` added in order (times their weights; averaged)."""
    ids, out, k = a["ids"], np.zeros((len(a["lengths"]),) + table.shape[1:], table.dtype), 0
    for s, n in enumerate(a["lengths"]):
        for _ in range(n):
            row = table[ids[k]] * args[1][k] if op == "SparseLengthsWeightedSum" else table[ids[k]]
            out[s] = out[s] + row
            k += 1
        if op == "SparseLengthsMean" and n:
            out[s] = out[s] / n
    return out


def _erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _apply(s: Stmt, args, dt):
    a = dict(s.attrs)
    x = args[0]
    one = dt.type
    table = {
        "Sigmoid": lambda: one(1) / (one(1) + np.exp(-x)),
        "Tanh": lambda: np.tanh(x),
        "Relu": lambda: np.maximum(x, one(0)),
        "Negative": lambda: -x,
        "Abs": lambda: np.abs(x),
        "Scale": lambda: x * one(a.get("scale", 1.0)),
        "Clip": lambda: np.clip(x, one(a["min"]), one(a["max"])),
        "Sqr": lambda: x * x, "Exp": lambda: np.exp(x), "Sqrt": lambda: np.sqrt(x), "Log": lambda: np.log(x),
        # Caffe2's activations, written from their definitions
        "LeakyRelu": lambda: np.where(x > 0, x, x * one(a["alpha"])),
        "Elu": lambda: np.where(x > 0, x, one(a["alpha"]) * (np.exp(x) - one(1))),
        "ReluN": lambda: np.clip(x, one(0), one(a["n"])),
        "Softsign": lambda: x / (one(1) + np.abs(x)),
        "Softplus": lambda: np.log(one(1) + np.exp(x)),
        "Swish": lambda: x / (one(1) + np.exp(-x)),
        "HardSigmoid": lambda: np.clip(x * one(0.2) + one(0.5), one(0), one(1)),
        "Cube": lambda: x ** 3, "Reciprocal": lambda: one(1) / x, "Rsqrt": lambda: one(1) / np.sqrt(x),
        "Cbrt": lambda: np.cbrt(x), "Sin": lambda: np.sin(x), "Cos": lambda: np.cos(x),
        "Log1p": lambda: np.log1p(x),
        "Gelu": lambda: x * (one(1) + _erf(x / np.sqrt(2))) / 2,
        "Add": lambda: x + args[1], "Sub": lambda: x - args[1], "Mul": lambda: x * args[1],
        "Transpose": lambda: np.transpose(x, a["axes"]),
        "Reshape": lambda: x.reshape(a["shape"]),
        "Flatten": lambda: _as_matrix(x, a["axis"]),
        "ExpandDims": lambda: np.expand_dims(x, a["dims"][0]),
        "Squeeze": lambda: np.squeeze(x, a["dims"]),
        "Slice": lambda: _slice(x, a["starts"], a["ends"]),
        "ReduceSum": lambda: np.sum(x, axis=a["axes"], keepdims=bool(a["keepdims"])),
        "ReduceMean": lambda: np.mean(x, axis=a["axes"], keepdims=bool(a["keepdims"])),
        "SumElements": lambda: np.mean(x) if a["average"] else np.sum(x),
        "Softmax": lambda: _softmax(x, a["axis"]),
        "MatMul": lambda: (x.T if a["trans_a"] else x) @ (args[1].T if a["trans_b"] else args[1]),
        "FC": lambda: _as_matrix(x, 1) @ args[1].T + args[2],
        "Concat": lambda: np.concatenate([x, args[1]], axis=a["axis"]),
        "SquaredL2Distance": lambda: 0.5 * ((x - args[1]) ** 2).reshape(x.shape[0], -1).sum(axis=1),
        "Gather": lambda: x[list(a.get("ids", ()))],
        "Conv": lambda: windows.conv(x, args[1], args[2], a),
        "ConvTranspose": lambda: windows.conv_transpose(x, args[1], args[2], a),
        "MaxPool": lambda: windows.pool("MaxPool", x, a),
        "AveragePool": lambda: windows.pool("AveragePool", x, a),
        **{op: lambda op=op: _bags(op, x, args, a) for op in BAGS[:3]},
    }
    if s.op == "Accumulate":
        acc = x.copy()
        for _ in range(s.count):
            acc = acc + x
        return acc
    return np.asarray(table[s.op](), dtype=dt)


def evaluate(p: Program, values: dict | None = None) -> dict:
    """Every tensor ``x{k}`` the body makes, from ``values`` (default: ``p.arrays()``)."""
    env = dict(values if values is not None else p.arrays())
    dt = np.dtype(p.dtype)
    with np.errstate(all="ignore"):  # Sqrt and Log of negatives, Exp overflowing: NaN and inf, as dslc
        for s in p.body:
            env[f"x{s.dst}"] = _apply(s, [env[o] for o in s.operands], dt)
    return {f"x{s.dst}": env[f"x{s.dst}"] for s in p.body}


def kink_distance(p: Program, values: dict) -> float:
    """How close any Relu / Abs / Clip input comes to a point without a derivative (0 if a
    Sqrt or Log input is not positive, or a value is not finite)."""
    env = dict(values)
    dt = np.dtype(p.dtype)
    nearest = np.inf
    for s in p.body:
        args = [env[o] for o in s.operands]
        if not all(np.all(np.isfinite(a)) for a in args):
            return 0.0
        if s.op in POSITIVE:
            nearest = min(nearest, float(np.min(args[0], initial=np.inf)))
        if s.op == "MaxPool":  # (two elements of a window at its max: no derivative)
            nearest = min(nearest, windows.max_gap(args[0], dict(s.attrs)))
        points = KINKS.get(s.op, tuple(v for k, v in s.attrs) if s.op == "Clip" else ())
        for point in points:
            nearest = min(nearest, float(np.min(np.abs(args[0] - point))))
        with np.errstate(all="ignore"):
            env[f"x{s.dst}"] = _apply(s, args, dt)
    return max(nearest, 0.0) if all(np.all(np.isfinite(v)) for v in env.values()) else 0.0
