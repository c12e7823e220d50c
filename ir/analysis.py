"""What the passes, the lowering, the backends and the session ask about a module: which
blobs an op touches, which ops may change any blob (barriers), which blobs other threads may
touch at the same time (those stay in the workspace), where regions are, which stores write
a workspace dropped afterwards.
"""
from __future__ import annotations

from .core import Module, Operation, Region

STRUCTURED = ("for", "loop", "if")
PLAN_OPS = ("parallel", "scope", "reporting")
BLOB_OPS = ("load", "store", "flag", "defer")


def is_barrier(op: Operation) -> bool:
    """An op after which any blob may have changed (runs other code on the workspace, or
    writes blobs by name: an effect ``write workspace``, as AtomicAppend has)."""
    by_name = _BARRIER_OPS.get(op.name)
    if by_name is None:
        by_name = _BARRIER_OPS[op.name] = op.name in PLAN_OPS or writes_workspace(op.opdef)
    return by_name or (op.name == "Python" and bool(op.attrs.get("pass_workspace")))


_BARRIER_OPS: dict = {}  # op name -> whether every op of that name is a barrier (asked per op)


_WORKSPACE_WRITERS: dict = {}  # op name -> whether its declaration writes the workspace


def writes_workspace(opdef) -> bool:
    """Whether the op declares an effect ``write workspace`` (worked out once per op name)."""
    got = _WORKSPACE_WRITERS.get(opdef.name)
    if got is None:
        got = any(e.resource == "workspace" and e.mode == "write" for e in opdef.effects)
        _WORKSPACE_WRITERS[opdef.name] = got
    return got


class BlobRefs:
    """Blob names an op reads, writes and tests as stop flags, anywhere inside it."""

    __slots__ = ("loads", "stores", "flags", "barrier")

    def __init__(self):
        self.loads, self.stores, self.flags = set(), set(), set()
        self.barrier = False

    @property
    def all(self) -> set:
        return self.loads | self.stores | self.flags


def blob_refs(op: Operation) -> BlobRefs:
    refs = BlobRefs()
    for o in op.walk():
        n = o.name
        if n == "load":
            refs.loads.add(o.attrs["blob"])
        elif n == "store" or n == "defer":
            refs.stores.add(o.attrs["blob"])
        elif n == "flag":
            refs.flags.add(o.attrs["blob"])
        elif is_barrier(o):
            refs.barrier = True
    return refs


def region_refs(r: Region) -> set:
    """Every blob name loaded, stored or flagged anywhere in the region."""
    return {o.attrs["blob"] for o in r.walk() if o.name in BLOB_OPS}


def volatile_blobs(module: Module, ops=None) -> set:
    """Blobs that code running concurrently with other code may touch.

    Such blobs keep every load and store: another task, a sibling parallel region,
    another instance (when shared) or a reporter may read or write them meanwhile.
    ``ops``: the module walked, when the caller has it at hand.
    """
    out: set = set()
    body = module.body.ops
    for g in body:
        if g.name != "group":
            continue
        existing = {str(s) for s in g.attrs.get("existing", [])}
        # a module of one group: the module's walk is the module op, then the group's
        inside = ops[1:] if ops is not None and len(body) == 1 else g.walk()
        tasks, plans = [], []
        for op in inside:
            if op.name == "task":
                tasks.append(op)
            elif op.name in ("parallel", "reporting"):
                plans.append(op)
        # the blobs of each task, only when there are two to share them (a walk of each)
        refs = [set().union(*(region_refs(r) for r in t.regions)) for t in tasks] if len(tasks) > 1 else []
        for i in range(len(refs)):
            for j in range(i + 1, len(refs)):
                out |= refs[i] & refs[j]
        for t in tasks:
            out |= _task_shared(t, existing)
        for op in plans:
            out |= _plan_shared(op, existing)
    return out


def _task_shared(task: Operation, existing: set) -> set:
    if int(task.attrs["instances"]) <= 1:
        return set()
    init, ii, body, ie, exit_ = task.regions
    inner = region_refs(ii) | region_refs(body) | region_refs(ie)
    outer = region_refs(init) | region_refs(exit_) | {str(s) for s in task.attrs["outputs"]} | existing
    return inner & outer


def _plan_shared(op: Operation, existing: set) -> set:
    if op.name == "parallel":
        parts = [region_refs(r) for r in op.regions]
        out = set()
        for i in range(len(parts)):
            for j in range(i + 1, len(parts)):
                out |= parts[i] & parts[j]
        if int(op.attrs["instances"]) > 1:
            for r in op.regions:
                out |= _outside_scopes(r)
        return out
    if op.name == "reporting":
        parts = [region_refs(r) for r in op.regions]
        return set().union(*[parts[i] & parts[j] for i in range(len(parts)) for j in range(i + 1, len(parts))]) \
            if len(parts) > 1 else set()
    return set()


def _outside_scopes(r: Region) -> set:
    """Blobs a region touches outside nested ``scope`` ops (those share the workspace)."""
    out = set()
    for op in r.ops:
        if op.name == "scope":
            continue
        out |= blob_refs(op).all if not op.regions else \
            ({o.attrs["blob"] for o in [op] if o.name in BLOB_OPS} |
             set().union(*(_outside_scopes(x) for x in op.regions)))
    return out


def isolated_regions(module: Module, ops=None):
    """Regions that start with an empty view of SSA values: group and task phases, plan ops
    (``ops``: the module walked, when the caller has it at hand)."""
    for op in module.walk() if ops is None else ops:
        if op.name in ("group", "task") or op.name in PLAN_OPS:
            yield from op.regions


def dropped_stores(module: Module) -> frozenset:
    """The blobs whose stores dce's ``find_dead_stores`` may keep only because the root holds
    them before the run (the group's ``existing``): stored in a workspace dropped
    afterwards, and no task's output (outputs always stay; a blob read now may not be once
    ``promote-blobs`` forwards its stores). A compiled module holds only while each of
    them is present, or absent, as it was."""
    stores, outputs = [], set()
    for op in module.walk():
        if op.name == "store":
            stores.append(op)
        elif op.name == "task":
            outputs.update(str(s) for s in op.attrs["outputs"])
    return frozenset(str(op.attrs["blob"]) for op in in_dropped_workspaces(stores)) - outputs


def in_dropped_workspaces(stores):
    """The stores of ``stores`` that write a workspace dropped afterwards (each region asked once)."""
    dropped: dict = {}  # region -> whether the workspace it writes is dropped afterwards
    for op in stores:
        r = op.parent
        in_dropped = dropped.get(r)
        if in_dropped is None:
            in_dropped = dropped[r] = _writes_dropped_workspace(r)
        if in_dropped:
            yield op


def _writes_dropped_workspace(r: Region) -> bool:
    """Whether ops of region ``r`` (or nested in it) write a workspace dropped afterwards:
    a PRIVATE task's, that of one instance of a multi-instance task (its phases 1-3), or
    a ``scope``'s."""
    while r is not None and r.parent is not None:
        op = r.parent
        if op.name == "task":
            if op.attrs["workspace"] == "private":
                return True
            if int(op.attrs["instances"]) > 1 and op.regions.index(r) in (1, 2, 3):
                return True
        elif op.name == "scope" and r is op.regions[0]:
            return True
        r = op.parent
    return False
