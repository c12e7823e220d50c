"""``infer-types``: recompute result types from operand types, to a fixpoint.

Loads take the join of every type stored to their blob; carried loop values and
``if`` results widen to cover what flows into them. A shape or dtype that cannot
agree is an error at the user's line:

    %x = load @"x" : i64[1]          %x = load @"x" : i64[?]
    %y = Add(%x, %batch) : i64[1] -> %y = Add(%x, %batch) : i64[?]      (%batch : i64[?])
"""
from __future__ import annotations

from ..core import Module, Operation, Region, value_type
from ..diagnostics import DSLError, ProgramTypeError
from ..types import join, join_all, join_into
from .manager import Pass, register

MAX_ROUNDS = 8

# Ops whose declared inference gives no results and checks nothing (``lambda t, a, n: []``):
# inferring them can neither change a type nor raise, and they are nearly half of the ops.
NOTHING_TO_INFER = frozenset({"store", "yield"})


@register
class InferTypes(Pass):
    name = "infer-types"
    sets_types_settled = True

    def run(self, module: Module, ops=None, stale=None) -> None:
        """``ops``: the module walked, when the caller has it at hand (every store in it).

        ``stale``: None to infer every op. Or a set of ops, given only when the module's
        types were settled (see ``Module.types_settled``) and then changed only as the caller
        recorded: every op (besides loads, loops and ifs, always inferred) whose operand types
        may differ from those its result types were inferred from is in it. Inference being a
        pure function of operand types and attributes, any other op would get the types it
        has (and raise nothing), so only these are inferred. The set grows as types change:
        an op using a retyped value joins it. Same rounds, same order, same result.

        Sets ``module.types_settled`` to whether the types reached their fixpoint.
        """
        self.stale = stale
        module.types_settled = False  # until the fixpoint (an error may leave them half done)
        for _ in range(MAX_ROUNDS):
            self.stored = stored = {}
            if ops is None:
                _note_stores([module.op], stored)
            else:
                _note_stores(ops, stored, nested=False)
            self.changed = False
            self.region(module.body)
            if not self.changed:
                module.types_settled = True
                return

    def set(self, value, t) -> None:
        if value.type is not t:  # (types are interned: identity is equality)
            value.type = t
            self.retyped(value)

    def retyped(self, value) -> None:
        """``value``'s type changed: another round, and the ops using it are stale."""
        self.changed = True
        if self.stale is not None:
            self.stale.update([user for user, _ in value.uses])

    def widen(self, value, t) -> None:
        """Widen ``value``'s type to cover ``t`` as well."""
        if value.type is not t:  # the usual case: the very same type, nothing to join
            self.set(value, join(value.type, t))

    def region(self, r: Region) -> None:
        """Infer the ops of ``r`` in order (those of nested regions before the op holding them)."""
        stale = self.stale
        for op in r.ops:
            n = op.name
            if op.regions:
                if n == "for" or n == "loop":
                    self.loop(op)
                    continue
                for sub in op.regions:
                    self.region(sub)
                if n == "if":
                    self.widen_results(op, [s.ops[-1].operands for s in op.regions
                                            if s.ops and s.ops[-1].name == "yield"])
                    continue
            elif n == "load":
                blob = op.attrs["blob"]
                if blob in self.stored:
                    self.widen(op.result, self.stored[blob])
                continue
            elif n in NOTHING_TO_INFER:
                continue
            if stale is not None and op not in stale:
                continue
            # the op's declared inference (a generic op with regions gets here after them)
            d = op.opdef
            if d.infer is None:
                continue
            try:
                types = d.inferred(list(map(value_type, op.operands)), op.attrs, len(op.results))
            except DSLError as e:  # the user's types disagree: their error, at their line
                raise ProgramTypeError(e.message, e.loc or op.loc, e.hint) from e
            if types is not None:
                for res, t in zip(op.results, types):
                    if res.type is not t:
                        res.type = t
                        self.retyped(res)

    def loop(self, op: Operation) -> None:
        body = op.regions[0]
        args = body.args[1:] if op.name == "for" else body.args
        inits = op.operands[1:] if op.name == "for" else op.operands
        for _ in range(MAX_ROUNDS):
            before = [a.type for a in args]
            for a, v in zip(args, inits):
                self.widen(a, v.type)
            self.region(body)
            flows = [o.operands[1:] for o in body.ops if o.name == "break_if"]
            if body.ops and body.ops[-1].name == "yield":
                flows.append(body.ops[-1].operands)
            for vals in flows:
                for a, v in zip(args, vals):
                    self.widen(a, v.type)
            if [a.type for a in args] == before:
                break
        for res, a in zip(op.results, args):
            self.set(res, a.type)

    def widen_results(self, op, flows) -> None:
        for i, res in enumerate(op.results):
            t = join_all([vals[i].type for vals in flows])
            if t is not None:
                self.set(res, t)


def _note_stores(ops, stored: dict, nested: bool = True) -> None:
    """Join into ``stored`` (blob -> type) the type of each store among ``ops`` and, if
    ``nested``, inside them."""
    for op in ops:
        if op.name == "store":
            join_into(stored, op.attrs["blob"], op.operands[0].type)
        elif nested and op.regions:
            for r in op.regions:
                _note_stores(r.ops, stored)
