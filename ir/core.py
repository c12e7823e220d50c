"""The in-memory IR: SSA values, operations, single-block regions, modules.

Every op has a name, operands, typed results, attributes, regions and a source
location. Control flow is structured: a region is one block of ops with block
arguments (a loop's induction variable and carried values).
"""
from __future__ import annotations

from operator import attrgetter

from .diagnostics import UNKNOWN_LOC, Location
from .types import Type


class Symbol(str):
    """A blob name used as an attribute (printed ``@"name"``)."""

    __slots__ = ()


class Value:
    """An SSA value: defined once, by an op result or a region argument."""

    __slots__ = ("type", "hint", "uses")

    def __init__(self, type: Type, hint: str | None = None):
        self.type = type
        self.hint = hint
        # (op, operand index) -> None: a dict keeps use order and removes in O(1)
        self.uses: dict[tuple[Operation, int], None] = {}

    def replace_all_uses_with(self, other: Value) -> None:
        """Every use of this value uses ``other`` instead; ``other``'s uses gain them at
        their end, in order (``set_operand`` on each, done inline: passes replace often)."""
        if other is self:
            return
        other_uses = other.uses
        for use in self.uses:
            op, i = use
            op.operands[i] = other
            other_uses[use] = None
        self.uses = {}


# ``value_type(v)`` is ``v.type``; mapped over operands (``map(value_type, op.operands)``)
# it runs no Python frame per value, as a comprehension does.
value_type = attrgetter("type")


class OpResult(Value):
    __slots__ = ("owner", "index")

    def __init__(self, type, owner, index, hint=None):
        # Value's fields set here, not through super(): ops are made by the hundred thousand
        self.type = type
        self.hint = hint
        self.uses = {}
        self.owner = owner
        self.index = index


class RegionArg(Value):
    __slots__ = ("region", "index")

    def __init__(self, type, region, index, hint=None):
        self.type = type
        self.hint = hint
        self.uses = {}
        self.region = region
        self.index = index


# Regions inside regions, at most: what the IR text reads back and lowering makes
# (generated code nests one block per level, and Python's compiler stops at 100)
MAX_NESTING = 48


class Region:
    """A single block: arguments, then ops in order."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types=(), hints=None):
        self.args: list[RegionArg] = []
        self.ops: list[Operation] = []
        self.parent: Operation | None = None
        for i, t in enumerate(arg_types):
            self.add_arg(t, hints[i] if hints else None)

    def add_arg(self, type: Type, hint: str | None = None) -> RegionArg:
        arg = RegionArg(type, self, len(self.args), hint)
        self.args.append(arg)
        return arg

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Operation) -> Operation:
        op.parent = self
        self.ops.insert(index, op)
        return op

    def walk(self) -> list[Operation]:
        """Every op of the region and nested in it, in program order."""
        return _walk_ops(self.ops, [])

    @property
    def empty(self) -> bool:
        return not self.ops and not self.args


class Operation:
    """One IR operation. ``opdef`` is its declaration in the op table."""

    __slots__ = ("opdef", "name", "operands", "results", "attrs", "regions", "loc", "parent")

    def __init__(self, opdef, operands=(), result_types=(), attrs=None, regions=(),
                 loc: Location = UNKNOWN_LOC, hints=None):
        self.opdef = opdef
        self.name: str = opdef.name  # a plain attribute: passes read it constantly
        self.attrs: dict = dict(attrs) if attrs else {}
        self.loc = loc
        self.parent: Region | None = None
        if hints:
            self.results = [OpResult(t, self, i, hints[i]) for i, t in enumerate(result_types)]
        elif len(result_types) == 1:  # the usual cases first, without running a comprehension
            self.results = [OpResult(result_types[0], self, 0)]
        elif not result_types:
            self.results = []
        else:
            self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.operands: list[Value] = list(operands)
        for i, v in enumerate(self.operands):
            v.uses[(self, i)] = None
        self.regions: list[Region] = list(regions)
        for r in self.regions:
            r.parent = self

    @property
    def result(self) -> Value:
        (r,) = self.results
        return r

    def add_operand(self, v: Value) -> None:
        v.uses[(self, len(self.operands))] = None
        self.operands.append(v)

    def set_operand(self, i: int, v: Value) -> None:
        del self.operands[i].uses[(self, i)]
        v.uses[(self, i)] = None
        self.operands[i] = v

    def set_operands(self, values) -> None:
        """Make ``values`` the op's operands, all at once.

        Each value's use entries for this op end up last in its ``uses``, in operand
        order, as when the operands are dropped and added back one by one (printing
        walks uses in order); one call instead of one per operand.
        """
        for i, v in enumerate(self.operands):
            del v.uses[(self, i)]
        self.operands = operands = list(values)
        for i, v in enumerate(operands):
            v.uses[(self, i)] = None

    def drop_operands(self) -> None:
        for i, v in enumerate(self.operands):
            del v.uses[(self, i)]
        self.operands = []

    def erase(self) -> None:
        """Drop the operands of this op and of every op nested in it (it leaves the IR):
        values defined outside must not keep uses from ops that are gone."""
        for op in self.walk():
            op.drop_operands()

    def add_region(self, r: Region) -> Region:
        r.parent = self
        self.regions.append(r)
        return r

    def region(self, name: str) -> Region:
        """The region called ``name`` in the op's declaration."""
        return self.regions[self.opdef.regions.index(name)]

    def walk(self) -> list[Operation]:
        """This op, then every op nested in its regions, in program order.

        A list, filled in one pass: passes walk large modules many times. (It recurses
        once per level of region nesting, which the lowering's own recursion bounds.)
        """
        return _walk_into(self, [])

    def __repr__(self) -> str:
        return f"<{self.name} at {self.loc}>"


def _walk_into(op: Operation, out: list) -> list:
    """Append ``op`` and every op nested in it to ``out``, in program order."""
    out.append(op)
    for r in op.regions:
        _walk_ops(r.ops, out)
    return out


def _walk_ops(ops, out: list) -> list:
    """Append each of ``ops`` and every op nested in them to ``out``, in program order."""
    for o in ops:
        if o.regions:
            _walk_into(o, out)
        else:
            out.append(o)
    return out


class Module:
    """A whole compiled runnable: the ``module`` op and its body."""

    __slots__ = ("op", "origin", "types_settled")

    def __init__(self, op: Operation):
        self.op = op
        self.origin: dict = {}  # op -> where it stands in the text it was parsed from
        # Every result type is what infer-types gives it (set by that inference when it
        # reaches its fixpoint; the pass manager clears it after passes that may change that).
        self.types_settled = False

    @property
    def body(self) -> Region:
        return self.op.regions[0]

    def walk(self) -> list[Operation]:
        return self.op.walk()
