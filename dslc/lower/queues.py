"""Dequeues from a queue that nothing in the run can feed or close.

A queue made by ``CreateBlobsQueue`` starts empty and open. When the op that makes it
surely runs before a dequeue of it (earlier in the same thread of the run), and no op of
the module enqueues into it, closes it or hands its handle anywhere else, the dequeue
waits forever. This check refuses such a module when its group is lowered, at the
dequeue's line. A queue made in an earlier run may hold records from that run, so it is
left to the run-time watchdog (runtime/cancel.py).
"""
from __future__ import annotations

from dslc.ir.diagnostics import VerifyError

DEQUEUES = frozenset({"DequeueBlobs", "SafeDequeueBlobs"})

# regions of these ops run one after another, in declaration order; other ops with
# several regions (parallel, reporting, if) run them concurrently or pick one
_SEQUENTIAL = frozenset({"group", "task"})


def check_starved_dequeues(module) -> None:
    """Raise at the first dequeue, without a timeout, of a queue created earlier in the same
    thread of this run that no op of the module writes to or closes."""
    made: dict = {}  # blob -> the CreateBlobsQueue ops whose queue is stored there
    other_stores: set = set()
    loads: dict = {}  # blob -> its load ops
    for op in module.walk():
        if op.name == "store":
            blob = str(op.attrs["blob"])
            (value,) = op.operands
            owner = getattr(value, "owner", None)
            if owner is not None and owner.name == "CreateBlobsQueue":
                made.setdefault(blob, []).append(owner)
            else:
                other_stores.add(blob)
        elif op.name == "load":
            loads.setdefault(str(op.attrs["blob"]), []).append(op)
    for blob, creates in made.items():
        if blob in other_stores:
            continue
        handles = [c.result for c in creates] + [ld.result for ld in loads.get(blob, ())]
        if not _only_dequeued(handles, blob):
            continue
        for ld in loads.get(blob, ()):
            for dequeue, _ in ld.result.uses:
                if dequeue.attrs.get("timeout_secs", 0) > 0 or _under_if(dequeue):
                    continue
                create = next((c for c in creates if _runs_before(c, ld)), None)
                if create is not None:
                    _refuse(dequeue, blob, create)


def _only_dequeued(handles, blob: str) -> bool:
    """Whether every use of the queue's handles is a dequeue or the store into ``blob``."""
    for value in handles:
        for user, _ in value.uses:
            stored_here = user.name == "store" and str(user.attrs["blob"]) == blob
            if user.name not in DEQUEUES and not stored_here:
                return False
    return True


def _runs_before(first, then) -> bool:
    """Whether ``first`` surely runs before ``then`` in the same thread: it stands, not
    nested in a control op, in a region enclosing ``then`` (or in an earlier region of a
    group or task enclosing it) ahead of ``then``'s ancestor there."""
    region = first.parent
    node = then
    while node is not None and node.parent is not None:
        here = node.parent
        if here is region:
            return region.ops.index(first) < region.ops.index(node)
        owner = here.parent
        if owner is not None and owner.name in _SEQUENTIAL and region.parent is owner:
            return owner.regions.index(region) < owner.regions.index(here)
        node = owner
    return False


def _under_if(op) -> bool:
    """Whether ``op`` runs only when some ``if`` takes its branch."""
    region = op.parent
    while region is not None and region.parent is not None:
        if region.parent.name == "if":
            return True
        region = region.parent.parent
    return False


def _refuse(dequeue, blob: str, create) -> None:
    where = f" (made at {create.loc})" if create.loc.line > 0 else ""
    raise VerifyError(
        f"{dequeue.name} waits forever on queue {blob!r}{where}: the queue starts empty, and no "
        "op of this run writes to it or closes it", dequeue.loc,
        "enqueue records into it from a task (EnqueueBlobs, or a pipe writing into it), close it "
        "with CloseBlobsQueue when no more come, or give the dequeue timeout_secs")
