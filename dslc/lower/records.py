"""Walking recorded front-end items: which blob names a subtree reads and writes."""
from __future__ import annotations

from collections import Counter

from dslc.trace.builder_base import NetBuilder, StopIf
from dslc.trace.net import Net
from dslc.trace.steps import ExecutionStep


def children(item) -> list:
    """The direct sub-items of a recorded item (nets have none)."""
    if isinstance(item, ExecutionStep):
        return item._items
    if isinstance(item, NetBuilder):
        extra = item._extra_regions() if hasattr(item, "_extra_regions") else []
        return list(item._children) + extra
    return []


def walk(item) -> list:
    """Every item in the subtree, parents before children (in program order)."""
    out, stack = [], [item]
    while stack:
        it = stack.pop()
        out.append(it)
        if not isinstance(it, Net):  # (most items are nets, which have no children)
            stack.extend(reversed(children(it)))
    return out


def names_read(items) -> set[str]:
    return set(read_counts(items))


def read_counts(items) -> Counter:
    """How many times each blob name is read in the subtrees (op inputs, conditions, stops)."""
    names = []  # every read, counted at once at the end
    for root in items:
        for it in walk(root):
            if isinstance(it, Net):
                for op in it._ops:
                    names += op.inputs
            elif isinstance(it, StopIf):
                names.append(it.cond)
            elif isinstance(it, ExecutionStep) and it._should_stop_blob:
                names.append(it._should_stop_blob)
            else:
                for attr in ("cond", "_count"):
                    v = getattr(it, attr, None)
                    if v is not None and not isinstance(v, int):
                        names.append(str(v))
    return Counter(names)


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
