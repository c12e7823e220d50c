"""Operator declarations: the one table every pass and backend reads.

An ``OpDef`` holds an op's name, arity, attributes, type inference, traits,
effects, region names and fold. Declaring an op is one ``declare(...)`` call in
``ir/ops/``; backends then register a kernel for it by name.
"""
from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .diagnostics import DSLTypeError, VerifyError
from .types import Type

REQUIRED = object()  # marks an attribute without a default

# Traits
PURE = "pure"                # no effects: may be folded, CSE'd, removed when unused (unless
                             # it may fail: see OpDef.may_fail)
ELEMENTWISE = "elementwise"  # result[i] depends on operand[i] only (with broadcasting)
COMMUTATIVE = "commutative"
TERMINATOR = "terminator"    # ends a region (yield)
CONTROL = "control"          # structured control flow (for, loop, if, break_if)
PLAN = "plan"                # execution-plan structure (group, task, parallel, scope)
BLOB = "blob"                # reads or writes a named workspace slot
SIZED_BY_VALUES = "sized-by-values"  # a result's size comes from operand values or attributes

TRAIT_DOCS = {  # what each trait promises, for passes and for docs/ir.md
    PURE: "no effects: may be folded, CSE'd, removed when unused; an op that may fail "
          "(its kernel can raise, e.g. integer Div by zero) stays where it is",
    ELEMENTWISE: "result[i] depends on operand[i] only (with broadcasting)",
    COMMUTATIVE: "operands may be swapped",
    TERMINATOR: "ends a region (yield)",
    CONTROL: "structured control flow (for, loop, if, break_if)",
    PLAN: "execution-plan structure (group, task, parallel, scope)",
    BLOB: "reads or writes a named workspace slot",
    SIZED_BY_VALUES: "a result's size comes from operand values or attributes (a fill's shape, a "
                     "one-hot's width, a sum of lengths), not from the operands' sizes: every kernel "
                     "checks it against the memory budget (ir/budget.py) before allocating",
}


MODEL_SCOPE_SWITCHES = frozenset({"use_cudnn", "cudnn_exhaustive_search", "order"})


@dataclass(frozen=True)
class Effect:
    """A side effect on a named kind of resource (``counter``, ``queue``, ``io``...)."""

    resource: str
    mode: str  # "read", "write" or "alloc"


@dataclass(frozen=True)
class OpDef:
    name: str
    operands: tuple[int, int | None]            # (min, max); max None = variadic
    infer: Callable | None                      # (types, attrs, n_results) -> [Type]; None: given
    attrs: dict = field(default_factory=dict)   # name -> default (or REQUIRED)
    traits: frozenset = frozenset()
    effects: tuple[Effect, ...] = ()
    regions: tuple[str, ...] = ()
    results: tuple[int, int | None] = (1, 1)
    fold: Callable | None = None                # (*values, **attrs) -> value
    symbol: str | None = None                   # attribute printed as ``@name`` after the op name
    doc: str = ""                               # the semantics in one line
    module: str = ""                            # the ir.ops module that declared it (for docs)
    # (op) -> whether running this op may raise an error (integer Div by zero...); None:
    # never. A pure op that may fail is not dead code, its error is never folded away,
    # and it keeps its place among effects (see ``fails``)
    may_fail: Callable | None = None
    # operand indices that may be a blob created but never written (Caffe2's empty blob,
    # ``workspace.CreateBlob``): such an op starts its state from it (the kernel gets None)
    unset_ok: tuple[int, ...] = ()
    # (types, attrs, n_results) -> per result, a shape giving the most each dim its type
    # leaves open can be (None where unbounded), or None; shape reports (Caffe2's
    # InferShapesAndTypes) show it. None: no bounds
    bounds: Callable | None = None
    # a sparse update's operands whose rows it rewrites (a table, its moments): each result
    # is such an operand with the indexed rows changed, so a backend may write the operand
    # in place when nothing else reads it, and the op's work is the rows, not the table
    updates: tuple[int, ...] = ()
    # how many of the last results a pass may drop when nothing uses them: the op then
    # makes only the others, and does not compute the dropped ones (FCGradient's dX). An
    # int k: the last k of the most results the op declares (an op written with fewer has
    # dropped them already); or (attrs, n_results) -> how many of its n last results are
    # optional, where that depends on attributes (ConvGradient's dX: 3rd, or 2nd with
    # no_bias). Read through ``optional``
    optional_results: int | Callable = 0
    # operands the op reads for their shape alone, never their values (SumReduceLike's
    # second); or (attrs, n_operands) -> those indices. A gradient op may read an input its
    # forward op wrote over in place, with the same shape, there (autodiff: check_own_overwrite)
    shape_operands: tuple[int, ...] | Callable = ()
    # (types, attrs, result types) -> (flops, bytes written, bytes read) of one run, for
    # GetOperatorCost (ir/cost.py builds the usual rules); None: no cost model
    cost: Callable | None = None
    # whether ``traits`` holds PURE: a plain field (set by __post_init__), since passes ask
    # it of every op
    is_pure: bool = field(init=False, repr=False, compare=False, default=False)

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def fails(self, op) -> bool:
        """Whether running ``op`` (an op of this declaration) may raise an error."""
        return self.may_fail is not None and bool(self.may_fail(op))

    def optional(self, op) -> int:
        """How many of ``op``'s last results a pass may drop when nothing uses them."""
        k = self.optional_results
        if callable(k):
            return k(op.attrs, len(op.results))
        return max(0, len(op.results) - (self.results[1] - k)) if k else 0

    def check_arity(self, n_operands: int, n_results: int) -> None:
        """Raise VerifyError unless the operand and result counts fit the declaration."""
        lo, hi = self.operands
        if n_operands < lo or (hi is not None and n_operands > hi):
            raise VerifyError(f"{self.name} takes {_count(lo, hi, 'input')}, got {n_operands}",
                              hint=f"pass {_count(lo, hi, 'blob')} in {self.name}'s input list"
                                   + (f" ({self.name}: {self.doc})" if self.doc else ""))
        lo, hi = self.results
        if n_results < lo or (hi is not None and n_results > hi):
            raise VerifyError(f"{self.name} produces {_count(lo, hi, 'output')}, got {n_results}",
                              hint=f"name {_count(lo, hi, 'output blob')} in {self.name}'s output list")

    def infer_types(self, types: list[Type], attrs: dict, n_results: int) -> list[Type]:
        self.check_arity(len(types), n_results)
        out = self.infer(types, attrs, n_results)
        if len(out) != n_results:
            raise VerifyError(f"{self.name} produces {len(out)} outputs, got {n_results} names")
        return out

    def __post_init__(self):
        # What full_attrs checks on every new op, worked out once per declaration:
        # (attribute name -> the classes its default's kind accepts, or None for anything;
        # the required names). Attributes without a default, or defaulting to None, take
        # anything: their op's type inference checks them. (Set with object.__setattr__:
        # a frozen dataclass.)
        accepts = {k: _ACCEPTS.get(_kind_of(default)) for k, default in self.attrs.items()}
        required = tuple(k for k, default in self.attrs.items() if default is REQUIRED)
        object.__setattr__(self, "_attr_rules", (accepts, required))
        object.__setattr__(self, "is_pure", PURE in self.traits)

    def full_attrs(self, attrs: dict) -> dict:
        """``attrs`` with defaults filled in, as a new dict; unknown or missing required
        ones are errors.

        The keys come in declaration order. The usual case (every value of its kind,
        required ones given) is a copy of the defaults updated with ``attrs``; anything
        else goes through ``_checked_attrs``, which raises the first error.
        """
        accepts, required = self._attr_rules
        if not attrs:
            return self._checked_attrs(attrs) if required else dict(self.attrs)
        for k, value in attrs.items():
            want = accepts.get(k, ())  # an unknown name: () accepts nothing
            if want is not None and not isinstance(value, want):
                return self._checked_attrs(attrs)
        out = dict(self.attrs)
        out.update(attrs)
        for k in required:
            if out[k] is REQUIRED:
                return self._checked_attrs(attrs)
        return out

    def _checked_attrs(self, attrs: dict) -> dict:
        """``full_attrs``, checked one attribute at a time: an unknown name is reported
        first, then the first wrong or missing attribute in declaration order."""
        unused = [k for k in attrs if k not in self.attrs]
        out = {}
        for k, default in self.attrs.items():
            if k in attrs:
                value = attrs[k]
                want = _kind_of(default)
                if want == "a list" and isinstance(value, np.ndarray) and value.ndim == 1:
                    value = value.tolist()  # (Caffe2 takes a vector as a list argument)
                if want == "a string" and hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
                    from google.protobuf import text_format  # (a message argument: its text form,
                    value = text_format.MessageToString(value)  # which IR text can hold)
                if want is not None and not isinstance(value, _ACCEPTS[want]):
                    raise VerifyError(f"{self.name} argument {k!r} must be {want}, got {value!r}",
                                      hint=f"pass {k}=<{want}> (its default is {default!r})")
                out[k] = value
            elif default is REQUIRED:
                typo = [u for u in unused if self.misspelling(u) == k]
                raise VerifyError(f"{self.name} needs the argument {k!r}",
                                  hint=f"did you mean {k!r} for {typo[0]!r}?" if typo
                                  else f"pass {k}=... to {self.name}")
            else:
                out[k] = default
        for k in unused:  # kept after the declared ones, unused (the verifier warns)
            out[k] = attrs[k]
        return out

    def misspelling(self, bad: str) -> str | None:
        """The declared argument ``bad`` may be a misspelling of (within two edits), if any.
        Caffe2 runs an op with an argument it does not read, misspelt or not, so dslc does
        too: the warning about it names this one (warn_unused_args)."""
        return misspelling_of(bad, self.attrs)

    def known_attrs(self, attrs: dict) -> dict:
        """``attrs`` without the undeclared (unused) ones: what folds and kernels take."""
        return attrs if len(attrs) <= len(self.attrs) else {k: v for k, v in attrs.items() if k in self.attrs}

    def unused_attrs(self, attrs: dict) -> list:
        """The names in ``attrs`` the op does not declare (kept, never read), but for the
        model-wide arguments a Caffe2 model's arg scope hands every brew helper (``order``
        and the cuDNN switches reach any op a helper forwards its arguments to, in Caffe2 as
        here)."""
        return [k for k in attrs if k not in self.attrs and k not in MODEL_SCOPE_SWITCHES]



    def inferred(self, types, attrs: dict, n_results: int, defaults: bool = False):
        """``infer(types, attrs, n_results)`` as a tuple (None if the creator gives them),
        after ``check_arity``.

        Type inference is a pure function of its arguments, so the answer is remembered
        when the attributes are the declaration's defaults (``defaults``: the key then
        leaves them out) or plain scalars (the key holds each value's class too: ``1``,
        ``1.0`` and ``True`` are equal in Python but not to inference). Types are
        interned (``ir.types``), so a tuple of them hashes and compares by identity, in C.
        The arity is checked only when the answer is not remembered: the key holds the
        operand and result counts, and only checked answers are kept. Errors are not
        remembered: they are raised again on every call.
        """
        if defaults or not attrs:  # most ops: a short key
            key = (self.name, n_results, tuple(types))
        else:
            classes = tuple(map(type, attrs.values()))
            if not _PLAIN.issuperset(classes):  # e.g. Const's array: not a key
                return self._checked_infer(types, attrs, n_results)
            key = (self.name, n_results, tuple(types), tuple(attrs.items()), classes)
        hit = _INFERRED.get(key, _INFERRED)  # (the table itself: a default no entry holds)
        if hit is not _INFERRED:
            return hit
        out = self._checked_infer(types, attrs, n_results)
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        _INFERRED[key] = out
        return out

    def _checked_infer(self, types, attrs: dict, n_results: int):
        """``check_arity``, then ``infer`` (as a tuple; None stays None)."""
        self.check_arity(len(types), n_results)
        return _as_tuple(self.infer(list(types), attrs, n_results))


def _as_tuple(types):
    """``types`` as a tuple (None stays None)."""
    return None if types is None else tuple(types)


def _kind_of(default) -> str | None:
    """The kind of attribute value that ``default`` implies (a key of ``_ACCEPTS``)."""
    for kinds, want in _KINDS:
        if isinstance(default, kinds):
            return want
    return None


# The kind an attribute's default implies, and the Python values that have that kind
# (bool is an int in Caffe2's arguments; ints are fine where a float is expected).
_KINDS = [((bool, int, np.integer), "an int"), ((float, np.floating), "a number"),
          (str, "a string"), ((list, tuple), "a list")]
_ACCEPTS = {"an int": (bool, int, np.integer), "a number": (bool, int, float, np.integer, np.floating),
            "a string": str, "a list": (list, tuple)}

# Remembered type inference (OpDef.inferred): attribute values of these classes are
# immutable and hash by value, so they can be part of a key. (Blob names, ``Symbol``,
# are left out on purpose: nearly every blob op names another blob, so remembering
# their trivial inference would only fill the table.)
_PLAIN = frozenset({int, float, bool, str, type(None)})
_INFERRED: dict = {}  # key -> the inferred result types (or None)
_INFERRED_MAX = 1 << 16  # distinct (op, operand types, attributes) answers kept


def _count(lo, hi, what):
    if hi is None:
        return f"at least {lo} {what}{'s' if lo != 1 else ''}"
    if lo == hi:
        return f"{lo} {what}{'s' if lo != 1 else ''}"
    return f"{lo} to {hi} {what}s"


class OpTable:
    """All declared operators, by name."""

    def __init__(self):
        self._defs: dict[str, OpDef] = {}
        self.get = self._defs.get  # the dict's own: make_op looks up every new op by name
        self.aliases: dict[str, str] = {}  # another Caffe2 name of a declared op -> its name

    def alias(self, name: str, target: str) -> None:
        """``name`` is the op ``target`` under another of Caffe2's names (MaxPool2D: MaxPool);
        a net records it as written, lowering and gradients read it as ``target``."""
        if target not in self._defs or name in self._defs or name in self.aliases:
            raise ValueError(f"alias {name} of {target}: the target must exist and the name be free")
        self.aliases[name] = target

    def canonical(self, name: str) -> str:
        return self.aliases.get(name, name)

    def declare(self, opdef: OpDef) -> OpDef:
        if opdef.name in self._defs:
            raise ValueError(f"operator {opdef.name} declared twice")
        self._defs[opdef.name] = opdef
        return opdef

    def __contains__(self, name: str) -> bool:
        return name in self._defs

    def __getitem__(self, name: str) -> OpDef:
        return self._defs[name]

    def __iter__(self):
        return iter(self._defs.values())

    def suggest(self, name: str, extra=()) -> list[str]:
        """The declared names closest to ``name`` (for 'did you mean' hints).

        Same name in another case first, then spelling neighbours, then names that
        abbreviate it (``Substract`` -> ``Sub``, ``Maximum`` -> ``Max``).
        """
        names = list(self._defs) + list(extra)
        low = name.lower()
        same = [n for n in names if n.lower() == low]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        prefix = [n for n in names if len(n) >= 3 and low.startswith(n.lower())]
        out = []
        for n in same + close + sorted(prefix, key=len, reverse=True):
            if n not in out:
                out.append(n)
        return out[:3]


OPS = OpTable()


def declare(name: str, operands=(1, 1), infer=None, **kw) -> OpDef:
    """Declare an operator in the global table (see ``OpDef`` for the fields).

    ``operands`` and ``results`` may be an int (exact count) or ``(min, max)``;
    the declaring module is recorded so the generated docs can group by it.
    """
    kw.setdefault("module", _caller_module())
    if isinstance(operands, int):
        operands = (operands, operands)
    if "results" in kw and isinstance(kw["results"], int):
        kw["results"] = (kw["results"], kw["results"])
    if "traits" in kw:
        kw["traits"] = frozenset(kw["traits"])
    return OPS.declare(OpDef(name, operands, infer, **kw))


def _caller_module() -> str:
    """The first module on the stack outside this one (declaration helpers stay in it)."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    return f.f_globals.get("__name__", "") if f is not None else ""


def type_error(msg: str, hint: str | None = None):
    raise DSLTypeError(msg, hint=hint)


def misspelling_of(bad: str, names) -> str | None:
    """The first of ``names`` within two edits of ``bad`` (what it may misspell), if any."""
    return next((k for k in names if _within_two_edits(bad, k)), None)


def _within_two_edits(a: str, b: str) -> bool:
    """Whether the Levenshtein distance between ``a`` and ``b`` is at most 2."""
    if abs(len(a) - len(b)) > 2:
        return False
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1] <= 2
