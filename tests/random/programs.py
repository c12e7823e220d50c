"""Random DSL programs as plain data: a hypothesis strategy, the DSL recording, and an
independent plain-Python evaluator of the same program.

A ``Program`` has int64 variables ``v0..``, float32 variables ``f0..``, bool variables
``b0..``, counters ``c0..`` and a body of statements (the dataclasses below). Loops
are bounded when generated (``MAX_TOTAL_ITERATIONS``), so every program ends fast.

* ``programs()`` draws one; ``render(p)`` shows it as pseudo-Python for failure notes.
* ``build(p)`` records it with ``ops`` inside ``with Task():`` and returns the task
  and a ``final_output`` per name in ``output_names(p)``. A ``private`` program's task
  runs in a PRIVATE workspace (its group is returned), where dce drops the stores
  nothing reads: a body whose statements only copy into ``scratch`` (``Scratch``) is
  left holding only the checks of what it read; with ``in_init``, the variables are
  set in the task's init phase.
* ``evaluate(p)`` computes those outputs in plain Python from the semantics of
  ../shared/spec/caffe2-semantics.md, without any dslc code: int64 wraps around,
  floats are ``numpy.float32``, an If chain's Elif condition is computed after the
  previous branch ran (2.6), ``stop_if`` leaves the innermost loop or If branch (2.4),
  a loop count blob is read again before every iteration (2.5).
"""
from __future__ import annotations

import operator
from contextlib import nullcontext
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dslc.core import BlobReference
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, WorkspaceType, final_output

INT_OPS = ("Add", "Sub", "Mul", "Max", "Min")
FLOAT_OPS = ("Add", "Sub", "Mul")
CMP_OPS = ("GE", "GT", "LT", "LE", "EQ", "NE")
LOGIC_OPS = ("And", "Or", "Xor")
EXTREME_INTS = (2**31, 3037000500, 2**62, 2**63 - 1, -2**63, -(2**40) + 7)
MAX_TOTAL_ITERATIONS = 400  # loop bodies run at most this many times, over the whole program
MAX_STATEMENTS = 26         # statements in a program (a few more with the clamps)
MAX_COUNT = 6               # iterations of one loop execution
MAX_DEPTH = 3               # nesting of loops and Ifs


def hypothesis_settings(ci_examples: int) -> settings:
    """Stable in CI (``ci_examples``, derandomized, no example database); with
    DSLC_HYPOTHESIS_EXAMPLES=N, N random examples (the nightly run, bench/nightly_random.py)."""
    import os

    common = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                       HealthCheck.too_slow])
    asked = os.environ.get("DSLC_HYPOTHESIS_EXAMPLES")
    if asked:
        return settings(max_examples=int(asked), **common)
    return settings(max_examples=ci_examples, derandomize=True, database=None, **common)


def run_task(task, outputs: dict, backend: str, passes: str) -> dict:
    """Run ``task`` in a fresh session and workspace: {name: fetched value} of ``outputs``."""
    from dslc.runtime.workspace import Workspace
    from dslc.session import LocalSession

    with LocalSession(Workspace(), backend=backend, passes=passes) as session:
        session.run(task)
        return {name: out.fetch() for name, out in outputs.items()}


def ir_text(task) -> str:
    """``task`` lowered and printed as IR text, checked to read back to the same text."""
    from dslc.ir import parse, print_module
    from dslc.lower import lower_group
    from dslc.session import LocalSession

    text = print_module(lower_group(LocalSession.as_group(task), "", {}))
    assert print_module(parse(text)) == text, "the IR text does not round-trip"
    return text


def run_text(text: str, backend: str, passes: str = "default") -> dict:
    """Run IR ``text`` in a fresh session and workspace: its outputs by name."""
    from dslc.runtime.workspace import Workspace
    from dslc.ir import parse
    from dslc.session import LocalSession

    return LocalSession(Workspace(), backend=backend, passes=passes).run_module(parse(text))


def assert_floats_close(got: dict, want: dict, dtype: str, how: str) -> None:
    """Each of ``want`` in ``got`` with its dtype and shape, to 2e-5 relative in float32 (1e-11
    in float64), absolute at the scale of the largest value."""
    tol = 2e-5 if dtype == "float32" else 1e-11
    for name, w in want.items():
        g = np.asarray(got[name])
        assert g.dtype == w.dtype and g.shape == w.shape, \
            f"{how}: {name} is {g.dtype}{list(g.shape)}, want {w.dtype}{list(w.shape)}"
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=f"{how}: {name}")


def dense_gradient(grad, x):
    """A gradient blob's value; a sparse one (a table's rows, core.GradientSlice; a negative
    id counts from the end) added up into a dense array of ``x``'s shape."""
    from dslc import core, workspace

    if not isinstance(grad, core.GradientSlice):
        return workspace.FetchBlob(str(grad))
    dense = np.zeros_like(x)
    idx = workspace.FetchBlob(str(grad.indices)).reshape(-1)
    np.add.at(dense, idx, workspace.FetchBlob(str(grad.values)).reshape((idx.size,) + x.shape[1:]))
    return dense


def fresh() -> None:
    """What conftest does per test, done per example: fresh names and workspace."""
    from dslc import workspace
    from dslc.trace import names

    names.reset()
    workspace.ResetWorkspace()


# ----------------------------------------------------------------------------- the program tree
# int operands
@dataclass(frozen=True)
class Var:
    k: int


@dataclass(frozen=True)
class Lit:
    value: int


@dataclass(frozen=True)
class Iter:
    level: int  # the enclosing counted loop's index (0 = outermost); only inside it


# float operands
@dataclass(frozen=True)
class FVar:
    k: int


@dataclass(frozen=True)
class FLit:
    value: float


# conditions (bool expressions)
@dataclass(frozen=True)
class Cmp:
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class BVar:
    k: int


@dataclass(frozen=True)
class BLit:
    value: bool


@dataclass(frozen=True)
class Not:
    c: object


@dataclass(frozen=True)
class Logic:
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class CountDown:
    counter: int  # side effect: the count is decremented whatever it was


@dataclass(frozen=True)
class CounterDone:
    counter: int  # CheckCounterDone: count <= 0, no side effect


# statements
@dataclass(frozen=True)
class IntOp:
    dst: int
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Clamp:
    k: int   # v[k] = Min(Max(v[k], lo), hi): keeps a loop count blob small and >= 0
    lo: int
    hi: int


@dataclass(frozen=True)
class FloatOp:
    dst: int
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Scale:
    dst: int
    src: int
    scale: float


@dataclass(frozen=True)
class SetBool:
    dst: int
    cond: object


@dataclass(frozen=True)
class CountUp:
    dst: int
    counter: int


@dataclass(frozen=True)
class Retrieve:
    dst: int
    counter: int


@dataclass(frozen=True)
class Reset:
    counter: int
    init: int
    dst: int | None  # the previous count goes here, if given


@dataclass(frozen=True)
class Scratch:
    src: int  # scratch = v[src]: a blob nothing reads (dce removes the copy where it can)


@dataclass(frozen=True)
class Break:
    cond: object  # ops.stop_if: leaves the innermost loop or If branch


@dataclass(frozen=True)
class Elif:
    cond: object
    body: tuple
    before: tuple = ()  # statements recorded between the previous branch and this Elif


@dataclass(frozen=True)
class If:
    cond: object
    body: tuple
    elifs: tuple = ()
    orelse: tuple | None = None


@dataclass(frozen=True)
class Loop:
    count: object  # an int, a Var (clamped before the loop) or an Iter
    body: tuple
    exit_to: int | None = None  # v[exit_to] = the loop's index blob after it: where it stopped


@dataclass(frozen=True)
class Guard:
    dst: int  # ops.stop_guard(has_stopped_blob=b[dst]): True while the body runs, False at its end
    body: tuple


@dataclass(frozen=True)
class While:
    guard: int  # ops.loop() whose first check is g[guard] >= hi, then g[guard] += 1
    hi: int
    body: tuple


@dataclass(frozen=True)
class Program:
    ints: tuple
    floats: tuple
    bools: tuple
    counters: tuple  # init counts
    guards: int
    body: tuple
    private: bool = False  # the task's workspace is PRIVATE (dropped after the run)
    in_init: bool = False  # the variables are set in ops.task_init()


def output_names(p: Program) -> list[str]:
    """Every blob the program exports: variables, While guards, final counts."""
    return ([f"v{k}" for k in range(len(p.ints))] + [f"f{k}" for k in range(len(p.floats))]
            + [f"b{k}" for k in range(len(p.bools))] + [f"g{k}" for k in range(p.guards)]
            + [f"count{k}" for k in range(len(p.counters))])


# ----------------------------------------------------------------------------- the strategy


@dataclass
class _Left:
    """What one program may still use, shared by all its contexts while it is drawn."""

    iterations: int = MAX_TOTAL_ITERATIONS
    statements: int = MAX_STATEMENTS
    guards: int = 0  # While guards handed out so far


@dataclass(frozen=True)
class _Ctx:
    """Where a statement is being generated."""

    n_ints: int
    n_floats: int
    n_bools: int
    n_counters: int
    left: _Left
    loops: tuple = ()   # max iterations of each enclosing counted loop
    mult: int = 1       # how often the current body can run, at most
    bounded: tuple = ()  # (var, hi) pairs: int vars in use as loop counts
    depth: int = 0
    in_block: bool = False  # inside a loop or If branch, where stop_if is allowed

    def bound_of(self, k: int):
        his = [hi for var, hi in self.bounded if var == k]
        return min(his) if his else None


def _int_operand(draw, ctx: _Ctx):
    kinds = ["var", "var", "lit", "lit", "extreme"] + (["iter", "iter"] if ctx.loops else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "var":
        return Var(draw(st.integers(0, ctx.n_ints - 1)))
    if kind == "lit":
        return Lit(draw(st.integers(-4, 9)))
    if kind == "extreme":
        return Lit(draw(st.sampled_from(EXTREME_INTS)))
    return Iter(draw(st.integers(0, len(ctx.loops) - 1)))


def _float_operand(draw, ctx: _Ctx):
    if ctx.n_floats and draw(st.booleans()):
        return FVar(draw(st.integers(0, ctx.n_floats - 1)))
    return FLit(draw(st.floats(-8, 8, width=32)))


def _cond(draw, ctx: _Ctx, depth: int = 0):
    kinds = ["cmp", "cmp", "lit"] + (["bvar"] if ctx.n_bools else []) \
        + (["countdown", "countdown", "done"] if ctx.n_counters else []) \
        + (["not", "logic"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "cmp":
        return Cmp(draw(st.sampled_from(CMP_OPS)), _int_operand(draw, ctx), _int_operand(draw, ctx))
    if kind == "lit":
        return BLit(draw(st.booleans()))
    if kind == "bvar":
        return BVar(draw(st.integers(0, ctx.n_bools - 1)))
    if kind == "countdown":
        return CountDown(draw(st.integers(0, ctx.n_counters - 1)))
    if kind == "done":
        return CounterDone(draw(st.integers(0, ctx.n_counters - 1)))
    if kind == "not":
        return Not(_cond(draw, ctx, depth + 1))
    return Logic(draw(st.sampled_from(LOGIC_OPS)), _cond(draw, ctx, depth + 1), _cond(draw, ctx, depth + 1))


def _clamped(ctx: _Ctx, stmt, dst) -> list:
    """``stmt``, followed by a Clamp if it writes a var that an enclosing loop counts with."""
    hi = None if dst is None else ctx.bound_of(dst)
    return [stmt] if hi is None else [stmt, Clamp(dst, 0, hi)]


def _simple(draw, ctx: _Ctx) -> list:
    kinds = ["int", "int", "int", "scratch"] + (["float", "scale"] if ctx.n_floats else []) \
        + (["bool"] if ctx.n_bools else []) + (["countup", "retrieve", "reset"] if ctx.n_counters else [])
    kind = draw(st.sampled_from(kinds))
    var = st.integers(0, ctx.n_ints - 1)
    if kind == "scratch":
        return [Scratch(draw(var))]
    if kind == "int" and ctx.bounded and draw(st.booleans()):
        return _recount(draw, ctx)
    if kind == "int":
        dst = draw(var)
        stmt = IntOp(dst, draw(st.sampled_from(INT_OPS)), _int_operand(draw, ctx), _int_operand(draw, ctx))
        return _clamped(ctx, stmt, dst)
    if kind == "float":
        return [FloatOp(draw(st.integers(0, ctx.n_floats - 1)), draw(st.sampled_from(FLOAT_OPS)),
                        _float_operand(draw, ctx), _float_operand(draw, ctx))]
    if kind == "scale":
        f = st.integers(0, ctx.n_floats - 1)
        return [Scale(draw(f), draw(f), draw(st.sampled_from([0.5, -1.0, 1.5, 2.0, 0.1, 3.0])))]
    if kind == "bool":
        return [SetBool(draw(st.integers(0, ctx.n_bools - 1)), _cond(draw, ctx))]
    counter = draw(st.integers(0, ctx.n_counters - 1))
    if kind == "reset":
        dst = draw(st.none() | var)
        return _clamped(ctx, Reset(counter, draw(st.integers(0, 3)), dst), dst)
    dst = draw(var)
    return _clamped(ctx, (CountUp if kind == "countup" else Retrieve)(dst, counter), dst)


def _recount(draw, ctx: _Ctx) -> list:
    """Change an enclosing loop's count inside the loop (it is read again every iteration):
    ``v = v - 1``, ``v = Min(v, i)``, ``v = v + 2``..., then clamped back into its range."""
    k = draw(st.sampled_from([var for var, _ in ctx.bounded]))
    op = draw(st.sampled_from(["Sub", "Min", "Add"]))
    operand = Lit(draw(st.integers(1, 2))) if op != "Min" or not ctx.loops \
        else Iter(draw(st.integers(0, len(ctx.loops) - 1)))
    return _clamped(ctx, IntOp(k, op, Var(k), operand), k)


def _body(draw, ctx: _Ctx, lo=0, hi=3) -> tuple:
    out = []
    for _ in range(draw(st.integers(lo, hi))):
        if ctx.left.statements <= 0:
            break
        ctx.left.statements -= 1
        out += _statement(draw, ctx)
    return tuple(out)


def _statement(draw, ctx: _Ctx) -> list:
    kinds = ["simple"] * 5  # weights: straight-line code, and control flow (mostly If chains)
    if ctx.depth < MAX_DEPTH:
        kinds += ["if", "if", "if", "loop", "loop", "while"] + (["guard"] if ctx.n_bools else [])
    if ctx.in_block:
        kinds += ["break", "break"]
    kind = draw(st.sampled_from(kinds))
    if kind == "simple":
        return _simple(draw, ctx)
    if kind == "break":
        return [Break(_cond(draw, ctx))]
    if kind == "if":
        return [_if(draw, ctx)]
    if kind == "guard":
        return [_guard(draw, ctx)]
    room = min(MAX_COUNT, ctx.left.iterations // max(ctx.mult, 1))
    if kind == "while":
        return _while(draw, ctx, room)
    return _loop(draw, ctx, room)


def _if(draw, ctx: _Ctx) -> If:
    inner = replace(ctx, depth=ctx.depth + 1, in_block=True)
    cond, body = _cond(draw, ctx), _body(draw, inner)
    elifs = []
    for _ in range(draw(st.integers(0, 3))):
        before = tuple(s for _ in range(draw(st.integers(0, 1))) for s in _simple(draw, ctx))
        elifs.append(Elif(_cond(draw, ctx), _body(draw, inner), before))
    orelse = _body(draw, inner) if draw(st.booleans()) else None
    return If(cond, body, tuple(elifs), orelse)


def _count(draw, room: int) -> int:
    """A loop count in 0..room, rarely 0 (a loop that never runs tests little)."""
    if room <= 0 or _rarely(draw):
        return 0
    return draw(st.integers(1, room))


def _rarely(draw) -> bool:
    """True about one time in eight; also what hypothesis shrinks toward (the draw 0)."""
    return draw(st.integers(0, 7)) == 0


def _spend(ctx: _Ctx, most: int) -> _Ctx:
    """Reserve ``most`` iterations per run of the current body; the loop body's context."""
    ctx.left.iterations -= ctx.mult * most
    return replace(ctx, mult=ctx.mult * most, depth=ctx.depth + 1, in_block=True)


def _loop(draw, ctx: _Ctx, room: int) -> list:
    """A counted loop: a constant count, an int var clamped first, or an outer loop's index."""
    kinds = ["const"] + (["var"] if room > 0 else []) \
        + (["iter"] if any(0 < n <= room + 1 for n in ctx.loops) else [])
    kind = draw(st.sampled_from(kinds))
    before, bounded = [], ctx.bounded
    if kind == "const":
        count = most = _count(draw, room)
    elif kind == "iter":
        level = draw(st.sampled_from([j for j, n in enumerate(ctx.loops) if 0 < n <= room + 1]))
        count, most = Iter(level), ctx.loops[level] - 1  # the index is below that loop's count
    else:
        k = draw(st.integers(0, ctx.n_ints - 1))
        most = _count(draw, room if ctx.bound_of(k) is None else min(room, ctx.bound_of(k)))
        lo = 0 if _rarely(draw) else min(1, most)  # a negative var would make most such loops empty
        count, before, bounded = Var(k), [Clamp(k, lo, most)], ctx.bounded + ((k, most),)
    inner = replace(_spend(ctx, most), loops=ctx.loops + (most,), bounded=bounded)
    body = _body(draw, inner)
    exit_to = draw(st.none() | st.integers(0, ctx.n_ints - 1))
    return before + _clamped(ctx, Loop(count, body, exit_to), exit_to)


def _guard(draw, ctx: _Ctx) -> Guard:
    """A stop_guard whose body mostly holds a stop_if (else has_stopped is always False)."""
    inner = replace(ctx, depth=ctx.depth + 1, in_block=True)
    body = list(_body(draw, inner))
    if not _rarely(draw):
        body.insert(draw(st.integers(0, len(body))), Break(_cond(draw, inner)))
    return Guard(draw(st.integers(0, ctx.n_bools - 1)), tuple(body))


def _while(draw, ctx: _Ctx, room: int) -> list:
    hi = _count(draw, room)
    guard = ctx.left.guards
    ctx.left.guards += 1
    return [While(guard, hi, _body(draw, _spend(ctx, hi)))]


@st.composite
def programs(draw) -> Program:
    """A random program: at most MAX_STATEMENTS statements (plus clamps), whose loops run
    at most MAX_TOTAL_ITERATIONS bodies in all."""
    ints = tuple(draw(st.lists(st.integers(-5, 12) | st.sampled_from(EXTREME_INTS), min_size=1, max_size=4)))
    floats = tuple(draw(st.lists(st.floats(-4, 4, width=32), max_size=2)))
    bools = tuple(draw(st.lists(st.booleans(), max_size=2)))
    counters = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
    ctx = _Ctx(len(ints), len(floats), len(bools), len(counters), _Left())
    body = _body(draw, ctx, 2, 6)
    return Program(ints, floats, bools, counters, ctx.left.guards, body, draw(st.booleans()), draw(st.booleans()))


# ----------------------------------------------------------------------------- recording with the DSL


def build(p: Program):
    """Record ``p`` with ``ops`` in a new Task: (the task, or its group if ``p.private``,
    {output name: TaskOutput})."""
    group = TaskGroup(workspace_type=WorkspaceType.PRIVATE) if p.private else nullcontext()
    with group, Task(workspace_type=WorkspaceType.PRIVATE if p.private else None) as task:
        rec = _Recorder()
        with ops.task_init() if p.in_init else nullcontext():
            for k, x in enumerate(p.ints):
                ops.Const(x, blob_out=f"v{k}")
            for k, x in enumerate(p.floats):
                ops.Const(float(x), blob_out=f"f{k}")
            for k, x in enumerate(p.bools):
                ops.Const(bool(x), blob_out=f"b{k}")
        for k in range(p.guards):
            ops.Const(0, blob_out=f"g{k}")
        for k, n in enumerate(p.counters):
            ops.CreateCounter([], [f"c{k}"], init_count=n)
        rec.block(p.body)
        for k in range(len(p.counters)):
            ops.RetrieveCount([f"c{k}"], [f"count{k}"])
        outputs = {name: final_output(name) for name in output_names(p)}
    return (group if p.private else task), outputs


class _Recorder:
    """Records statements; ``loops`` holds the enclosing counted ``ops.loop`` objects."""

    def __init__(self):
        self.loops = []

    def int_blob(self, x):
        if isinstance(x, Var):
            return f"v{x.k}"
        if isinstance(x, Lit):
            return ops.Const(x.value)
        return self.loops[x.level].iter()

    def float_blob(self, x):
        return f"f{x.k}" if isinstance(x, FVar) else ops.Const(float(x.value))

    def cond_blob(self, c, out=None):
        """The blob holding condition ``c``; ``out`` names it (else it is auto-named)."""
        outs = None if out is None else [out]
        if isinstance(c, Cmp):
            return getattr(ops, c.op)([self.int_blob(c.a), self.int_blob(c.b)], outs)
        if isinstance(c, BVar):
            return f"b{c.k}" if out is None else ops.Copy([f"b{c.k}"], outs)
        if isinstance(c, BLit):
            return ops.Const(c.value, blob_out=out)
        if isinstance(c, Not):
            return ops.Not([self.cond_blob(c.c)], outs)
        if isinstance(c, Logic):
            return getattr(ops, c.op)([self.cond_blob(c.a), self.cond_blob(c.b)], outs)
        if isinstance(c, CounterDone):
            return ops.CheckCounterDone([f"c{c.counter}"], outs)
        return ops.CountDown([f"c{c.counter}"], outs)

    def block(self, stmts):
        for s in stmts:
            getattr(self, "do_" + type(s).__name__)(s)

    def do_IntOp(self, s):
        getattr(ops, s.op)([self.int_blob(s.a), self.int_blob(s.b)], [f"v{s.dst}"])

    def do_Clamp(self, s):
        v = f"v{s.k}"
        ops.Max([v, ops.Const(s.lo)], [v])
        ops.Min([v, ops.Const(s.hi)], [v])

    def do_FloatOp(self, s):
        getattr(ops, s.op)([self.float_blob(s.a), self.float_blob(s.b)], [f"f{s.dst}"])

    def do_Scale(self, s):
        ops.Scale([f"f{s.src}"], [f"f{s.dst}"], scale=s.scale)

    def do_SetBool(self, s):
        self.cond_blob(s.cond, out=f"b{s.dst}")

    def do_CountUp(self, s):
        ops.CountUp([f"c{s.counter}"], [f"v{s.dst}"])

    def do_Retrieve(self, s):
        ops.RetrieveCount([f"c{s.counter}"], [f"v{s.dst}"])

    def do_Scratch(self, s):
        ops.Copy([f"v{s.src}"], ["scratch"])

    def do_Reset(self, s):
        ops.ResetCounter([f"c{s.counter}"], [] if s.dst is None else [f"v{s.dst}"], init_count=s.init)

    def do_Break(self, s):
        ops.stop_if(self.cond_blob(s.cond))

    def do_If(self, s):
        with ops.If(self.cond_blob(s.cond)) as c:
            self.block(s.body)
        for e in s.elifs:
            self.block(e.before)
            with c.Elif(self.cond_blob(e.cond)) as c:
                self.block(e.body)
        if s.orelse is not None:
            with c.Else():
                self.block(s.orelse)

    def do_Loop(self, s):
        count = s.count
        if isinstance(count, Var):
            count = BlobReference(f"v{count.k}")
        elif isinstance(count, Iter):
            count = self.loops[count.level].iter()
        with ops.loop(count) as loop:
            self.loops.append(loop)
            self.block(s.body)
            self.loops.pop()
        if s.exit_to is not None:
            ops.Copy([loop.iter()], [f"v{s.exit_to}"])

    def do_Guard(self, s):
        with ops.stop_guard(has_stopped_blob=f"b{s.dst}"):
            self.block(s.body)

    def do_While(self, s):
        g = f"g{s.guard}"
        ops.Const(0, blob_out=g)
        with ops.loop():
            ops.stop_if(ops.GE([g, ops.Const(s.hi)]))
            ops.Add([g, ops.Const(1)], [g])
            self.block(s.body)


# ----------------------------------------------------------------------------- the evaluator


def wrap64(x: int) -> int:
    """``x`` as int64 arithmetic leaves it (two's complement wraparound)."""
    return ((x + 2**63) % 2**64) - 2**63


_INT = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Max": max, "Min": min}
_CMP = {"GE": operator.ge, "GT": operator.gt, "LT": operator.lt, "LE": operator.le,
        "EQ": operator.eq, "NE": operator.ne}
_LOGIC = {"And": operator.and_, "Or": operator.or_, "Xor": operator.xor}
_FLOAT = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul}


class _Stop(Exception):
    """A ``stop_if`` that held: caught by the innermost loop or If branch."""


class _Machine:
    def __init__(self, p: Program):
        self.ints = list(p.ints)
        self.floats = [np.float32(x) for x in p.floats]
        self.bools = list(p.bools)
        self.counts = list(p.counters)
        self.guards = [0] * p.guards
        self.iters: list[int] = []  # indices of the enclosing counted loops, outermost first

    def int(self, x) -> int:
        if isinstance(x, Var):
            return self.ints[x.k]
        if isinstance(x, Lit):
            return x.value
        return self.iters[x.level]

    def float(self, x):
        return self.floats[x.k] if isinstance(x, FVar) else np.float32(x.value)

    def cond(self, c) -> bool:
        """The condition's value; both sides of And/Or are computed (they are ops, not Python)."""
        if isinstance(c, Cmp):
            a = self.int(c.a)
            return _CMP[c.op](a, self.int(c.b))
        if isinstance(c, BVar):
            return self.bools[c.k]
        if isinstance(c, BLit):
            return c.value
        if isinstance(c, Not):
            return not self.cond(c.c)
        if isinstance(c, Logic):
            a = self.cond(c.a)
            return _LOGIC[c.op](a, self.cond(c.b))
        done = self.counts[c.counter] <= 0
        if isinstance(c, CountDown):
            self.counts[c.counter] -= 1  # even when already done (spec 1.8)
        return done

    def block(self, stmts) -> None:
        """Run a loop body or If branch: a stop leaves it."""
        try:
            self.seq(stmts)
        except _Stop:
            pass

    def seq(self, stmts) -> None:
        for s in stmts:
            getattr(self, "do_" + type(s).__name__)(s)

    def do_IntOp(self, s):
        self.ints[s.dst] = wrap64(_INT[s.op](self.int(s.a), self.int(s.b)))

    def do_Clamp(self, s):
        self.ints[s.k] = min(max(self.ints[s.k], s.lo), s.hi)

    def do_FloatOp(self, s):
        self.floats[s.dst] = np.float32(_FLOAT[s.op](self.float(s.a), self.float(s.b)))

    def do_Scale(self, s):
        self.floats[s.dst] = np.float32(self.floats[s.src] * np.float32(s.scale))

    def do_SetBool(self, s):
        self.bools[s.dst] = self.cond(s.cond)

    def do_CountUp(self, s):
        self.ints[s.dst] = self.counts[s.counter]
        self.counts[s.counter] += 1

    def do_Retrieve(self, s):
        self.ints[s.dst] = self.counts[s.counter]

    def do_Scratch(self, s):
        pass  # (nothing reads it)

    def do_Reset(self, s):
        if s.dst is not None:
            self.ints[s.dst] = self.counts[s.counter]
        self.counts[s.counter] = s.init

    def do_Break(self, s):
        if self.cond(s.cond):
            raise _Stop

    def do_If(self, s):
        ran = self.cond(s.cond)
        if ran:
            self.block(s.body)
        for e in s.elifs:
            self.seq(e.before)
            c = self.cond(e.cond)  # computed whether or not an earlier branch ran
            if c and not ran:
                self.block(e.body)
            ran = ran or c
        if s.orelse is not None and not ran:
            self.block(s.orelse)

    def do_Loop(self, s):
        i = 0
        while i < self.loop_count(s.count):  # a count blob is read before every iteration
            self.iters.append(i)
            try:
                self.seq(s.body)
            except _Stop:
                break
            finally:
                self.iters.pop()
            i += 1
        if s.exit_to is not None:  # the index blob: the count, or where a stop fired (2.5)
            self.ints[s.exit_to] = i

    def do_Guard(self, s):
        self.bools[s.dst] = True
        try:
            self.seq(s.body)
        except _Stop:
            return  # has_stopped stays True (or what the body set it to)
        self.bools[s.dst] = False

    def loop_count(self, count) -> int:
        return count if isinstance(count, int) else self.int(count)

    def do_While(self, s):
        self.guards[s.guard] = 0
        while self.guards[s.guard] < s.hi:
            self.guards[s.guard] += 1
            try:
                self.seq(s.body)
            except _Stop:
                break


def evaluate(p: Program) -> dict:
    """The outputs ``build(p)`` exports, computed in plain Python: name -> int/float32/bool."""
    m = _Machine(p)
    with np.errstate(all="ignore"):  # float32 overflow to inf is part of the semantics
        m.seq(p.body)
    values = m.ints + m.floats + m.bools + m.guards + m.counts
    return dict(zip(output_names(p), values))


# ----------------------------------------------------------------------------- showing a program


def render(p: Program) -> str:
    """``p`` as indented pseudo-Python (for hypothesis notes on failure)."""
    lines = [", ".join(f"{n} = {x!r}" for n, x in zip(output_names(p), p.ints + p.floats + p.bools))
             + ("  # in task_init" if p.in_init else "") + ("  # PRIVATE workspace" if p.private else "")]
    lines += [f"c{k} = CreateCounter(init_count={n})" for k, n in enumerate(p.counters)]
    _render_block(p.body, 0, 0, lines)
    return "\n".join(lines)


def _show(x) -> str:
    if isinstance(x, (Var, FVar, BVar)):
        return {Var: "v", FVar: "f", BVar: "b"}[type(x)] + str(x.k)
    if isinstance(x, (Lit, FLit, BLit)):
        return repr(x.value)
    if isinstance(x, Iter):
        return f"i{x.level}"
    if isinstance(x, (Cmp, Logic)):
        return f"{x.op}({_show(x.a)}, {_show(x.b)})"
    if isinstance(x, Not):
        return f"Not({_show(x.c)})"
    if isinstance(x, (CountDown, CounterDone)):
        return f"{type(x).__name__}(c{x.counter})"
    return repr(x)


def _render_block(stmts, depth: int, level: int, lines: list) -> None:
    """``level``: how many counted loops enclose (their indices are i0, i1, ...)."""
    pad = "    " * depth
    if not stmts:
        lines.append(pad + "pass")
    for s in stmts:
        if isinstance(s, If):
            lines.append(f"{pad}if {_show(s.cond)}:")
            _render_block(s.body, depth + 1, level, lines)
            for e in s.elifs:
                for b in e.before:
                    lines.append(f"{pad}{_render_simple(b)}  # between the branches")
                lines.append(f"{pad}elif {_show(e.cond)}:")
                _render_block(e.body, depth + 1, level, lines)
            if s.orelse is not None:
                lines.append(f"{pad}else:")
                _render_block(s.orelse, depth + 1, level, lines)
        elif isinstance(s, While):
            lines.append(f"{pad}while g{s.guard} < {s.hi}:  # g{s.guard} = 0 first; += 1 each time")
            _render_block(s.body, depth + 1, level, lines)
        elif isinstance(s, Loop):
            count = s.count if isinstance(s.count, int) else _show(s.count)
            lines.append(f"{pad}for i{level} in loop({count}):")
            _render_block(s.body, depth + 1, level + 1, lines)
            if s.exit_to is not None:
                lines.append(f"{pad}v{s.exit_to} = i{level}  # the index blob after the loop")
        elif isinstance(s, Guard):
            lines.append(f"{pad}with stop_guard(has_stopped=b{s.dst}):")
            _render_block(s.body, depth + 1, level, lines)
        else:
            lines.append(pad + _render_simple(s))


def _render_simple(s) -> str:
    if isinstance(s, (IntOp, FloatOp)):
        prefix = "v" if isinstance(s, IntOp) else "f"
        return f"{prefix}{s.dst} = {s.op}({_show(s.a)}, {_show(s.b)})"
    if isinstance(s, Clamp):
        return f"v{s.k} = clamp(v{s.k}, {s.lo}, {s.hi})"
    if isinstance(s, Scale):
        return f"f{s.dst} = Scale(f{s.src}, {s.scale})"
    if isinstance(s, SetBool):
        return f"b{s.dst} = {_show(s.cond)}"
    if isinstance(s, (CountUp, Retrieve)):
        return f"v{s.dst} = {type(s).__name__}(c{s.counter})"
    if isinstance(s, Scratch):
        return f"scratch = v{s.src}"
    if isinstance(s, Reset):
        return f"{'' if s.dst is None else f'v{s.dst} = '}ResetCounter(c{s.counter}, {s.init})"
    return f"stop_if({_show(s.cond)})"
