"""A job's module, seen node by node: which node runs what, and what each node keeps.

The driver lowers and optimizes a task group once; every node receives the same IR
text and keeps only its part (``node_part``): its own tasks, plus the group's setup
and reporting code on the group's node (the node of its first task). What a node
loads and stores (``node_blobs``) tells the driver which blobs cross nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dslc.ir import Module


@dataclass
class NodeBlobs:
    """What one node's part of a module does with blobs (names -> IR types)."""

    loads: dict = field(default_factory=dict)
    stores: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)  # task outputs, in task order
    tasks: list = field(default_factory=list)    # task names
    shards: dict = field(default_factory=dict)   # collective group -> the shards this node runs


def group_node(group_op) -> str:
    return str(group_op.attrs.get("node") or "local")


def _tasks(group_op):
    """(task op, the region holding it) for every task of a group, reporting ones included."""
    body = group_op.regions[1]
    for op in body.ops:
        if op.name == "reporting":
            for t in op.regions[0].ops:
                yield t, op.regions[0]
        else:
            yield op, body


def nodes_of(module: Module) -> list[str]:
    """Every node that runs something of ``module``, in first-use order."""
    seen: dict = {}
    for g in module.body.ops:
        if any(r.ops for r in (g.regions[0], g.regions[2])) or any(o.name == "reporting" for o in g.regions[1].ops):
            seen.setdefault(group_node(g), None)
        for t, _ in _tasks(g):
            seen.setdefault(str(t.attrs["node"]), None)
    return list(seen)


def node_blobs(module: Module) -> dict[str, NodeBlobs]:
    """Per node, the blobs its part loads and stores, and its task outputs."""
    out: dict[str, NodeBlobs] = {n: NodeBlobs() for n in nodes_of(module)}

    def note(nb: NodeBlobs, ops) -> None:
        for op in ops:
            if op.name == "load":
                nb.loads.setdefault(str(op.attrs["blob"]), op.results[0].type)
            elif op.name == "store":
                nb.stores.setdefault(str(op.attrs["blob"]), op.operands[0].type)
            elif op.attrs.get("shards", 1) > 1 and op.opdef is not None and \
                    any(e.resource == "collective" for e in op.opdef.effects):
                nb.shards.setdefault(str(op.attrs["group"]), set()).add(int(op.attrs["shard"]))

    for g in module.body.ops:
        home = out[group_node(g)] if group_node(g) in out else None
        for region in (g.regions[0], g.regions[2]):
            if home is not None:
                note(home, region.walk())
        for op in g.regions[1].ops:
            if op.name == "reporting" and home is not None:
                for r in op.regions[1:]:
                    note(home, r.walk())
        for t, _ in _tasks(g):
            nb = out[str(t.attrs["node"])]
            nb.tasks.append(str(t.attrs["name"]))
            nb.outputs += [str(n) for n in t.attrs["outputs"]]
            note(nb, t.walk())
    return out


def node_part(module: Module, node: str) -> Module:
    """Keep in ``module`` (in place) only what ``node`` runs; returns it."""
    for g in module.body.ops:
        mine = group_node(g) == node
        if not mine:
            for region in (g.regions[0], g.regions[2]):
                _drop(region, list(region.ops))
        for t, region in list(_tasks(g)):
            if str(t.attrs["node"]) != node:
                _drop(region, [t])
        body = g.regions[1]
        for op in list(body.ops):
            if op.name == "reporting" and not mine:  # the reporters stay on the group's node
                tasks = list(op.regions[0].ops)
                op.regions[0].ops.clear()  # (erasing the reporting op must not touch them)
                _drop(body, [op])
                for t in tasks:
                    body.append(t)
    return module


def _drop(region, ops) -> None:
    for op in ops:
        op.erase()
        region.ops.remove(op)
