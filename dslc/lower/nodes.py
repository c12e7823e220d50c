"""One workspace per node: the warning for a blob that tasks of two nodes write.

LocalSession (like Caffe2's) runs every node in one workspace, so two nodes writing
one blob name see each other's value; on a cluster each node has its own workspace
and they do not. dslc keeps the local behaviour and warns, once per blob, when the job would mean something else on a cluster.
"""
from __future__ import annotations

import warnings

# Each node's checkpoint manager lists that node's own blobs under this one name
# (Caffe2 does the same): per node it is what a cluster needs, so it is not reported.
PER_NODE_BY_DESIGN = frozenset({"blob_names"})


class NodeBlobWarning(UserWarning):
    """Tasks of different nodes write one blob name (shared locally, separate on a cluster)."""


def _restored(store) -> bool:
    """A value a Load op read back (a checkpoint restore writes what each node saved: a name
    shared by nodes was reported where the job first wrote it)."""
    owner = getattr(store.operands[0], "owner", None) if store.operands else None
    return owner is not None and owner.name == "Load"


def warn_cross_node_writes(module) -> list[str]:
    """Warn once for each blob written by tasks of two nodes; returns the messages.

    A runnable is lowered once per session (and again only when fed blobs change type),
    so "once per lowering" is once per compile."""
    first: dict = {}  # blob -> (node, loc) of its first writer
    warned: set = set()
    said = []
    for task in (op for op in module.walk() if op.name == "task"):
        node = str(task.attrs["node"])
        for op in task.walk():
            if op.name != "store":
                continue
            blob = str(op.attrs["blob"])
            if blob in PER_NODE_BY_DESIGN or _restored(op):
                continue
            other = first.setdefault(blob, (node, op.loc))
            if other[0] == node:
                continue
            if blob in warned:
                continue
            warned.add(blob)
            msg = (f"blob {blob!r} is written by node {other[0]!r} at {other[1]} and by node {node!r} "
                   f"at {op.loc}: one workspace here, two on a cluster (dslc run --cluster); give each "
                   f"node its own name (e.g. under a NameScope) so the job means the same on both")
            # shown at the second writer's line, where the user looks
            warnings.warn_explicit(msg, NodeBlobWarning, op.loc.file, op.loc.line)
            said.append(msg)
    return said
