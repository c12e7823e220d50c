"""Walking recorded front-end items: which blob names a subtree reads and writes."""
from __future__ import annotations

from collections import Counter

from dslc.core import ExecutionStep, Net
from dslc.net_builder import NetBuilder, StopIf


def children(item) -> list:
    """The direct sub-items of a recorded item (nets have none)."""
    if isinstance(item, ExecutionStep):
        return item._items
    if isinstance(item, NetBuilder):
        extra = item._extra_regions() if hasattr(item, "_extra_regions") else []
        return list(item._children) + extra
    return []


def walk(item):
    """Every item in the subtree, parents before children (in program order)."""
    stack = [item]
    while stack:
        it = stack.pop()
        yield it
        stack.extend(reversed(children(it)))


def names_read(items) -> set[str]:
    return set(read_counts(items))


def read_counts(items) -> Counter:
    """How many times each blob name is read in the subtrees (op inputs, conditions, stops)."""
    out: Counter = Counter()
    for root in items:
        for it in walk(root):
            if isinstance(it, Net):
                for op in it._ops:
                    out.update(op.inputs)
            elif isinstance(it, StopIf):
                out[it.cond] += 1
            elif isinstance(it, ExecutionStep) and it._should_stop_blob:
                out[it._should_stop_blob] += 1
            else:
                for attr in ("cond", "_count"):
                    v = getattr(it, attr, None)
                    if v is not None and not isinstance(v, int):
                        out[str(v)] += 1
    return out


def names_written(items) -> set[str]:
    out = set()
    for root in items:
        for it in walk(root):
            if isinstance(it, Net):
                for op in it._ops:
                    out.update(op.outputs)
            elif getattr(it, "kind", None) == "guard":
                out.add(str(it._stopped))
    return out
