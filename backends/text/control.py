"""Loops, conditionals, stops and copies between a loop's (or branch's) variables.

    for i in range(10):          for(%n) {^(%i, %carried...): ... yield(...)}
    while True:                  loop {...}
      if EQ(x, 0): break         break_if(%c)
    if c: ... elif d: ... else:  if(%c) then {...} else { if(%d) ... }

A value handed on under another name (a loop's start value, what a branch yields)
shows as a copy ``t = v``; values ``names.Names`` made one variable need none.
A mixin of ``PlanWriter``.
"""
from __future__ import annotations

import re

from .lines import Line


class ControlFlow:
    """The ``ctl_*`` writers of control ops (each takes the op, its depth and the pending
    inline expressions of its region)."""

    def copies(self, depth, targets, values, pending, loc) -> None:
        """``t = v`` for each target that is not already the value's variable."""
        pairs = [(t, v) for t, v in zip(targets, values) if not self.names.same(t, v)]
        if not pairs:
            return
        lhs = [self.names.of(t) for t, _ in pairs]
        rhs = [self.expr(v, pending) for _, v in pairs]
        if len(pairs) > 1 and any(re.search(rf"(?<![\w.]){re.escape(t)}(?![\w.])", e)
                                  for t in lhs for e in rhs):  # e.g. a swap: all at once
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


def _one_chain(lines, depth: int) -> bool:
    """Whether ``lines`` are exactly one if/elif/else chain starting at ``depth``."""
    if not lines or lines[0].depth != depth or not (lines[0].text.startswith("if ")
                                                    and lines[0].text.endswith(":")):
        return False
    return all(ln.depth > depth or ln.text == "else:" or (ln.text.startswith("elif ") and ln.text.endswith(":"))
               for ln in lines[1:])
