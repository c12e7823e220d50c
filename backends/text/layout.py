"""The plan's outline: groups, tasks and their phases, concurrent steps, reporters, scopes.

    group on node local:
      task local/task, 10 instances, outputs total:
        init (once):        <- task init
        each instance:      <- instance init / body / instance exit, labelled only
          ...                  when more than the body has lines
        exit (once):

A mixin of ``PlanWriter``: it writes lines with ``block``/``emit`` and the ops inside
each region with ``region``.
"""
from __future__ import annotations

from dslc.backends.common.names import is_dummy_output


class Layout:
    """The ``op_*`` writers of plan ops (each takes the op, its depth and the group's node)."""

    def write(self) -> None:
        head = f"plan of {self.source}" if self.source else "plan"
        self.block(0, head, lambda: self.region(self.module.body, 1))

    def op_group(self, op, depth: int, node=None) -> None:
        init, body, exit_ = op.regions
        node = op.attrs["node"]
        head = f"group on node {node}"
        existing = op.attrs.get("existing") or []
        if existing:
            head += ", reads " + ", ".join(self.names.blob(b) for b in existing)

        def fill():
            self.block(depth + 1, "node init", lambda: self.region(init, depth + 2), keep_empty=False)
            self.region(body, depth + 1, node=node)
            self.block(depth + 1, "node exit", lambda: self.region(exit_, depth + 2), keep_empty=False)
        self.block(depth, head, fill, op.loc if op.loc.line else None)

    def op_task(self, op, depth: int, node=None) -> None:
        a = op.attrs
        parts = [f"task {a['name']}"]
        n = int(a["instances"] or 1)
        if n > 1:
            parts.append(f"{n} instances")
        if a["workspace"] == "global":
            parts.append("global workspace")
        if node is not None and a["node"] != node:
            parts.append(f"on node {a['node']}")
        outs = [self.names.blob(b) for b in a["outputs"] if not is_dummy_output(b)]
        if outs:
            parts.append("outputs " + ", ".join(outs))
        init, iinit, body, iexit, exit_ = op.regions
        shown = [r for r in op.regions if self._shows(r)]

        def phase(label, region, d):
            self.block(d, label, lambda: self.region(region, d + 1), keep_empty=False)

        def fill():
            if n > 1:
                phase("init (once)", init, depth + 1)
                self.block(depth + 1, "each instance", lambda: inner(depth + 2))
                phase("exit (once)", exit_, depth + 1)
            elif shown == [body]:
                self.region(body, depth + 1)
            else:
                phase("init", init, depth + 1)
                phase("instance init", iinit, depth + 1)
                phase("body", body, depth + 1)
                phase("instance exit", iexit, depth + 1)
                phase("exit", exit_, depth + 1)

        def inner(d):
            if [r for r in (iinit, body, iexit) if r in shown] == [body]:
                return self.region(body, d)
            phase("init", iinit, d)
            phase("body", body, d)
            phase("exit", iexit, d)
        self.block(depth, ", ".join(parts), fill, op.loc if op.loc.line else None)

    def _shows(self, region) -> bool:
        """Whether the region writes any line (a trial run, thrown away)."""
        start = len(self.lines)
        self.region(region, 0)
        got = len(self.lines) > start
        del self.lines[start:]
        return got

    def op_parallel(self, op, depth: int, node=None) -> None:
        n = int(op.attrs["instances"] or 1)
        if len(op.regions) == 1:
            head = f"{n} instances, concurrently" if n > 1 else "concurrently"
            return self.block(depth, head, lambda: self.region(op.regions[0], depth + 1), op.loc)
        head = "concurrently" + (f", {n} instances of each" if n > 1 else "")

        def fill():
            for i, r in enumerate(op.regions, 1):
                self.block(depth + 1, f"step {i}", lambda r=r: self.region(r, depth + 2))
        self.block(depth, head, fill, op.loc)

    def op_scope(self, op, depth: int, node=None) -> None:
        self.block(depth, "in a fresh workspace", lambda: self.region(op.regions[0], depth + 1), op.loc)

    def op_reporting(self, op, depth: int, node=None) -> None:
        def fill():
            self.block(depth + 1, "run", lambda: self.region(op.regions[0], depth + 2, node=node))
            for ms, r in zip(op.attrs["intervals_ms"], op.regions[1:]):
                self.block(depth + 1, f"every {ms} ms, and once at the end",
                           lambda r=r: self.region(r, depth + 2))
        self.block(depth, "with reporters", fill, op.loc)

