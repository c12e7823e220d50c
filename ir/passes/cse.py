"""``cse``: a pure op that repeats an earlier one (same name, operands, attributes)
reuses its results. Earlier ops of enclosing regions count; isolated regions
(tasks, parallel regions) start afresh.

    %a = Mul(%x, %y) : i64
    %b = Mul(%x, %y) : i64      ->   (uses of %b now use %a)
"""
from __future__ import annotations

import numpy as np

from ..core import Module, Region
from ..opdef import PURE
from .analysis import PLAN_OPS, set_ops
from .manager import Pass, register


_SCALARS = (int, float, bool, str, type(None))


def _freeze(v):
    if type(v) in _SCALARS:
        return (type(v).__name__, v)
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes() if v.dtype != object else tuple(v.reshape(-1)))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return (type(v).__name__, v)


def op_key(op):
    """What makes two pure ops interchangeable."""
    return (op.name, tuple(id(v) for v in op.operands), _freeze(op.attrs),
            tuple(r.type for r in op.results))


@register
class CommonSubexpressions(Pass):
    name = "cse"

    def run(self, module: Module) -> None:
        self.region(module.body, {})

    def region(self, r: Region, seen: dict) -> None:
        """CSE in ``r``; ``seen`` holds the pure ops visible here (of enclosing regions),
        by key. What this region adds is taken out again at its end."""
        added = []
        keep = []
        for op in r.ops:
            if not op.regions and op.results and PURE in op.opdef.traits:
                key = op_key(op)
                first = seen.get(key)
                if first is not None:
                    for old, new in zip(op.results, first.results):
                        old.replace_all_uses_with(new)
                    op.drop_operands()
                    continue
                seen[key] = op
                added.append(key)
            keep.append(op)
            if op.regions:
                isolated = op.name in PLAN_OPS or op.name in ("group", "task", "module")
                for sub in op.regions:
                    self.region(sub, {} if isolated else seen)
        for key in added:
            del seen[key]
        if len(keep) != len(r.ops):
            set_ops(r, keep)
