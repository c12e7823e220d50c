"""When a pure op may fail: the ``may_fail`` predicates of the declarations.

Each takes the op and says whether its kernel may raise when it runs. They look only
at what the IR says (operand types, attributes, operands that are constants), so they
answer True whenever the IR cannot rule the error out. Passes keep such ops (see
``OpDef.may_fail``). Float arithmetic never raises (IEEE inf and nan), nor does Cast.
"""
from __future__ import annotations

import numpy as np

from ..types import FLOAT_DTYPES, TensorType


def constant(v):
    """The value of a ``Const`` operand, or None."""
    owner = getattr(v, "owner", None)
    return owner.attrs["value"] if owner is not None and owner.name == "Const" else None


def shapes_may_clash(op) -> bool:
    """Whether the operands' shapes may not broadcast at run time: the verifier checks
    the dims it knows, so only an unknown dim (or rank) facing another dim that is not 1
    can fail (Caffe2's ``broadcast=1`` rule: any unknown shape)."""
    shapes = [v.type.shape if isinstance(v.type, TensorType) else None for v in op.operands]
    if all(s is not None and None not in s for s in shapes):
        return False  # every dim known: the verifier checked them (the usual case)
    if op.attrs.get("broadcast"):
        return True
    known = [s for s in shapes if s != ()]  # scalars broadcast with anything
    if len(known) < 2:
        return False
    if any(s is None for s in known):
        return True
    rank = max(len(s) for s in known)
    for k in range(1, rank + 1):
        dims = [s[-k] for s in known if len(s) >= k]
        if None in dims and sum(d != 1 for d in dims) > 1:
            return True
    return False


def elementwise(op) -> bool:
    """when shapes of unknown dims do not broadcast at run time"""
    return shapes_may_clash(op)


def div(op) -> bool:
    """integer division by zero (float division gives inf or nan), or a shape clash"""
    if shapes_may_clash(op):
        return True
    t = op.results[0].type if op.results else None
    if isinstance(t, TensorType) and t.dtype in FLOAT_DTYPES:
        return False
    c = constant(op.operands[1]) if len(op.operands) > 1 else None
    return c is None or bool(np.any(np.asarray(c) == 0))


def constant_fill(op) -> bool:
    """with input_as_shape: the shape read from the input may hold a negative dim; a value
    input may hold other than one element"""
    return bool(op.operands) and bool(op.attrs.get("input_as_shape")) or len(op.operands) == 2


def fused(op) -> bool:
    """when an op inside may"""
    return any(o.opdef.fails(o) for o in op.regions[0].ops) if op.regions else False
