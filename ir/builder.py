"""Creating ops: look up the declaration, check arity and attributes, infer result types.

Every op the lowering or a pass creates goes through ``make_op`` (or, for the blob
ops and constants the lowering makes by the hundred thousand, through the Builder's
``store``, ``load`` and ``const``, whose arguments are complete by construction), so
the op table is the single source of arity, attribute and type rules.
"""
from __future__ import annotations

from .core import Operation, Region, Symbol, Value, value_type
from .diagnostics import UNKNOWN_LOC, DSLError, Location, VerifyError, warn_unused_args
from .opdef import OPS


def make_op(name: str, operands=(), attrs=None, result_types=None, n_results=None,
            regions=(), loc: Location = UNKNOWN_LOC, hints=None) -> Operation:
    """A new, unattached op; errors carry ``loc``.

    Its attributes and arity are checked. Result types come from the declaration's
    inference; ops without one (load) or whose inference returns None (if) take
    ``result_types`` from the caller.
    """
    opdef = OPS.get(name)
    if opdef is None:
        raise VerifyError(f"unknown operator {name!r}", loc)
    try:
        full = opdef.full_attrs(attrs) if attrs or opdef.attrs else {}  # most ops: none at all
        if len(full) > len(opdef.attrs):  # an argument the op does not read: kept, with a warning
            warn_unused_args(name, opdef.unused_attrs(full), loc, opdef.misspelling)
        if n_results is None:
            n_results = len(result_types) if result_types is not None else opdef.results[0]
        if opdef.infer is not None:  # (inferred checks the arity)
            types = tuple(map(value_type, operands))
            # (no attributes given: the defaults, which the remembered answer's key leaves out)
            inferred = opdef.inferred(types, full, n_results, not attrs)
        else:
            opdef.check_arity(len(operands), n_results)
            inferred = None
        if inferred is None:
            if result_types is None and n_results == 0:
                result_types = []
            if result_types is None:
                raise VerifyError(f"{name} needs explicit result types")
            inferred = list(result_types)
        elif len(inferred) != n_results:
            opdef.check_arity(len(operands), len(inferred))
            raise VerifyError(f"{name} produces {len(inferred)} outputs, got {n_results} names")
    except DSLError as e:
        if e.loc is None:
            e.loc = loc
        raise
    op = Operation(opdef, operands, inferred, None, regions, loc, hints)
    op.attrs = full  # a new dict (full_attrs makes one): the op takes it instead of a copy
    return op


class Builder:
    """Appends new ops at the end of a region.

    (Its methods spell out make_op's parameters: forwarding ``**kw`` costs a dict per op.)
    """

    __slots__ = ("region",)

    def __init__(self, region: Region):
        self.region = region

    def create(self, name: str, operands=(), attrs=None, result_types=None, n_results=None,
               regions=(), loc: Location = UNKNOWN_LOC, hints=None) -> Operation:
        op = make_op(name, operands, attrs, result_types, n_results, regions, loc, hints)
        # Region.append, inline: every op the lowering makes passes here
        region = self.region
        op.parent = region
        region.ops.append(op)
        return op

    def value(self, name: str, operands=(), attrs=None, result_types=None, n_results=None,
              regions=(), loc: Location = UNKNOWN_LOC, hints=None) -> Value:
        """Create a single-result op and return its result."""
        return self.create(name, operands, attrs, result_types, n_results, regions, loc, hints).result

    # The ops below are made without make_op's checks, which they pass by construction:
    # each takes its exact operand count, its attributes are complete (in declaration
    # order) and of their kind (a blob attribute takes any name), and its result types
    # are what its inference gives. (The lowering makes a store per blob a segment
    # writes, a load per blob it reads first, and a constant per fill: most of its ops.)

    def store(self, value: Value, blob: str, loc: Location) -> Operation:
        """``store @blob(value)``: no results (its inference gives none, whatever it stores)."""
        op = Operation(_STORE, (value,), (), None, (), loc)
        op.attrs = {"blob": Symbol(blob)}
        return self.region.append(op)

    def load(self, blob: str, result_type, loc: Location, hint: str | None = None) -> Value:
        """``load @blob : result_type``: a load has no inference, its creator gives the type."""
        op = Operation(_LOAD, (), (result_type,), None, (), loc, (hint,) if hint is not None else None)
        op.attrs = {"blob": Symbol(blob), "optional": 0}
        return self.region.append(op).results[0]

    def const(self, array, loc: Location) -> Value:
        """``Const {value = array}`` (``array``: a read-only numpy array), typed by Const's
        inference (which remembers the type of each dtype and shape)."""
        attrs = {"value": array}
        op = Operation(_CONST, (), _CONST.infer((), attrs, 1), None, (), loc)
        op.attrs = attrs
        return self.region.append(op).results[0]


_STORE, _LOAD, _CONST = OPS["store"], OPS["load"], OPS["Const"]


def set_ops(region: Region, ops: list) -> None:
    """Make ``ops`` the ops of ``region`` (a pass's rewrite of a block), each re-parented."""
    region.ops = ops
    for op in ops:
        op.parent = region
