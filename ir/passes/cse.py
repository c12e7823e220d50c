"""``cse``: a pure op that repeats an earlier one (same name, operands, attributes)
reuses its results. Earlier ops of enclosing regions count; isolated regions
(tasks, parallel regions) start afresh.

    %a = Mul(%x, %y) : i64
    %b = Mul(%x, %y) : i64      ->   (uses of %b now use %a)
"""
from __future__ import annotations

import numpy as np

from ..analysis import PLAN_OPS
from ..core import Module, Region
from .manager import Pass, register


_SCALARS = frozenset({int, float, bool, str, type(None)})


def _freeze(v):
    """``v`` as a hashable key: equal keys for interchangeable attribute values."""
    if type(v) in _SCALARS:
        return (type(v), v)
    if isinstance(v, np.ndarray):
        dtype = v.dtype  # compares (and hashes) by value; its text form costs more to ask
        return ("nd", dtype, v.shape, v.tobytes() if dtype.kind != "O" else tuple(v.reshape(-1)))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return _freeze_attrs(v)
    return (type(v).__name__, v)


def _freeze_attrs(attrs: dict) -> tuple:
    """A dict (an op's attributes) as a key, by name; scalars, nearly all attribute
    values, are frozen inline (one tuple per entry, no call)."""
    items = [(k, type(x), x) if type(x) in _SCALARS else (k, _freeze(x)) for k, x in attrs.items()]
    if len(items) > 1:
        items.sort()  # by name: names are unique
    return tuple(items)


def op_key(op):
    """What makes two pure ops interchangeable."""
    return (op.name, tuple(id(v) for v in op.operands), _freeze(op.attrs),
            tuple(r.type for r in op.results))


def _candidate_key(op):
    """Where to look for the earlier op that ``op`` may repeat: its name and operands, and
    for an op without operands (a constant) its attributes too. Freezing attributes costs
    more than all the rest, and ops on the same operands are rare, so for the others it
    is done only when a candidate turns up (see ``_interchangeable``). Result types are
    left out: they nearly always agree, and are compared on a hit."""
    if op.operands:
        return (op.name, tuple(map(id, op.operands)))
    return _constant_key(op)


def _constant_key(op):
    """``_candidate_key`` of an op without operands. A ``Const`` of a plain array, by far
    the most common, gets a flat key of the same information (name, dtype, shape and
    bytes; its length, 5, is no other key's): built and hashed faster than nested ones."""
    attrs = op.attrs
    if len(attrs) == 1:
        value = attrs.get("value")
        if type(value) is np.ndarray and value.dtype.kind != "O":
            if value.nbytes > _SAMPLED_BYTES:  # (a model's weights: not copied into a key; see _interchangeable)
                return (op.name, "nd", value.dtype, value.shape, _sample(value))
            return (op.name, "nd", value.dtype, value.shape, value.tobytes())
    return (op.name, (), _freeze_attrs(attrs) if attrs else ())


_SAMPLED_BYTES = 1 << 12  # a constant larger than this is keyed by a sample of its elements


def _sample(value: np.ndarray) -> bytes:
    """64 elements spread over ``value`` and its last 8: equal arrays give equal samples, and
    arrays that differ nearly always differ here (a hit is confirmed in full, _interchangeable)."""
    flat = value.reshape(-1)
    return flat[:: max(1, flat.size // 64)][:64].tobytes() + flat[-8:].tobytes()


def _large_const(op):
    """The value of a Const keyed by a sample, else None."""
    value = op.attrs.get("value") if len(op.attrs) == 1 else None
    return value if type(value) is np.ndarray and value.dtype.kind != "O" and value.nbytes > _SAMPLED_BYTES else None


def _interchangeable(op, first) -> bool:
    """Whether ``op`` has the same ``op_key`` as ``first``, the op found under its
    candidate key (which holds the name, operands and, without operands, attributes)."""
    if not _same_types(op, first):
        return False
    if not op.operands:
        big = _large_const(op)
        if big is None:
            return True
        other = first.attrs["value"]  # (equal samples: the bytes decide, so 0.0 and -0.0 stay apart)
        return memoryview(np.ascontiguousarray(big)).cast("B") == memoryview(np.ascontiguousarray(other)).cast("B")
    return _freeze_attrs(op.attrs) == _freeze_attrs(first.attrs)


def _same_types(a, b) -> bool:
    """Whether ops ``a`` and ``b`` have equal result types."""
    ra, rb = a.results, b.results
    if len(ra) != len(rb):
        return False
    if len(ra) == 1:  # the usual case, without a generator
        return ra[0].type is rb[0].type  # (types are interned: identity is equality)
    return all(x.type is y.type for x, y in zip(ra, rb))


@register
class CommonSubexpressions(Pass):
    name = "cse"

    def run(self, module: Module) -> None:
        self.region(module.body, {}, fresh=True)

    def region(self, r: Region, seen: dict, fresh: bool = False) -> None:
        """CSE in ``r``; ``seen`` holds the pure ops visible here (of enclosing regions),
        by key: the first op with a candidate key (``_candidate_key``) is kept under it,
        a later one not interchangeable with that one under its ``op_key`` (so each key
        leads to the first visible op with that ``op_key``). What this region adds is taken out
        again at its end, unless ``seen`` is ``fresh``: made for this region alone."""
        added = []
        keep = []
        for op in r.ops:
            if op.regions:
                keep.append(op)
                isolated = op.name in PLAN_OPS or op.name in ("group", "task", "module")
                for sub in op.regions:
                    if isolated:
                        self.region(sub, {}, fresh=True)
                    else:
                        self.region(sub, seen)
                continue
            if not op.opdef.is_pure or not op.results:
                keep.append(op)
                continue
            key = _candidate_key(op)
            first = seen.get(key)
            if first is not None and not _interchangeable(op, first):
                key = op_key(op)
                first = seen.get(key)
            if first is not None:
                for old, new in zip(op.results, first.results):
                    old.replace_all_uses_with(new)
                op.drop_operands()
                continue
            seen[key] = op
            if not fresh:
                added.append(key)
            keep.append(op)
        for key in added:
            del seen[key]
        if len(keep) != len(r.ops):
            r.ops = keep  # (the ops kept are the region's already)
