"""``fold-constants``: evaluate what is known before running, simplify by algebra.

* a pure op whose operands are all constants and whose declaration has a ``fold``
  becomes a ``Const``;
* the rules below, each a law, where the result type equals the kept operand's (for
  floats x + 0 -> x only with a -0.0: IEEE's -0.0 + 0.0 is +0.0);
* ``if`` on a constant condition becomes the taken branch; ``for`` zero times goes.
  Their results may have had wider types than the values that replace them (an ``if``
  result joins both branches: ``?`` for an i64 and an f32); the ops using them are then
  inferred again, so every type is what the verifier infers;
* an op whose fold raises (integer division by zero) stays, to fail at run time at
  the user's line.

    %c = Const {value = dense<i64: 2>} : i64
    %d = Const {value = dense<i64: 3>} : i64      ->   %e = Const {value = dense<i64: 6>} : i64
    %e = Mul(%c, %d) : i64
"""
from __future__ import annotations

import numpy as np

from ..budget import MAX_FOLD_ELEMENTS, foldable
from ..builder import set_ops
from ..core import Module, Operation, OpResult, Region
from ..opdef import OPS
from .infer import InferTypes
from .manager import Pass, register


def const_value(v):
    """The constant a value holds, or None."""
    if type(v) is OpResult and v.owner.name == "Const":
        return v.owner.attrs["value"]
    return None


def _is(v, x) -> bool:
    """Whether ``v`` is a non-empty constant whose every element equals ``x``."""
    return _all_equal(const_value(v), x)


def _all_equal(c, x) -> bool:
    """Whether ``c`` (a constant's value, or None) is non-empty and every element equals ``x``."""
    if c is None or c.size == 0:
        return False
    if c.dtype.kind in "biuf":
        # numbers and bools compare exactly so as Python scalars, much cheaper than numpy
        # comparisons; the first element mostly settles it (the rest only if it equals x)
        return c.item(0) == x and (c.size == 1 or bool((c == x).all()))
    return bool(c == x) if c.ndim == 0 else bool(np.all(c == x))


def _const_values(op: Operation):
    """The constant each operand of ``op`` holds (None for one that holds none), or None
    when no operand holds one."""
    values = [const_value(v) for v in op.operands]
    for v in values:
        if v is not None:
            return values
    return None


# (op, law, which operand is kept, what every element of the other, a constant, equals)
IDENTITIES = [
    ("Add", "x + 0 -> x", 0, 0),
    ("Add", "0 + x -> x", 1, 0),
    ("Sub", "x - 0 -> x", 0, 0),
    ("Mul", "x * 1 -> x", 0, 1),
    ("Mul", "1 * x -> x", 1, 1),
    ("Div", "x / 1 -> x", 0, 1),
    ("And", "x and true -> x", 0, True),
    ("And", "true and x -> x", 1, True),
    ("Or", "x or false -> x", 0, False),
    ("Or", "false or x -> x", 1, False),
]
def _signed_zero_ok(name: str, c) -> bool:
    """Whether a float zero ``c`` keeps x as it is in IEEE arithmetic: x + 0 is +0 for
    x = -0, so only x + (-0) and x - (+0) are x for every x."""
    if name not in ("Add", "Sub") or c.dtype.kind != "f":
        return True
    return bool(np.all(np.signbit(c))) if name == "Add" else not np.any(np.signbit(c))


_IDENTITIES_OF: dict = {}  # op name -> its rules, in table order
for _rule in IDENTITIES:
    _IDENTITIES_OF.setdefault(_rule[0], []).append(_rule)

_MAY_FOLD: dict = {}  # op name -> whether any rule of this pass applies to such ops


def _may_fold(op: Operation) -> bool:
    """Whether some rule may apply to ``op``'s kind of op (worked out once per name):
    most ops (loads, stores, constants, yields...) are left as they are at a glance."""
    got = _MAY_FOLD.get(op.name)
    if got is None:
        d = op.opdef
        got = op.name in ("if", "for", "Not") or op.name in _IDENTITIES_OF or \
            (d.fold is not None and d.is_pure)
        _MAY_FOLD[op.name] = got
    return got


def _become_const(op: Operation, value, t) -> None:
    """Turn ``op`` (one result, of type ``t``, no regions) into ``Const {value}`` in place.

    What ``make_op("Const", ...)`` and re-pointing every use would give, where it stands,
    with the same result, location and hint; but nothing is made or re-pointed: a new
    op cost several times the fold itself. (``Const`` takes no operands and only this
    attribute, and ``t`` is what its declaration infers: no check of make_op can fail.)
    """
    op.drop_operands()
    op.opdef = OPS["Const"]
    op.name = "Const"
    op.attrs = {"value": value}
    op.result.type = t


@register
class FoldConstants(Pass):
    name = "fold-constants"

    def run(self, module: Module) -> None:
        # Folds run with floating-point errors raised (``evaluate`` then leaves the op to
        # fail at run time). Set once for the pass: per fold it cost as much as the fold;
        # nothing else in this pass does floating-point arithmetic.
        self.narrowed = False  # a value was replaced by one of another type
        with np.errstate(all="raise"):
            self.region(module.body)
        if self.narrowed:
            InferTypes().run(module)

    def region(self, r: Region) -> None:
        out = []
        changed = False
        may_fold = _MAY_FOLD
        for op in r.ops:
            if op.regions:
                for sub in op.regions:
                    self.region(sub)
            may = may_fold.get(op.name)
            if may is None:
                may = _may_fold(op)
            new = self.fold(op) if may else None
            if new is None:
                out.append(op)
            else:
                out.extend(new)
                changed = True
        if changed:
            set_ops(r, out)

    def fold(self, op: Operation):
        """The ops that replace ``op``, or None when it stays where it is (perhaps turned
        into a ``Const`` in place)."""
        n = op.name
        if n == "if":
            return self.fold_if(op)
        if n == "for":
            if not _is(op.operands[0], 0):
                return None
            for res, init in zip(op.results, op.operands[1:]):
                self.replace_value(res, init)
            op.drop_operands()
            return []
        if n == "Not":
            x = op.operands[0]
            if type(x) is OpResult and x.owner.name == "Not" and x.type == op.result.type:
                return self.replace(op, x.owner.operands[0])  # not not x -> x
        values = _const_values(op)
        if values is None:
            if op.operands:
                return None  # every other rule needs a constant operand (or no operands at all)
            values = []
        for _name, _law, keep, x in _IDENTITIES_OF.get(n, ()):
            c = values[1 - keep]
            if _all_equal(c, x) and op.operands[keep].type == op.result.type and _signed_zero_ok(n, c):
                return self.replace(op, op.operands[keep])
        return self.evaluate(op, values)

    def evaluate(self, op: Operation, values: list):
        """Turn ``op`` into a ``Const`` in place if it computes one from ``values``, its
        operands' constant values (None for those not constant); None either way. Expects
        the floating-point error state that ``run`` sets."""
        d = op.opdef
        if d.fold is None or not d.is_pure or len(op.results) != 1 or op.regions:
            return None
        for v in values:
            if v is None or v.size > MAX_FOLD_ELEMENTS:
                return None
        if not foldable(getattr(op.result.type, "shape", None)):  # a fill or a broadcast may be far larger
            return None
        try:  # floating-point errors raise here: see run()
            out = np.asarray(d.fold(*[v[()] if v.ndim == 0 else v for v in values], **d.known_attrs(op.attrs)))
        except Exception:
            return None  # let it fail (or not) at run time, where the user sees it
        if out.size > MAX_FOLD_ELEMENTS:
            return None
        (t,) = OPS["Const"].inferred((), {"value": out}, 1)
        if t != op.result.type:
            return None
        out.setflags(write=False)
        _become_const(op, out, t)
        return None

    def replace_value(self, old, new) -> None:
        """Every use of ``old`` uses ``new`` instead (noting a change of type)."""
        if old.type is not new.type:
            self.narrowed = True
        old.replace_all_uses_with(new)

    @staticmethod
    def replace(op: Operation, v) -> list:
        op.result.replace_all_uses_with(v)
        op.drop_operands()
        return []

    def fold_if(self, op: Operation):
        """The taken branch's ops, if the condition is a constant (else None)."""
        c = const_value(op.operands[0])
        if c is None or c.size != 1:
            return None
        taken = op.regions[0 if bool(c.reshape(-1)[0]) else 1]
        body = list(taken.ops)
        y = body.pop() if body and body[-1].name == "yield" else None
        if y is not None:
            for res, v in zip(op.results, y.operands):
                self.replace_value(res, v)
            y.drop_operands()
        for other in op.regions:
            if other is not taken:
                for o in other.ops:
                    o.erase()
        op.drop_operands()
        return body
