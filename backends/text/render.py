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

import numpy as np

from dslc.ir import OpResult, Symbol
from dslc.ir.escape import printable
from dslc.ir.printer import format_float
from dslc.ir.pyrefs import PyRef
from dslc.backends.common.liveness import BLOB_READS, CONTROL
from dslc.backends.common.names import Names, aliased
from dslc.ir.types import Type, dtype_of_numpy

from .control import ControlFlow
from .lines import Line
from .layout import Layout
from .special import SPECIAL

MAX_INLINE = 60      # longest expression written inside its user
MAX_LITERAL = 8      # longest constant written out element by element
COMMENT_COLUMN = 56  # where location comments start, at most


class _Inline:
    """A pure value waiting to be written inside its only user."""

    __slots__ = ("text", "mentions")

    def __init__(self, text, mentions):
        self.text, self.mentions = text, mentions


class PlanWriter(Layout, ControlFlow):
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
        return f"line {loc.line}" if same else f"{printable(loc.file)}:{loc.line}"

    def emit(self, depth: int, text: str, loc=None) -> None:
        # (names in the text are the input's: a newline or an escape in one is shown, not obeyed)
        self.lines.append(Line(depth, printable(text), loc))

    def block(self, depth: int, head: str, fill, loc=None, keep_empty: bool = True) -> bool:
        """``head:`` then what ``fill()`` writes one level deeper (``pass`` if nothing)."""
        start = len(self.lines)
        fill()
        if len(self.lines) == start and not keep_empty:
            return False
        if len(self.lines) == start:
            self.emit(depth + 1, "pass")
        self.lines.insert(start, Line(depth, printable(head) + ":", loc))
        return True

    def retitle(self, title: str) -> None:
        self.lines[0] = Line(0, printable(title) + ":")

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
        v = op.result
        if not self.names.anonymous(v):
            return False
        uses = self.names.shown_uses(v)
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
            return special(op, args, kw, self.names.blob)
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


def literal(v) -> str:
    """A constant as Python would write it: ``3``, ``0.5``, ``'a'``, ``[1, 2]``, ``array(f32[100])``."""
    if isinstance(v, np.ndarray):
        if v.size > MAX_LITERAL:
            return f"array({dtype_of_numpy(v.dtype)}[{', '.join(map(str, v.shape))}])"
        if v.dtype in (np.float32, np.float16):  # (tolist would widen them to their double expansions)
            return format_float(v[()]) if v.ndim == 0 else "[" + ", ".join(literal(x) for x in v) + "]"
        v = v.tolist()
    if isinstance(v, (np.float32, np.float16)):
        return format_float(v)
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
