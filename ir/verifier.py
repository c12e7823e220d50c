"""Structural and type checks on a module; run after lowering and after every pass.

A failure raises ``VerifyError`` at the offending op's location (the user's line).
"""
from __future__ import annotations

from .core import Module, Operation, Region
from .diagnostics import DSLError, VerifyError, warn_unused_args
from .opdef import PLAN, TERMINATOR
from .types import I64, subsumes

LOOPS = ("for", "loop")
ISOLATED = ("module", "group", "task", "parallel", "scope", "reporting")
PLACEMENT = {"group": ("module",), "task": ("group", "reporting")}  # reporting: a group's local reporters


def verify(module: Module, built: bool = False) -> None:
    """Raise VerifyError if the module breaks an IR invariant.

    ``built``: every op was made by ``make_op`` and none has changed since (no operand,
    result type or attribute), as after lowering. ``make_op`` already checked each op's
    arity and attributes, and the result types of ops with type inference; only what it
    cannot see is checked: where values are used, regions, placement and control-flow
    structure.
    """
    if module.op.name != "module":
        raise VerifyError("the top-level op must be a module", module.op.loc)
    _Verifier(module.origin, built).op(module.op)


class _Verifier:
    def __init__(self, origin=None, built: bool = False):
        self.origin = origin or {}
        self.built = built
        # the values visible at the op being checked: those defined before it in its
        # region and in the enclosing regions, up to the nearest isolated op (a set: one
        # ``issuperset`` checks all operands of an op)
        self.visible: set = set()
        # op names whose built ops need only the operand check (none when not built)
        self.plain = _PLAIN_WHEN_BUILT if built else frozenset()

    def op(self, op: Operation) -> None:
        """Check ``op`` and everything nested in it (its operands' visibility included)."""
        if not self.visible.issuperset(op.operands):
            self.undefined_operand(op)
        self.checked(op)

    def checked(self, op: Operation) -> None:
        """The checks on ``op`` other than its operands' visibility, then its regions."""
        d = op.opdef
        if not self.built:
            self.declaration(op)
        if op.regions or _structured(d):
            self.structure(op)
        if not op.regions:
            return
        if op.name == "module" or op.name == "group":
            self.plan_only(op)
        if op.name in ISOLATED:  # nothing from outside is visible in its regions
            outer = self.visible
            for r in op.regions:
                self.visible = set()
                self.region(r, forget=False)  # the set is dropped whole afterwards
            self.visible = outer
        else:
            for r in op.regions:
                self.region(r)

    def plan_only(self, op: Operation) -> None:
        """A module, and a group's body, hold plan ops (groups, tasks...) only: other ops
        run in a task (or in a group's init and exit regions)."""
        for r in op.regions if op.name == "module" else op.regions[1:2]:
            for o in r.ops:
                if PLAN not in o.opdef.traits:
                    self.fail(o, f"must be inside a task, not directly in a {op.name}"
                                 + (" body" if op.name == "group" else ""),
                              'put it in a task\'s body: task @"name" body { ... }')

    def undefined_operand(self, op: Operation):
        i = next(i for i, v in enumerate(op.operands) if v not in self.visible)
        self.fail(op, f"operand {i} is used before it is defined (or outside its region)")

    def declaration(self, op: Operation) -> None:
        """The op agrees with its declaration: arity, attribute names, inferred result types."""
        d = op.opdef
        try:
            d.check_arity(len(op.operands), len(op.results))
            unused = d.unused_attrs(op.attrs)
            if unused:
                warn_unused_args(op.name, unused, op.loc, d.misspelling)
            if d.infer is not None:
                inferred = d.inferred([v.type for v in op.operands], op.attrs, len(op.results))
                if op.name in LOOPS:
                    inferred = None  # carried types may be wider than the initial values: see below
                if inferred is not None and inferred != tuple([r.type for r in op.results]):
                    got = ", ".join(str(r.type) for r in op.results)
                    want = ", ".join(map(str, inferred))
                    raise VerifyError(f"result types ({got}) differ from the inferred ({want})",
                                      hint=f"its operands give ({want}): write those types after "
                                           "':' or change the operands")
        except DSLError as e:
            self.fail(op, e.message, e.hint)

    def region(self, r: Region, forget: bool = True) -> None:
        """Check the ops of ``r`` in order; ``forget``: its values are removed from
        ``visible`` afterwards (they are not visible after the region)."""
        # the hot loop of verification: every op of the module passes here once, and
        # most need no more than two set operations
        visible, plain = self.visible, self.plain
        visible.update(r.args)
        ops = r.ops
        last = ops[-1] if ops else None
        defined = []  # the values of the region's ops, to forget after it
        for op in ops:
            if not visible.issuperset(op.operands):
                self.undefined_operand(op)
            if op.regions or op.name not in plain:
                self.in_region(op, op is last)
            results = op.results
            if results:  # (stores, most ops after lowering, have none)
                visible.update(results)
                defined += results
        if forget:
            visible.difference_update(r.args)
            visible.difference_update(defined)

    def in_region(self, op: Operation, is_last: bool) -> None:
        """The checks on ``op`` of a region beyond its operands' visibility."""
        if TERMINATOR in op.opdef.traits and not is_last:
            self.fail(op, "yield must be the last op of its region")
        if op.regions or not self.built or not _only_operands(op):
            self.checked(op)

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

    def check_defer(self, op, parent):
        body = op.regions[0]
        self.arg_types(op, body, [v.type for v in op.operands])
        ops = body.ops
        if len(ops) != 2 or ops[1].name != "yield" or len(ops[1].operands) != 1 or not ops[0].opdef.is_pure \
                or ops[1].operands[0] not in ops[0].results:
            self.fail(op, "the body must be one pure op and a yield of one of its results")

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
        raise VerifyError(f"{op.name}: {msg}", self.origin.get(op, op.loc),
                          hint or "`dslc ops` (the operator reference) states what each op takes and where")


# Per-op structural checks beyond the declaration (control-flow ops).
_CHECKS = {"break_if": _Verifier.check_break_if, "for": _Verifier.check_for,
           "loop": _Verifier.check_loop, "if": _Verifier.check_if, "defer": _Verifier.check_defer}
_PLACED = frozenset(PLACEMENT) | frozenset(_CHECKS)  # ops whose parent structure() checks


def _structured(d) -> bool:
    """Whether ``structure()`` has anything to check on an op of this declaration
    without regions (else it would only find that none were declared)."""
    return bool(d.regions) or d.name in _PLACED or PLAN in d.traits


def _only_operands(op: Operation) -> bool:
    """Whether ``op``, built and without regions, needs no check but its operands'
    (its name is remembered in _PLAIN_WHEN_BUILT when it does and is no terminator:
    declarations do not change)."""
    d = op.opdef
    if not _structured(d):
        if TERMINATOR not in d.traits:
            _PLAIN_WHEN_BUILT.add(d.name)
        return True
    return False


_PLAIN_WHEN_BUILT: set = set()  # op names whose built ops need only the operand check
