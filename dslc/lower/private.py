"""Reads of a blob that only another task's private workspace holds.

A PRIVATE task (the default) writes its blobs into a workspace of its own, which no
other task sees; only its outputs reach the root. A task that reads such a blob
finds nothing at run time. This check finds it when the group is lowered and says
why, at the read's line, instead of "read before anything wrote it".
"""
from __future__ import annotations

from dslc.ir.diagnostics import VerifyError

PRIVATE = "private"


def check_private_reads(module, existing: dict) -> None:
    """Raise at the first load in one task of a blob that only other tasks' private
    workspaces store (no shared store, not in ``existing``, not an output)."""
    (group,) = module.body.ops
    tasks = [op for op in group.walk() if op.name == "task"]
    if len(tasks) < 2:
        return
    visible = set(existing)  # stored where every task of the group can see it
    private: dict = {}       # blob -> names of the private tasks that store it
    for region in (group.regions[0], group.regions[2]):  # node init and exit
        visible |= _stored(region.walk())
    for t in tasks:
        stored = _stored(t.walk())
        visible |= {str(s) for s in t.attrs["outputs"]}
        if t.attrs["workspace"] == PRIVATE:
            for name in stored:
                private.setdefault(name, []).append(str(t.attrs["name"]))
        else:
            visible |= stored
    for t in tasks:
        own = _stored(t.walk())
        for op in t.walk():
            if op.name != "load" or op.attrs.get("optional"):
                continue
            name = str(op.attrs["blob"])
            if name in visible or name in own or name not in private:
                continue
            writers = ", ".join(repr(w) for w in private[name])
            raise VerifyError(
                f"blob {name!r} is read here, but only task {writers} writes it, in its private "
                "workspace, which other tasks cannot see", op.loc,
                "share it: give the writing task (or its TaskGroup) workspace_type=WorkspaceType.GLOBAL, "
                "or export it with final_output and read it in a later run")


def _stored(ops) -> set:
    return {str(op.attrs["blob"]) for op in ops if op.name == "store"}
