"""Blob definitions in program order: reads of blobs nothing wrote yet, and blobs that
concurrent tasks or substeps both create (Caffe2's ``net_printer.analyze``).

The walk follows the plan as the text backend writes it: groups in order, each task's
phases in order, every region of an op in order (a loop body once). A node's global
blobs persist across groups; a private task's new blobs vanish with it. The tasks of a
group and the regions of a ``parallel`` run concurrently: a blob new to the node that
two of them create is a conflict.
"""
from __future__ import annotations

from dataclasses import dataclass

READS = frozenset({"load", "flag"})
CONCURRENT = frozenset({"parallel"})
IGNORED_PREFIXES = ("distributed_ctx_init",)  # set up by the launcher, not by the job


@dataclass
class Problem:
    kind: str  # "undefined" | "multiple"
    blobs: list
    loc: object


class _Walk:
    def __init__(self, defined: dict):
        self.defined = defined  # node -> set of blob names defined there so far
        self.problems: list[Problem] = []

    def group(self, op) -> None:
        ws = self.defined.setdefault(str(op.attrs.get("node", "local")), set())
        init, body, exit_ = op.regions
        self.ops(init.ops, ws)
        tasks = [t for t in body.ops if t.name == "task"]
        made = [self.task(t, ws) for t in tasks]
        self.concurrent(made, tasks[0].loc if tasks else op.loc, ws)
        self.ops(exit_.ops, ws)

    def task(self, op, ws: set) -> set:
        """Walk a task; the blobs it leaves new in the node's workspace."""
        own = set(ws)
        for r in op.regions:
            self.ops(r.ops, own)
        return own - ws if op.attrs.get("workspace") == "global" else set()

    def concurrent(self, made: list, loc, ws: set) -> None:
        seen: set = set()
        for new in made:
            both = seen & new
            if both:
                self.problems.append(Problem("multiple", sorted(both), loc))
            seen |= new
        ws |= seen

    def ops(self, ops, ws: set) -> None:
        for op in ops:
            name = op.name
            if name in READS:
                blob = str(op.attrs["blob"])
                if blob not in ws and not blob.startswith(IGNORED_PREFIXES):
                    self.problems.append(Problem("undefined", [blob], op.loc))
                    ws.add(blob)  # reported once
            elif name == "store":
                ws.add(str(op.attrs["blob"]))
            elif name == "group":
                self.group(op)
            elif name in CONCURRENT:
                made = []
                for r in op.regions:
                    own = set(ws)
                    self.ops(r.ops, own)
                    made.append(own - ws)
                self.concurrent(made, op.loc, ws)
            else:
                for k in ("output_names",):  # ops writing blobs named in an attribute
                    ws.update(str(n) for n in op.attrs.get(k) or ())
                for r in op.regions:
                    self.ops(r.ops, ws)


def problems(modules, defined: dict | None = None) -> list[Problem]:
    """The problems of ``modules`` run one after the other, starting from ``defined``
    (node -> blobs already there); in program order."""
    walk = _Walk({} if defined is None else defined)
    for m in modules:
        walk.ops(m.body.ops, walk.defined.setdefault("local", set()))
    return walk.problems
