"""Structural and type checks on a module; run after lowering and after every pass.

A failure raises ``VerifyError`` at the offending op's location (the user's line).
"""
from __future__ import annotations

from .core import Module, Operation, Region
from .diagnostics import DSLError, VerifyError
from .opdef import PLAN, TERMINATOR
from .types import I64, subsumes

LOOPS = ("for", "loop")
ISOLATED = ("module", "group", "task", "parallel", "scope", "reporting")
PLACEMENT = {"group": ("module",), "task": ("group", "reporting")}  # reporting: a group's local reporters


def verify(module: Module, built: bool = False) -> None:
    """Raise VerifyError if the module breaks an IR invariant.

    ``built``: every op was made by ``make_op`` and none has changed since (no operand,
    result type or attribute), as after lowering. ``make_op`` already checked each op's
    attributes, and the arity and result types of ops with type inference; for those,
    only what it cannot see is checked: where values are used, regions, placement and
    control-flow structure.
    """
    if module.op.name != "module":
        raise VerifyError("the top-level op must be a module", module.op.loc)
    _Verifier(module.origin, built).op(module.op)


class _Verifier:
    def __init__(self, origin=None, built: bool = False):
        self.origin = origin or {}
        self.built = built
        # value -> how many isolated regions enclose its definition; a value is visible
        # where it was defined at the same isolation depth, in an enclosing region
        self.level: dict = {}
        self.depth = 0

    def op(self, op: Operation) -> None:
        """Check ``op`` and everything nested in it (its operands' visibility included)."""
        level, depth = self.level, self.depth
        for v in op.operands:
            if level.get(v) != depth:
                self.undefined_operand(op)
        self.checked(op)

    def checked(self, op: Operation) -> None:
        """The checks on ``op`` other than its operands' visibility, then its regions."""
        d = op.opdef
        if not self.built or d.infer is None:  # make_op checks arity only with inference
            self.declaration(op)
        if op.regions or _structured(d):
            self.structure(op)
        if op.regions:
            isolated = op.name in ISOLATED
            self.depth += isolated
            for r in op.regions:
                self.region(r)
            self.depth -= isolated

    def undefined_operand(self, op: Operation):
        i = next(i for i, v in enumerate(op.operands) if self.level.get(v) != self.depth)
        self.fail(op, f"operand {i} is used before it is defined (or outside its region)")

    def declaration(self, op: Operation) -> None:
        """The op agrees with its declaration: arity, attribute names, inferred result types."""
        d = op.opdef
        try:
            d.check_arity(len(op.operands), len(op.results))
            if not op.attrs.keys() <= d.attrs.keys():
                raise VerifyError(f"unknown attribute {sorted(set(op.attrs) - set(d.attrs))[0]!r}")
            if d.infer is not None:
                inferred = d.inferred([v.type for v in op.operands], op.attrs, len(op.results))
                if op.name in LOOPS:
                    inferred = None  # carried types may be wider than the initial values: see below
                if inferred is not None and inferred != tuple([r.type for r in op.results]):
                    got = ", ".join(str(r.type) for r in op.results)
                    want = ", ".join(map(str, inferred))
                    raise VerifyError(f"result types ({got}) differ from the inferred ({want})")
        except DSLError as e:
            self.fail(op, e.message, e.hint)

    def region(self, r: Region) -> None:
        # the hot loop of verification: every op of the module passes here once
        level, depth = self.level, self.depth
        for a in r.args:
            level[a] = depth
        ops = r.ops
        last = len(ops) - 1
        for i, op in enumerate(ops):
            if TERMINATOR in op.opdef.traits and i != last:
                self.fail(op, "yield must be the last op of its region")
            for v in op.operands:
                if level.get(v) != depth:
                    self.undefined_operand(op)
            # most ops of a built module need nothing more (asked once per op name)
            if op.regions or not self.built or not (_ONLY_OPERANDS.get(op.name) or _only_operands(op)):
                self.checked(op)
            for res in op.results:
                level[res] = depth
        # the region's values are not visible after it
        for a in r.args:
            level.pop(a, None)
        for op in ops:
            for res in op.results:
                level.pop(res, None)

    def structure(self, op: Operation) -> None:
        d = op.opdef
        if d.regions == ("*",):
            if not op.regions:
                self.fail(op, "needs at least one region")
        elif len(op.regions) != len(d.regions):
            self.fail(op, f"has {len(op.regions)} regions, declared {len(d.regions)}")
        if op.name not in _PLACED and PLAN not in d.traits:
            return  # the checks below are about plan ops and control flow
        parent = op.parent.parent if op.parent is not None else None
        pname = parent.name if parent is not None else None
        if op.name in PLACEMENT and pname not in PLACEMENT[op.name]:
            self.fail(op, f"must be directly inside {' or '.join(PLACEMENT[op.name])}")
        group_reporters = op.name == "reporting" and pname == "group"
        if d.has(PLAN) and op.name not in ("module", "group", "task") and pname in ("module", "group") \
                and not group_reporters:
            self.fail(op, "must be inside a task")
        check = _CHECKS.get(op.name)
        if check is not None:
            check(self, op, parent)

    def check_break_if(self, op, parent):
        if parent is None or parent.name not in LOOPS:
            self.fail(op, "break_if must be directly inside a for or loop body")
        self.same_types(op, op.operands[1:], parent.results, "break_if values")

    def check_for(self, op, parent):
        body = op.regions[0]
        if not body.args or body.args[0].type != I64:
            self.fail(op, "the body's first argument must be the i64 index")
        self.carried(op, body.args[1:], op.operands[1:])
        self.yields(op, body, op.results)

    def check_loop(self, op, parent):
        body = op.regions[0]
        self.carried(op, body.args, op.operands)
        self.yields(op, body, op.results)

    def carried(self, op, args, inits):
        """Carried values: results and body arguments share a type wide enough for the inits."""
        if [a.type for a in args] != [r.type for r in op.results]:
            self.fail(op, "results and carried body arguments must have the same types")
        self.same_types(op, inits, op.results, "initial values")

    def check_if(self, op, parent):
        for r in op.regions:
            if r.args:
                self.fail(op, "if regions take no arguments")
            self.yields(op, r, op.results)

    def arg_types(self, op, region, want):
        got = [a.type for a in region.args]
        if got != want:
            self.fail(op, f"body arguments ({', '.join(map(str, got))}) should be "
                          f"({', '.join(map(str, want))})")

    def yields(self, op, region, results):
        last = region.ops[-1] if region.ops else None
        if last is None or last.name != "yield":
            if results:
                self.fail(op, "a region of an op with results must end in yield")
            return
        self.same_types(last, last.operands, results, "yielded values")

    def same_types(self, op, values, results, what):
        got = [v.type for v in values]
        want = [r.type for r in results]
        if len(got) != len(want):
            self.fail(op, f"{what}: {len(got)} given, {len(want)} expected")
        for g, w in zip(got, want):
            if not subsumes(w, g):
                self.fail(op, f"{what}: type {g} does not match {w}")

    def fail(self, op: Operation, msg: str, hint=None):
        raise VerifyError(f"{op.name}: {msg}", self.origin.get(op, op.loc), hint)


# Per-op structural checks beyond the declaration (control-flow ops).
_CHECKS = {"break_if": _Verifier.check_break_if, "for": _Verifier.check_for,
           "loop": _Verifier.check_loop, "if": _Verifier.check_if}
_PLACED = frozenset(PLACEMENT) | frozenset(_CHECKS)  # ops whose parent structure() checks


def _structured(d) -> bool:
    """Whether ``structure()`` has anything to check on an op of this declaration
    without regions (else it would only find that none were declared)."""
    return bool(d.regions) or d.name in _PLACED or PLAN in d.traits


def _only_operands(op: Operation) -> bool:
    """Whether ``op``, built and without regions, needs no check but its operands'
    (remembered in _ONLY_OPERANDS when it does: declarations do not change)."""
    d = op.opdef
    if d.infer is not None and not _structured(d):
        _ONLY_OPERANDS[d.name] = True
        return True
    return False


_ONLY_OPERANDS: dict = {}  # op name -> True: built ops of it need only the operand check
