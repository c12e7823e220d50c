"""Random numeric programs over every width (i8..i64, f32, f64) as plain data: a
hypothesis strategy, the DSL recording, and an evaluator in plain Python and numpy.

Where tests/random/programs.py draws control flow over int64, float32 and bools, these draw
the shapes that hid wrong answers (issue 14): integer overflow in each width, NaN,
infinities and signed zeros through Max/Min/Relu, float and integer division by zero,
casts between widths, loops whose carried values change before a ``stop_if``, loop
counts that fold to a negative constant, unused ops that fail, and constant Ifs around
the first writes of a blob (with another dtype than its later writes).

``evaluate(p)`` follows ../shared/spec/caffe2-semantics.md with numpy scalars of each
variable's dtype: integers wrap in their own width, integer division truncates toward
zero and by zero is an error, floats are IEEE (inf, nan, signed zeros; Max/Min/Relu
are numpy's maximum/minimum, which propagate NaN), an error ends the program.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from dslc import core
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, final_output

DTYPES = ("i8", "i16", "i32", "i64", "f32", "f64")
NP = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "f32": np.float32,
      "f64": np.float64}
CAFFE2 = {"i8": core.DataType.INT8, "i16": core.DataType.INT16, "i32": core.DataType.INT32,
          "i64": core.DataType.INT64, "f32": core.DataType.FLOAT, "f64": core.DataType.DOUBLE}
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
BITWISE = ("BitwiseAnd", "BitwiseOr", "BitwiseXor")  # (integers only)
UNARY = ("Relu", "Negative", "Abs")
FLOATS = (0.0, -0.0, 1.5, -2.25, 3.0e38, -3.0e38, 1e-45, float("inf"), float("-inf"), float("nan"), 7.0)
DIV_ZERO = "integer division by zero"
NEGATIVE_COUNT = "the loop count is negative"
MAX_COUNT = 4


def is_int(dt: str) -> bool:
    return dt.startswith("i")


# ----------------------------------------------------------------------------- the program tree
@dataclass(frozen=True)
class V:          # variable x{k}
    k: int


@dataclass(frozen=True)
class L:          # a literal of the statement's dtype
    value: object


@dataclass(frozen=True)
class Bin:        # x{dst} = op(a, b)
    dst: int
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Un:         # x{dst} = op(x{src})
    dst: int
    op: str
    src: int


@dataclass(frozen=True)
class CastTo:     # x{dst} = Cast(x{src}) to x{dst}'s dtype (never float to int)
    dst: int
    src: int


@dataclass(frozen=True)
class UnusedDiv:  # Div(x{src}, 0), or Div([x{src}], Abs([x{divisor}])) on 1-element arrays
    src: int      # (a fused pair whose value nothing uses): the quotient is never used
    divisor: int | None = None


@dataclass(frozen=True)
class Shadow:     # if (flag) w{j} = lit (another dtype); [r{j} = w{j}]; w{j} = x{src}
    j: int
    flag: bool
    lit: object
    lit_dtype: str
    src: int


@dataclass(frozen=True)
class Loop:       # for count (a - b when folded): body; stop_if(x{k} op lit) at `stop`
    count: int
    folded: tuple | None
    body: tuple
    stop: tuple | None  # (position in body, var k, "GT"/"LT"/"EQ", literal)


@dataclass(frozen=True)
class ConstIf:    # if (flag): body
    flag: bool
    body: tuple


@dataclass(frozen=True)
class Program:
    dtypes: tuple     # of x0, x1, ...
    inits: tuple
    body: tuple
    shadows: tuple    # j of each w{j} written at the top level (outputs)
    private: bool = False  # a job file's task (its blobs vanish after it: DCE drops their stores)


# ----------------------------------------------------------------------------- the strategy
def _literal(draw, dt: str):
    if is_int(dt):
        info = np.iinfo(NP[dt])
        return int(draw(st.sampled_from([0, 1, -1, 2, 3, 7, 100, info.max, info.min, info.max // 2 + 1])))
    return float(np.float32(draw(st.sampled_from(FLOATS))))  # (f64 literals come from f32 ones)


def _operand(draw, dtypes, dt: str):
    same = [k for k, d in enumerate(dtypes) if d == dt]
    if same and draw(st.booleans()):
        return V(draw(st.sampled_from(same)))
    return L(_literal(draw, dt))


def _simple(draw, dtypes, shadows: list, top: bool):
    kind = draw(st.sampled_from(["bin", "bin", "bin", "un", "cast", "unused", "shadow"]))
    dst = draw(st.integers(0, len(dtypes) - 1))
    dt = dtypes[dst]
    if kind == "un":
        same = [k for k, d in enumerate(dtypes) if d == dt]
        return Un(dst, draw(st.sampled_from(UNARY)), draw(st.sampled_from(same)))
    if kind == "cast":
        src = draw(st.sampled_from([k for k, d in enumerate(dtypes) if is_int(d) or not is_int(dt)]))
        return CastTo(dst, src)
    if kind == "unused":
        ints = [k for k, d in enumerate(dtypes) if is_int(d)]
        if ints and draw(st.integers(0, 3)) == 0:
            src = draw(st.sampled_from(ints))
            same = [k for k in ints if dtypes[k] == dtypes[src]]
            return UnusedDiv(src, draw(st.sampled_from(same)) if draw(st.booleans()) else None)
    if kind == "shadow":
        lit_dt = draw(st.sampled_from(DTYPES))
        shadows.append(top)  # (only those at the top level are surely written: outputs)
        return Shadow(len(shadows) - 1, draw(st.booleans()), _literal(draw, lit_dt), lit_dt, dst)
    op = draw(st.sampled_from(BINARY + (BITWISE if is_int(dt) else ())))
    a, b = _operand(draw, dtypes, dt), _operand(draw, dtypes, dt)
    if op == "Div" and is_int(dt) and isinstance(b, L) and b.value == 0 and draw(st.integers(0, 2)):
        b = L(1)  # (a literal 0 divisor mostly makes a program that only fails)
    return Bin(dst, op, a, b)


def _body(draw, dtypes, shadows: list, depth: int, top: bool) -> tuple:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        shape = draw(st.integers(0, 5)) if depth < 2 else 0
        if shape == 4:
            out.append(_loop(draw, dtypes, shadows, depth))
        elif shape == 5:
            out.append(ConstIf(draw(st.booleans()), _body(draw, dtypes, shadows, depth + 1, False)))
        else:
            out.append(_simple(draw, dtypes, shadows, top))
    return tuple(out)


def _loop(draw, dtypes, shadows: list, depth: int) -> Loop:
    count = draw(st.integers(0, MAX_COUNT))
    folded = None
    if draw(st.integers(0, 5)) == 0:  # a count computed from constants: a - b, maybe < 0
        b = draw(st.integers(0, 3))
        count = draw(st.integers(-2, MAX_COUNT - b))
        folded = (count + b, b)
    body = _body(draw, dtypes, shadows, depth + 1, False)
    stop = None
    if draw(st.booleans()):
        k = draw(st.integers(0, len(dtypes) - 1))
        stop = (draw(st.integers(0, len(body))), k, draw(st.sampled_from(["GT", "LT", "EQ"])),
                _literal(draw, dtypes[k]))
    return Loop(count, folded, body, stop)


@st.composite
def programs(draw) -> Program:
    n = draw(st.integers(2, 5))
    dtypes = tuple(draw(st.sampled_from(DTYPES)) for _ in range(n))
    inits = tuple(_literal(draw, dt) for dt in dtypes)
    shadows: list = []
    body = _body(draw, dtypes, shadows, 0, True)
    return Program(dtypes, inits, body, tuple(j for j, top in enumerate(shadows) if top), draw(st.booleans()))


def output_names(p: Program) -> list[str]:
    return [f"x{k}" for k in range(len(p.dtypes))] + [f"w{j}" for j in p.shadows]


# ----------------------------------------------------------------------------- recording
def _const(value, dt: str):
    """A blob holding ``value`` as ``dt`` (i32 and f32 directly, other widths by Cast)."""
    if dt == "i64":
        return ops.Const(int(value))
    if dt == "i32":
        return ops.Const(np.int32(value))
    if dt == "f32":
        return ops.Const(np.float32(value))
    base = ops.Const(int(value)) if is_int(dt) else ops.Const(np.float32(value))
    return ops.Cast([base], to=CAFFE2[dt])


def build(p: Program):
    """Record ``p`` in a new Task: (task, {output name: TaskOutput}); a private one in a
    TaskGroup of its own (returned instead of the task) if ``p.private``."""
    group = TaskGroup() if p.private else contextlib.nullcontext()
    with group, Task() as task:
        for k, (dt, v) in enumerate(zip(p.dtypes, p.inits)):
            ops.Copy([_const(v, dt)], [f"x{k}"])
        _Recorder(p).block(p.body)
        outputs = {name: final_output(name) for name in output_names(p)}
    return (group if p.private else task), outputs


class _Recorder:
    def __init__(self, p: Program):
        self.p = p

    def operand(self, x, dt):
        return f"x{x.k}" if isinstance(x, V) else _const(x.value, dt)

    def block(self, stmts):
        for s in stmts:
            getattr(self, "do_" + type(s).__name__)(s)

    def do_Bin(self, s):
        dt = self.p.dtypes[s.dst]
        getattr(ops, s.op)([self.operand(s.a, dt), self.operand(s.b, dt)], [f"x{s.dst}"])

    def do_Un(self, s):
        getattr(ops, s.op)([f"x{s.src}"], [f"x{s.dst}"])

    def do_CastTo(self, s):
        ops.Cast([f"x{s.src}"], [f"x{s.dst}"], to=CAFFE2[self.p.dtypes[s.dst]])

    def do_UnusedDiv(self, s):
        if s.divisor is None:
            ops.Div([f"x{s.src}", _const(0, self.p.dtypes[s.src])])
        else:
            divisor = ops.Abs([ops.ExpandDims([f"x{s.divisor}"], dims=[0])])
            ops.Div([ops.ExpandDims([f"x{s.src}"], dims=[0]), divisor])

    def do_Shadow(self, s):
        with ops.If(ops.Const(s.flag)):
            ops.Copy([_const(s.lit, s.lit_dtype)], [f"w{s.j}"])
        if s.flag:
            ops.Copy([f"w{s.j}"], [f"r{s.j}"])  # read between the two writes
        ops.Copy([f"x{s.src}"], [f"w{s.j}"])

    def do_ConstIf(self, s):
        with ops.If(ops.Const(s.flag)):
            self.block(s.body)

    def do_Loop(self, s):
        count = s.count if s.folded is None else ops.Sub([ops.Const(s.folded[0]), ops.Const(s.folded[1])])
        with ops.loop(count):
            for i, stmt in enumerate(s.body + (None,)):
                if s.stop is not None and s.stop[0] == i:
                    _, k, op, lit = s.stop
                    ops.stop_if(getattr(ops, op)([f"x{k}", _const(lit, self.p.dtypes[k])]))
                if stmt is not None:
                    self.block([stmt])


# ----------------------------------------------------------------------------- the evaluator
class Failed(Exception):
    """The program ends with this error (its message names the class)."""


def _int_div(a, b, dt):
    if int(b) == 0:
        raise Failed(DIV_ZERO)
    q = abs(int(a)) // abs(int(b))
    q = -q if (int(a) < 0) != (int(b) < 0) else q
    return _wrap(q, dt)


def _wrap(x: int, dt: str):
    bits = np.iinfo(NP[dt]).bits
    x &= (1 << bits) - 1
    return NP[dt](x - (1 << bits) if x >> (bits - 1) else x)


def _binary(op, a, b, dt):
    if is_int(dt):
        if op == "Div":
            return _int_div(a, b, dt)
        if op in ("Max", "Min"):
            return NP[dt]((max if op == "Max" else min)(int(a), int(b)))
        x = {"Add": int(a) + int(b), "Sub": int(a) - int(b), "Mul": int(a) * int(b),
             "BitwiseAnd": int(a) & int(b), "BitwiseOr": int(a) | int(b), "BitwiseXor": int(a) ^ int(b)}[op]
        return _wrap(x, dt)
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.true_divide,
         "Max": np.maximum, "Min": np.minimum}[op]
    return NP[dt](f(NP[dt](a), NP[dt](b)))


def _unary(op, x, dt):
    if is_int(dt):
        return _wrap({"Relu": max(int(x), 0), "Negative": -int(x), "Abs": abs(int(x))}[op], dt)
    f = {"Relu": lambda v: np.maximum(v, NP[dt](0)), "Negative": np.negative, "Abs": np.abs}[op]
    return NP[dt](f(NP[dt](x)))


def _cast(x, src: str, dt: str):
    if is_int(dt):  # from an int (floats are never cast to ints): wrap in the new width
        return _wrap(int(x), dt)
    return NP[dt](x)


class _Stop(Exception):
    pass


class _Machine:
    def __init__(self, p: Program):
        self.p = p
        self.x = [NP[dt](v) if not is_int(dt) else _wrap(v, dt) for dt, v in zip(p.dtypes, p.inits)]
        self.w = {}

    def value(self, a, dt):
        return self.x[a.k] if isinstance(a, V) else (_wrap(a.value, dt) if is_int(dt) else NP[dt](a.value))

    def block(self, stmts):
        for s in stmts:
            getattr(self, "do_" + type(s).__name__)(s)

    def do_Bin(self, s):
        dt = self.p.dtypes[s.dst]
        self.x[s.dst] = _binary(s.op, self.value(s.a, dt), self.value(s.b, dt), dt)

    def do_Un(self, s):
        self.x[s.dst] = _unary(s.op, self.x[s.src], self.p.dtypes[s.dst])

    def do_CastTo(self, s):
        self.x[s.dst] = _cast(self.x[s.src], self.p.dtypes[s.src], self.p.dtypes[s.dst])

    def do_UnusedDiv(self, s):
        if s.divisor is None or int(self.x[s.divisor]) == 0:
            raise Failed(DIV_ZERO)

    def do_Shadow(self, s):
        self.w[s.j] = self.x[s.src]

    def do_ConstIf(self, s):
        if s.flag:
            self.block(s.body)

    def do_Loop(self, s):
        if s.count < 0:
            raise Failed(NEGATIVE_COUNT)
        for _ in range(s.count):
            try:
                for i, stmt in enumerate(s.body + (None,)):
                    if s.stop is not None and s.stop[0] == i and self.stopped(s.stop):
                        raise _Stop
                    if stmt is not None:
                        self.block([stmt])
            except _Stop:
                return

    def stopped(self, stop) -> bool:
        _, k, op, lit = stop
        dt = self.p.dtypes[k]
        a, b = self.x[k], (_wrap(lit, dt) if is_int(dt) else NP[dt](lit))
        return bool({"GT": np.greater, "LT": np.less, "EQ": np.equal}[op](a, b))


def evaluate(p: Program):
    """{output name: numpy scalar}, or the Failed error the program ends with."""
    m = _Machine(p)
    try:
        with np.errstate(all="ignore"):
            m.block(p.body)
    except Failed as e:
        return e
    out = {f"x{k}": v for k, v in enumerate(m.x)}
    out.update({f"w{j}": m.w[j] for j in p.shadows})
    return out


def render(p: Program) -> str:
    """The program as pseudo-Python, for failure notes."""
    lines = [f"x{k}: {dt} = {v!r}" for k, (dt, v) in enumerate(zip(p.dtypes, p.inits))]
    lines.insert(0, "# a private task" if p.private else "# a task in the global workspace")
    _render(p.body, 0, lines)
    return "\n".join(lines)


def _render(stmts, depth, lines):
    pad = "    " * depth
    for s in stmts:
        if isinstance(s, Loop):
            n = f"{s.folded[0]} - {s.folded[1]}" if s.folded else s.count
            lines.append(f"{pad}for _ in range({n}):  # stop: {s.stop}")
            _render(s.body, depth + 1, lines)
        elif isinstance(s, ConstIf):
            lines.append(f"{pad}if {s.flag}:")
            _render(s.body, depth + 1, lines)
        else:
            lines.append(pad + repr(s))
