"""The text plan: a module written out the way a person would explain the job.

    plan of examples/setup.py:
      group on node local:
        task local/task, outputs six, seven_1, seven_2:      # line 13
          init:
            one = 1                                          # line 15
          body:
            two = Add(one, one)                              # line 16
            ...

Nets become pseudo-Python lines (``total = Add(total, val)``) over the variable names
of ``names.Names``; constants are literals; a pure value used once, right away,
is written inside its user (``if GE(val, 80):``). Loops, conditionals, stops,
concurrent steps and reporters keep their structure. An op this module has no
special form for prints as ``out = OpName(in, attr=value)``, its regions labelled.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dslc.ir import OpResult, Symbol
from dslc.ir.pyrefs import PyRef
from dslc.ir.types import Type, dtype_of_numpy

from .liveness import BLOB_READS, CONTROL
from .names import Names, is_dummy_output
from .special import SPECIAL, aliased

MAX_INLINE = 60      # longest expression written inside its user
MAX_LITERAL = 8      # longest constant written out element by element
COMMENT_COLUMN = 56  # where location comments start, at most


@dataclass
class Line:
    depth: int
    text: str
    loc: object = None


class _Inline:
    """A pure value waiting to be written inside its only user."""

    __slots__ = ("text", "mentions")

    def __init__(self, text, mentions):
        self.text, self.mentions = text, mentions


class PlanWriter:
    """Writes one module's plan as lines (``lines``), then as text (``text()``)."""

    def __init__(self, module, source=None, extra_live=()):
        self.module = module
        self.names = Names(module, source, extra_live)
        self.source = module.op.attrs.get("source", "")
        self.lines: list[Line] = []
        self._binds: dict = {}
        self.write()

    # --- output
    def text(self, with_locs: bool = True) -> str:
        codes = [("  " * ln.depth) + ln.text for ln in self.lines]
        width = max((len(c) for c, ln in zip(codes, self.lines) if ln.loc), default=0)
        column = min(width, COMMENT_COLUMN) + 2
        out = []
        for code, ln in zip(codes, self.lines):
            where = self._where(ln.loc) if with_locs else ""
            pad = code.ljust(column) if len(code) < column else code + "  "
            out.append(f"{pad}# {where}" if where else code)
        return "\n".join(out) + "\n"

    def _where(self, loc) -> str:
        if loc is None or loc.line <= 0:
            return ""
        same = loc.file == self.source or (self.source and not loc.file.startswith("<") and
                                           os.path.abspath(loc.file) == os.path.abspath(self.source))
        return f"line {loc.line}" if same else f"{loc.file}:{loc.line}"

    def emit(self, depth: int, text: str, loc=None) -> None:
        self.lines.append(Line(depth, text, loc))

    def block(self, depth: int, head: str, fill, loc=None, keep_empty: bool = True) -> bool:
        """``head:`` then what ``fill()`` writes one level deeper (``pass`` if nothing)."""
        start = len(self.lines)
        fill()
        if len(self.lines) == start and not keep_empty:
            return False
        if len(self.lines) == start:
            self.emit(depth + 1, "pass")
        self.lines.insert(start, Line(depth, head + ":", loc))
        return True

    def retitle(self, title: str) -> None:
        self.lines[0] = Line(0, title + ":")

    # --- plan structure
    def write(self) -> None:
        head = f"plan of {self.source}" if self.source else "plan"
        self.block(0, head, lambda: self.region(self.module.body, 1))

    def op_group(self, op, depth: int, node=None) -> None:
        init, body, exit_ = op.regions
        node = op.attrs["node"]
        head = f"group on node {node}"
        existing = op.attrs.get("existing") or []
        if existing:
            head += ", reads " + ", ".join(self.names.blob(b) for b in existing)

        def fill():
            self.block(depth + 1, "node init", lambda: self.region(init, depth + 2), keep_empty=False)
            self.region(body, depth + 1, node=node)
            self.block(depth + 1, "node exit", lambda: self.region(exit_, depth + 2), keep_empty=False)
        self.block(depth, head, fill, op.loc if op.loc.line else None)

    def op_task(self, op, depth: int, node=None) -> None:
        a = op.attrs
        parts = [f"task {a['name']}"]
        n = int(a["instances"] or 1)
        if n > 1:
            parts.append(f"{n} instances")
        if a["workspace"] == "global":
            parts.append("global workspace")
        if node is not None and a["node"] != node:
            parts.append(f"on node {a['node']}")
        outs = [self.names.blob(b) for b in a["outputs"] if not is_dummy_output(b)]
        if outs:
            parts.append("outputs " + ", ".join(outs))
        init, iinit, body, iexit, exit_ = op.regions
        shown = [r for r in op.regions if self._shows(r)]

        def phase(label, region, d):
            self.block(d, label, lambda: self.region(region, d + 1), keep_empty=False)

        def fill():
            if n > 1:
                phase("init (once)", init, depth + 1)
                self.block(depth + 1, "each instance", lambda: inner(depth + 2))
                phase("exit (once)", exit_, depth + 1)
            elif shown == [body]:
                self.region(body, depth + 1)
            else:
                phase("init", init, depth + 1)
                phase("instance init", iinit, depth + 1)
                phase("body", body, depth + 1)
                phase("instance exit", iexit, depth + 1)
                phase("exit", exit_, depth + 1)

        def inner(d):
            if [r for r in (iinit, body, iexit) if r in shown] == [body]:
                return self.region(body, d)
            phase("init", iinit, d)
            phase("body", body, d)
            phase("exit", iexit, d)
        self.block(depth, ", ".join(parts), fill, op.loc if op.loc.line else None)

    def _shows(self, region) -> bool:
        """Whether the region writes any line (a trial run, thrown away)."""
        start = len(self.lines)
        self.region(region, 0)
        got = len(self.lines) > start
        del self.lines[start:]
        return got

    def op_parallel(self, op, depth: int, node=None) -> None:
        n = int(op.attrs["instances"] or 1)
        if len(op.regions) == 1:
            head = f"{n} instances, concurrently" if n > 1 else "concurrently"
            return self.block(depth, head, lambda: self.region(op.regions[0], depth + 1), op.loc)
        head = "concurrently" + (f", {n} instances of each" if n > 1 else "")

        def fill():
            for i, r in enumerate(op.regions, 1):
                self.block(depth + 1, f"step {i}", lambda r=r: self.region(r, depth + 2))
        self.block(depth, head, fill, op.loc)

    def op_scope(self, op, depth: int, node=None) -> None:
        self.block(depth, "in a fresh workspace", lambda: self.region(op.regions[0], depth + 1), op.loc)

    def op_reporting(self, op, depth: int, node=None) -> None:
        def fill():
            self.block(depth + 1, "run", lambda: self.region(op.regions[0], depth + 2, node=node))
            for ms, r in zip(op.attrs["intervals_ms"], op.regions[1:]):
                self.block(depth + 1, f"every {ms} ms, and once at the end",
                           lambda r=r: self.region(r, depth + 2))
        self.block(depth, "with reporters", fill, op.loc)

    # --- regions of ops
    def region(self, r, depth: int, node=None) -> None:
        pending: dict = {}
        for op in r.ops:
            consumed = {self.names.canon(v) for v in op.operands}
            binds = self._bound_by(op)
            for v in [v for v, p in pending.items() if v not in consumed and p.mentions & binds]:
                self.emit(depth, f"{self.names.of(v)} = {pending.pop(v).text}", v.owner.loc)
            if self._inlinable(op, r) and self._inline(op, pending):
                continue
            self.op(op, depth, pending, node)
        for v, p in pending.items():  # a user the plan does not show; write the value anyway
            self.emit(depth, f"{self.names.of(v)} = {p.text}", v.owner.loc)

    def op(self, op, depth: int, pending: dict, node=None) -> None:
        plan = getattr(self, "op_" + op.name, None)
        if plan is not None:
            return plan(op, depth, node)
        ctl = getattr(self, "ctl_" + op.name, None)
        if ctl is not None:
            return ctl(op, depth, pending)
        self.generic(op, depth, pending)

    def expr(self, v, pending: dict) -> str:
        v = self.names.canon(v)
        if isinstance(v, OpResult) and v.owner.name == "Const":
            return literal(v.owner.attrs["value"])
        got = pending.pop(v, None)
        return got.text if got is not None else self.names.of(v)

    def _inlinable(self, op, region) -> bool:
        if op.name in BLOB_READS or op.name in CONTROL or op.regions or len(op.results) != 1:
            return False
        if not op.opdef.is_pure or op.name in ("Const", "must"):
            return False
        n = self.names
        v = op.result
        if not n.needed(v) or n._pref[v][0] < 4 or len(n._group(n._root(v))) != 1:
            return False
        uses = n._uses.get(v, [])
        return len(uses) == 1 and uses[0].parent is region

    def _inline(self, op, pending: dict) -> bool:
        """Keep ``op`` to be written inside its user, unless the expression gets too long."""
        trial = dict(pending)
        mentions: set = set()
        for v in op.operands:
            c = self.names.canon(v)
            if c in trial:
                mentions |= trial[c].mentions
            elif not (isinstance(c, OpResult) and c.owner.name == "Const"):
                mentions.add(self.names.of(c))
        text = self.call(op, trial)
        if len(text) > MAX_INLINE:
            return False
        pending.clear()
        pending.update(trial)
        pending[op.result] = _Inline(text, mentions)
        return True

    def _bound_by(self, op) -> set:
        """Names the op's lines assign (its results, values made inside it, blobs it stores)."""
        got = self._binds.get(op)
        if got is None:
            got = set()
            for o in op.walk():
                for v in o.results:
                    if self.names.needed(v):
                        got.add(self.names.of(v))
                for r in o.regions:
                    got.update(self.names.of(a) for a in r.args if self.names.needed(a))
                if o.name == "store" and self.names.vis.shown_use(o, 0):
                    blob = self.names.blob(o.attrs["blob"])
                    if self.names.of(o.operands[0]) != blob:
                        got.add(blob)
            self._binds[op] = got
        return got

    # --- blob access
    def ctl_load(self, op, depth, pending):
        self._read(op, depth)

    def ctl_flag(self, op, depth, pending):
        self._read(op, depth)

    def _read(self, op, depth):
        n = self.names
        if n.needed(op.result) and n.of(op.result) != n.blob(op.attrs["blob"]):
            self.emit(depth, f"{n.of(op.result)} = {n.blob(op.attrs['blob'])}", op.loc)

    def ctl_store(self, op, depth, pending):
        n = self.names
        if not n.vis.shown_use(op, 0):
            return
        value = self.expr(op.operands[0], pending)
        if value != n.blob(op.attrs["blob"]):
            self.emit(depth, f"{n.blob(op.attrs['blob'])} = {value}", op.loc)

    def ctl_must(self, op, depth, pending):
        pass  # the value itself: its check ("read before written") is not part of the story

    def ctl_Const(self, op, depth, pending):
        pass  # written as a literal where it is used

    # --- control flow
    def copies(self, depth, targets, values, pending, loc) -> None:
        """``t = v`` for each target that is not already the value's variable."""
        pairs = [(t, v) for t, v in zip(targets, values) if not self.names.same(t, v)]
        if not pairs:
            return
        lhs = [self.names.of(t) for t, _ in pairs]
        rhs = [self.expr(v, pending) for _, v in pairs]
        if len(pairs) > 1 and set(lhs) & set(rhs):  # a swap: assign them all at once
            self.emit(depth, f"{', '.join(lhs)} = {', '.join(rhs)}", loc)
            return
        for t, e in zip(lhs, rhs):
            self.emit(depth, f"{t} = {e}", loc)

    def _carried(self, op):
        """(carried args, their start values) of a loop, for the slots the plan needs."""
        first = 1 if op.name == "for" else 0
        body = op.regions[0]
        slots = [k for k in range(len(body.args) - first) if self.names.vis.slot_needed(op, k)]
        return [body.args[first + k] for k in slots], [op.operands[first + k] for k in slots]

    def ctl_for(self, op, depth, pending):
        args, inits = self._carried(op)
        self.copies(depth, args, inits, pending, op.loc)
        body = op.regions[0]
        index = self.names.of(body.args[0]) if self.names.needed(body.args[0]) else "_"
        count = self.expr(op.operands[0], pending)
        self.block(depth, f"for {index} in range({count})", lambda: self.region(body, depth + 1), op.loc)
        self._loop_results(op, depth, pending)

    def ctl_loop(self, op, depth, pending):
        args, inits = self._carried(op)
        self.copies(depth, args, inits, pending, op.loc)
        self.block(depth, "while True", lambda: self.region(op.regions[0], depth + 1), op.loc)
        self._loop_results(op, depth, pending)

    def _loop_results(self, op, depth, pending):
        if op.name != "for":
            return
        first = 1
        body = op.regions[0]
        pairs = [(r, body.args[first + k]) for k, r in enumerate(op.results) if self.names.needed(r)]
        self.copies(depth, [r for r, _ in pairs], [a for _, a in pairs], pending, op.loc)

    def ctl_yield(self, op, depth, pending):
        parent = op.parent.parent
        if parent.name in ("for", "loop"):
            first = 1 if parent.name == "for" else 0
            pairs = [(op.parent.args[first + k], v) for k, v in enumerate(op.operands)
                     if self.names.vis.slot_needed(parent, k)]
        else:
            pairs = [(r, v) for r, v in zip(parent.results, op.operands) if self.names.needed(r)]
        self.copies(depth, [t for t, _ in pairs], [v for _, v in pairs], pending, op.loc)

    def ctl_break_if(self, op, depth, pending):
        loop = op.parent.parent
        cond = self.expr(op.operands[0], pending)
        pairs = [(r, v) for r, v in zip(loop.results, op.operands[1:]) if self.names.needed(r)]
        pairs = [(r, v) for r, v in pairs if not self.names.same(r, v)]
        if not pairs:
            return self.emit(depth, f"if {cond}: break", op.loc)

        def fill():
            self.copies(depth + 1, [r for r, _ in pairs], [v for _, v in pairs], pending, op.loc)
            self.emit(depth + 1, "break", op.loc)
        self.block(depth, f"if {cond}", fill, op.loc)

    def ctl_if(self, op, depth, pending):
        if not self.names.vis.has_effect(op) and not any(self.names.needed(r) for r in op.results):
            return
        cond = self.expr(op.operands[0], pending)
        then, other = op.regions
        start = len(self.lines)
        self.region(then, depth + 1)
        then_lines = self.lines[start:]
        del self.lines[start:]
        self.region(other, depth + 1)
        else_lines = self.lines[start:]
        del self.lines[start:]
        if not then_lines and else_lines:
            self.emit(depth, f"if not {cond}:", op.loc)
            self.lines += else_lines
            return
        self.emit(depth, f"if {cond}:", op.loc)
        self.lines += then_lines or [Line(depth + 1, "pass")]
        if _one_chain(else_lines, depth + 1):  # else: if ... -> elif ...
            first = else_lines[0]
            self.lines.append(Line(depth, "el" + first.text, first.loc))
            self.lines += [Line(ln.depth - 1, ln.text, ln.loc) for ln in else_lines[1:]]
        elif else_lines:
            self.emit(depth, "else:")
            self.lines += else_lines

    def ctl_fused(self, op, depth, pending):
        if any(self.names.needed(r) for r in op.results):
            self.block(depth, "fused", lambda: self.region(op.regions[0], depth + 1), op.loc)

    def ctl_concurrent(self, op, depth, pending):
        if any(self.names.needed(r) for r in op.results):
            self.block(depth, "at the same time", lambda: self.region(op.regions[0], depth + 1), op.loc)

    # --- ops
    def generic(self, op, depth, pending) -> None:
        n = self.names
        if op.opdef.is_pure and not any(n.needed(r) for r in op.results):
            return
        call = self.call(op, pending)
        repeated = {k for k, _ in aliased(op)}
        outs = [n.of(r) if n.needed(r) else "_" for k, r in enumerate(op.results) if k not in repeated]
        text = f"{', '.join(outs)} = {call}" if any(o != "_" for o in outs) else call
        if not op.regions:
            return self.emit(depth, text, op.loc)
        labels = op.opdef.regions

        def fill():
            for label, r in zip(labels, op.regions):
                self.block(depth + 1, label or "region", lambda r=r: self.region(r, depth + 2))
        self.block(depth, text, fill, op.loc)

    def call(self, op, pending) -> str:
        """``Op(a, b, key=value)``; a Python op shows its function: ``Python(report)(a)``."""
        args = [self.expr(v, pending) for v in op.operands]
        shown = {k: v for k, v in op.attrs.items() if not _is_default(op, k, v)}
        if op.name == "Python":
            func = shown.pop("func", None)
            shown.pop("name", None)
            extra = [f"{k}={self.attr(v)}" for k, v in shown.items()]
            return f"Python({self.attr(func)})({', '.join(args + extra)})"
        kw = {k: self.attr(v) for k, v in shown.items()}
        special = SPECIAL.get(op.name)
        if special is not None:
            return special(op, args, kw)
        return f"{op.name}({', '.join(args + [f'{k}={v}' for k, v in kw.items()])})"

    def attr(self, v) -> str:
        if isinstance(v, Symbol):
            return self.names.blob(v)
        if isinstance(v, PyRef):
            return v.name
        if isinstance(v, Type):
            return str(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.attr(x) for x in v) + "]"
        return literal(v)


def _one_chain(lines, depth: int) -> bool:
    """Whether ``lines`` are exactly one if/elif/else chain starting at ``depth``."""
    if not lines or lines[0].depth != depth or not (lines[0].text.startswith("if ")
                                                    and lines[0].text.endswith(":")):
        return False
    return all(ln.depth > depth or ln.text == "else:" or (ln.text.startswith("elif ") and ln.text.endswith(":"))
               for ln in lines[1:])


def literal(v) -> str:
    """A constant as Python would write it: ``3``, ``0.5``, ``'a'``, ``[1, 2]``, ``array(f32[100])``."""
    if isinstance(v, np.ndarray):
        if v.size > MAX_LITERAL:
            return f"array({dtype_of_numpy(v.dtype)}[{', '.join(map(str, v.shape))}])"
        v = v.tolist() if v.dtype != object else v.tolist()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, list):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str) and len(v) > 64:
        return repr(v[:64]) + f"...<{len(v)} chars>"
    return repr(v)


def _is_default(op, key, value) -> bool:
    default = op.opdef.attrs.get(key)
    if key == op.opdef.symbol:
        return False
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    try:
        return type(value) is type(default) and value == default
    except Exception:
        return False
