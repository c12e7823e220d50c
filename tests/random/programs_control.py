"""Random control-op programs: Caffe2's If and While operators, built with
``ops.IfNet`` / ``ops.Else`` / ``ops.WhileNet`` / ``ops.Condition`` in a
``NetBuilder(_use_control_ops=True)`` (one net of If and While ops) or in a plain
``NetBuilder()`` run as an execution step, nested in every combination, with a
plain-Python evaluator of the same program that follows Caffe2's scoping.

A ``Program`` has int64 blobs ``v0..`` (fed into the workspace and named in the builder's
``initial_scope``) and a body of statements. Other names (``t0..``, and each WhileNet's
guard ``g0..``) are first written somewhere in the body. Caffe2's rule, which the
evaluator applies (and the generator uses to draw only valid programs):

* a block (the builder, an If or Else branch, a Condition, a While body) sees its
  *scope*: the scope of the block it is in when it was opened, plus every name the ops
  recorded directly in it so far read or wrote. A nested IfNet/WhileNet adds nothing,
  whatever it wrote;
* in a branch, condition or body, a name in the scope it was opened with is the outer
  blob; any other name it writes is its own, new at each run (a child workspace), and
  gone after it. So a blob first written inside a branch is local to it and to the
  blocks nested in it after the write, and a later block writing the same name gets its
  own, while the top level writing it makes it an outer blob from then on;
* a WhileNet's condition net runs before the first iteration and after each; the
  condition blob is made in the enclosing block (``add_while_op``'s ConstantFill).

Every WhileNet is bounded by its guard: ``g = 0`` in the enclosing block, then the
Condition counts ``g += 1`` and ends with ``LE(g, hi)`` (And-ed with a drawn
comparison now and then), so loops run at most ``hi`` times.

* ``programs()`` draws one; ``render(p)`` shows it as pseudo-Python.
* ``build(p, net_builder)`` records it (``net_builder``: dslc's, or Caffe2's module
  of the same name: bench/caffe2_control_check.py runs the programs on the real
  Caffe2) and returns the one net ``nb.get()`` gives, or (``p.control_ops`` False)
  the builder, for ``core.to_execution_step``.
* ``evaluate(p)`` gives ({name: value} of ``outputs(p)``, the names that must not be in
  the workspace afterwards: those written only inside branches).

This module runs on Python 3.9 (the reference Caffe2's) and imports no dslc code.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

OPS = ("Add", "Sub", "Mul")  # (Caffe2 has Max and Min for floats only)
CMP_OPS = ("LT", "LE", "GT", "GE", "EQ", "NE")
JOINS = ("And", "Or")
LOCALS = 4               # names t0..t3 besides the v's
MAX_DEPTH = 3            # nesting of IfNet/WhileNet blocks
MAX_STATEMENTS = 22
MAX_TOTAL_ITERATIONS = 120  # While bodies run at most this many times over the whole program
MAX_HI = 4


# ----------------------------------------------------------------------------- the program tree
@dataclass(frozen=True)
class Set:
    """``dst = op(a, b)``; operands are blob names or int literals (``ops.Const``)."""
    dst: str
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Cond:
    """``op(a, b)`` into a new (auto-named) bool blob; ``And``/``Or`` with ``other`` if given."""
    op: str
    a: object
    b: object
    join: str | None = None
    other: "Cond | None" = None


@dataclass(frozen=True)
class IfNet:
    cond: Cond
    then: tuple
    orelse: tuple | None = None  # None: no ops.Else() block


@dataclass(frozen=True)
class WhileNet:
    guard: str     # set to 0 just before, in the enclosing block; the Condition counts it up
    hi: int
    pre: tuple     # the Condition's statements before the count (it may write outer blobs)
    extra: Cond | None  # And-ed into the condition, computed in the Condition
    body: tuple


@dataclass(frozen=True)
class Program:
    ints: tuple   # v0.. initial values
    body: tuple
    control_ops: bool = True  # in NetBuilder(_use_control_ops=True), else in a plain NetBuilder()


def used(stmt) -> set:
    """The names ``stmt`` makes its block's ops read or write (nested blocks' ops aside)."""
    if isinstance(stmt, Set):
        return {stmt.dst} | {x for x in (stmt.a, stmt.b) if isinstance(x, str)}
    if isinstance(stmt, IfNet):
        return _cond_names(stmt.cond)
    return {stmt.guard}


def _cond_names(c: Cond) -> set:
    names = {x for x in (c.a, c.b) if isinstance(x, str)}
    return names | (_cond_names(c.other) if c.other is not None else set())


# ----------------------------------------------------------------------------- the strategy
@dataclass
class _Left:
    iterations: int = MAX_TOTAL_ITERATIONS
    statements: int = MAX_STATEMENTS
    guards: int = 0


@dataclass
class _Ctx:
    """Where statements are being drawn: the block's scope grows as they are.
    ``shared``: the names local to enclosing branches that this block reaches, drawn
    more often (a nested block writing its enclosing branch's blob, read after it)."""
    scope: set
    left: _Left
    mult: int = 1
    depth: int = 0
    shared: frozenset = frozenset()
    start: frozenset = frozenset()  # the scope the block was opened with


def _operand(draw, ctx: _Ctx):
    names = sorted(ctx.scope)
    if ctx.shared and _rarely(draw, 3):
        return draw(st.sampled_from(sorted(ctx.shared)))
    if names and draw(st.integers(0, 2)):
        return draw(st.sampled_from(names))
    return draw(st.integers(-3, 9))


def _rarely(draw, n: int) -> bool:
    """True about once in ``n`` draws."""
    return draw(st.integers(0, n - 1)) == 0


def _cond(draw, ctx: _Ctx, joined=True) -> Cond:
    c = Cond(draw(st.sampled_from(CMP_OPS)), _operand(draw, ctx), _operand(draw, ctx))
    if joined and _rarely(draw, 4):
        return replace(c, join=draw(st.sampled_from(JOINS)), other=_cond(draw, ctx, False))
    return c


def _block(draw, ctx: _Ctx, lo=0, hi=3) -> tuple:
    out = []
    for _ in range(draw(st.integers(lo, hi))):
        if ctx.left.statements <= 0:
            break
        ctx.left.statements -= 1
        s = _statement(draw, ctx)
        ctx.scope |= used(s)
        out.append(s)
    return tuple(out)


def _inner(ctx: _Ctx, mult: int = 1) -> _Ctx:
    """A nested block's context: it starts with the scope the enclosing one has now."""
    own = ctx.scope - ctx.start if ctx.depth else set()  # (the top level's blobs are the workspace's)
    return _Ctx(set(ctx.scope), ctx.left, ctx.mult * mult, ctx.depth + 1, ctx.shared | own, frozenset(ctx.scope))


def _statement(draw, ctx: _Ctx):
    kinds = ["set"] * 4
    if ctx.depth < MAX_DEPTH:
        kinds += ["if", "if", "while"]
    kind = draw(st.sampled_from(kinds))
    if kind == "set":
        # (a name from the pool: outer if in scope, else a new local of this block)
        shared = sorted(n for n in ctx.shared if n[0] == "t")
        dst = draw(st.sampled_from(shared)) if shared and _rarely(draw, 3) else \
            draw(st.sampled_from(sorted({n for n in ctx.scope if n[0] in "vt"} | {f"t{k}" for k in range(LOCALS)})))
        return Set(dst, draw(st.sampled_from(OPS)), _operand(draw, ctx), _operand(draw, ctx))
    if kind == "if":
        cond = _cond(draw, ctx)
        then = _block(draw, _inner(ctx))
        orelse = _block(draw, _inner(ctx)) if draw(st.booleans()) else None
        if orelse is not None and _rarely(draw, 4) and ctx.depth + 1 < MAX_DEPTH:
            # an If/Else chain: the else branch is one more IfNet
            orelse = (IfNet(_cond(draw, ctx), _block(draw, _inner(ctx, 1)),
                            _block(draw, _inner(ctx, 1)) if draw(st.booleans()) else None),)
        return IfNet(cond, then, orelse)
    room = min(MAX_HI, ctx.left.iterations // max(ctx.mult, 1))
    hi = draw(st.integers(0, max(room, 0))) if room > 0 else 0
    ctx.left.iterations -= ctx.mult * hi
    guard = f"g{ctx.left.guards}"
    ctx.left.guards += 1
    ctx.scope.add(guard)  # (written by the enclosing block before the WhileNet opens)
    cond_ctx = _inner(ctx, hi + 1)
    pre = _block(draw, cond_ctx, 0, 1)
    extra = _cond(draw, cond_ctx, False) if _rarely(draw, 3) else None
    body = _block(draw, _inner(ctx, hi))
    return WhileNet(guard, hi, pre, extra, body)


@st.composite
def programs(draw) -> Program:
    ints = tuple(draw(st.lists(st.integers(-5, 12), min_size=1, max_size=3)))
    ctx = _Ctx({f"v{k}" for k in range(len(ints))}, _Left())
    return Program(ints, _block(draw, ctx, 1, 6), draw(st.booleans()))


# ----------------------------------------------------------------------------- recording
def build(p: Program, net_builder=None):
    """Record ``p`` with ``net_builder.ops``: in a control-op NetBuilder, its one net; else
    the plain NetBuilder. The caller feeds ``v0..`` (``inputs(p)``)."""
    if net_builder is None:
        from dslc import net_builder
    ops = net_builder.ops
    with net_builder.NetBuilder(_use_control_ops=p.control_ops, initial_scope=sorted(inputs(p))) as nb:
        _Recorder(ops).block(p.body)
    if not p.control_ops:
        return nb
    (net,) = nb.get()
    return net


def inputs(p: Program) -> dict:
    return {f"v{k}": np.array(x, np.int64) for k, x in enumerate(p.ints)}


class _Recorder:
    def __init__(self, ops):
        self.ops = ops

    def blob(self, x):
        return x if isinstance(x, str) else self.ops.Const(x)

    def cond(self, c: Cond):
        out = getattr(self.ops, c.op)([self.blob(c.a), self.blob(c.b)])
        if c.other is None:
            return out
        return getattr(self.ops, c.join)([out, self.cond(c.other)])

    def block(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, Set):
                getattr(self.ops, s.op)([self.blob(s.a), self.blob(s.b)], [s.dst])
            elif isinstance(s, IfNet):
                with self.ops.IfNet(self.cond(s.cond)):
                    self.block(s.then)
                if s.orelse is not None:
                    with self.ops.Else():
                        self.block(s.orelse)
            else:
                ops = self.ops
                ops.Const(0, blob_out=s.guard)
                with ops.WhileNet():
                    with ops.Condition():
                        self.block(s.pre)
                        ops.Add([s.guard, ops.Const(1)], [s.guard])
                        c = ops.LE([s.guard, ops.Const(s.hi)])
                        if s.extra is not None:
                            ops.And([c, self.cond(s.extra)])
                    self.block(s.body)


# ----------------------------------------------------------------------------- the evaluator
def wrap64(x: int) -> int:
    return ((x + 2**63) % 2**64) - 2**63


_OPS = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul}
_CMP = {"LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
        "EQ": operator.eq, "NE": operator.ne}
_JOIN = {"And": operator.and_, "Or": operator.or_}


class _Frame:
    """The blobs one run of a block sees: ``outer`` names are the enclosing frame's."""

    def __init__(self, parent: "_Frame | None", outer: frozenset):
        self.parent, self.outer, self.values = parent, outer, {}

    def get(self, name: str) -> int:
        if self.parent is not None and name in self.outer:
            return self.parent.get(name)
        return self.values[name]  # (a KeyError: the generator drew an invalid program)

    def set(self, name: str, value: int) -> None:
        if self.parent is not None and name in self.outer:
            self.parent.set(name, value)
        else:
            self.values[name] = value


class _Machine:
    def value(self, f: _Frame, x) -> int:
        return f.get(x) if isinstance(x, str) else x

    def cond(self, f: _Frame, c: Cond) -> bool:
        got = _CMP[c.op](self.value(f, c.a), self.value(f, c.b))
        return got if c.other is None else _JOIN[c.join](got, self.cond(f, c.other))

    def block(self, f: _Frame, stmts, scope: set) -> None:
        """Run ``stmts`` in frame ``f``; ``scope``: the block's scope as it starts."""
        scope = set(scope)
        for s in stmts:
            if isinstance(s, Set):
                f.set(s.dst, wrap64(_OPS[s.op](self.value(f, s.a), self.value(f, s.b))))
            elif isinstance(s, IfNet):
                branch = s.then if self.cond(f, s.cond) else s.orelse
                scope |= used(s)
                if branch is not None:
                    self.block(_Frame(f, frozenset(scope)), branch, scope)
                continue
            else:
                f.set(s.guard, 0)
                scope |= used(s)
                while self.condition(f, s, frozenset(scope)):
                    self.block(_Frame(f, frozenset(scope)), s.body, scope)
            scope |= used(s)

    def condition(self, f: _Frame, s: WhileNet, scope: frozenset) -> bool:
        c = _Frame(f, scope)
        self.block(c, s.pre, scope)
        c.set(s.guard, c.get(s.guard) + 1)
        go = c.get(s.guard) <= s.hi
        return go and self.cond(c, s.extra) if s.extra is not None else go


def top_scope(p: Program) -> set:
    """The names the top level reads or writes: those in the workspace after a run."""
    scope = set(inputs(p))
    for s in p.body:
        scope |= used(s)
    return scope


def written(stmts) -> set:
    """Every name written anywhere in ``stmts``, nested blocks included."""
    out = set()
    for s in stmts:
        if isinstance(s, Set):
            out.add(s.dst)
        elif isinstance(s, IfNet):
            out |= written(s.then) | written(s.orelse or ())
        else:
            out |= {s.guard} | written(s.pre) | written(s.body)
    return out


def outputs(p: Program) -> list:
    return sorted(top_scope(p))


def evaluate(p: Program):
    """({name: int} for ``outputs(p)``, the names that must be absent from the workspace)."""
    top = _Frame(None, frozenset())
    top.values.update({k: int(v) for k, v in inputs(p).items()})
    _Machine().block(top, p.body, set(inputs(p)))
    return {n: top.values[n] for n in outputs(p)}, sorted(written(p.body) - top_scope(p))


# ----------------------------------------------------------------------------- showing a program
def render(p: Program) -> str:
    lines = [", ".join(f"v{k} = {x}" for k, x in enumerate(p.ints)) +
             ("  # NetBuilder(_use_control_ops=True)" if p.control_ops else "  # NetBuilder()")]
    _render(p.body, 0, lines)
    return "\n".join(lines)


def _show(c: Cond) -> str:
    text = f"{c.op}({c.a}, {c.b})"
    return text if c.other is None else f"{c.join}({text}, {_show(c.other)})"


def _render(stmts, depth: int, lines: list) -> None:
    pad = "    " * depth
    if not stmts:
        lines.append(pad + "pass")
    for s in stmts:
        if isinstance(s, Set):
            lines.append(f"{pad}{s.dst} = {s.op}({s.a}, {s.b})")
        elif isinstance(s, IfNet):
            lines.append(f"{pad}IfNet {_show(s.cond)}:")
            _render(s.then, depth + 1, lines)
            if s.orelse is not None:
                lines.append(f"{pad}Else:")
                _render(s.orelse, depth + 1, lines)
        else:
            lines.append(f"{pad}{s.guard} = 0")
            lines.append(f"{pad}WhileNet:")
            lines.append(f"{pad}    Condition:")
            _render(s.pre, depth + 2, lines)
            extra = f" and {_show(s.extra)}" if s.extra is not None else ""
            lines.append(f"{pad}        {s.guard} += 1; {s.guard} <= {s.hi}{extra}")
            _render(s.body, depth + 1, lines)
