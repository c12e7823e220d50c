"""The text backend: a module as a readable execution plan, and pictures of it.

``TextBackend().compile(module)`` returns a ``TextPlan``: ``.text`` is the plan
(nodes, task groups, tasks with their phases and instance counts, loops, conditionals,
stops, nets as pseudo-Python lines), the same text for the same module. The plan
cannot be run; ``run`` says so and points at a backend that can.

``TextBackend.dot(module, ...)`` draws the job's structure (or one task's dataflow)
as graphviz DOT text; ``TextBackend.net_dot(name, ops)`` draws a recorded net
(``net_dot_minimal``, ``plan_dot``: the other pictures of Caffe2's ``net_drawer``).
"""
from __future__ import annotations

import os

from dslc.ir import Module
from dslc.backends.common.names import is_dummy_output
from dslc.backends.common.source import SourceNames
from dslc.ir.diagnostics import DSLError

from .render import PlanWriter


class TextPlan:
    """A compiled plan: its text, plus what ``dslc compile`` asks of any program."""

    def __init__(self, module: Module, writer: PlanWriter, with_locs: bool = True):
        self.module, self.writer, self.with_locs = module, writer, with_locs
        self.text = writer.text(with_locs)

    def retitle(self, title: str) -> None:
        """Replace the ``plan of ...:`` header (a Job's groups say which group they are)."""
        self.writer.retitle(title)
        self.text = self.writer.text(self.with_locs)

    def run(self, workspace) -> None:
        raise DSLError("the text backend writes plans; it does not run them",
                       hint="run with --backend interp (or dslc plan JOB.py to see the plan)")

    def as_json(self) -> dict:
        """The plan for scripts: its source, its tasks, its text and its lines."""
        names = self.writer.names
        tasks = [{"name": str(op.attrs["name"]), "instances": int(op.attrs["instances"]),
                  "workspace": op.attrs["workspace"], "node": op.attrs["node"],
                  "outputs": [names.blob(b) for b in op.attrs["outputs"] if not is_dummy_output(b)]}
                 for op in self.module.walk() if op.name == "task"]
        lines = [{"depth": ln.depth, "text": ln.text, "loc": str(ln.loc) if ln.loc else None}
                 for ln in self.writer.lines]
        return {"source": self.module.op.attrs.get("source", ""), "title": self.writer.lines[0].text[:-1],
                "tasks": tasks, "text": self.text, "lines": lines}

    def listing(self) -> str:
        return self.text

    def summary(self) -> dict:
        lines = [ln for ln in self.writer.lines if ln.text != "pass"]
        tasks = [op for op in self.module.walk() if op.name == "task"]
        return {"tasks": len(tasks), "plan_lines": len(lines)}

    def write_artifacts(self, directory: str) -> list[str]:
        path = os.path.join(directory, "plan.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text)
        return [path]


class TextBackend:
    name = "text"

    def __init__(self, with_locs: bool = True, source_names: bool = True, **_options):
        """``with_locs``: end lines with ``# line N``; ``source_names``: name values after
        the variables of the job's source lines (else after blobs only)."""
        self.with_locs = with_locs
        self.source_names = source_names
        self.extra_live: set = set()  # blobs the job's other modules read (a driver sets it)

    def compile(self, module: Module) -> TextPlan:
        writer = PlanWriter(module, SourceNames() if self.source_names else None, self.extra_live)
        return TextPlan(module, writer, self.with_locs)

    def run(self, module: Module, ws) -> None:
        self.compile(module).run(ws)

    def dot(self, modules, task: str | None = None) -> str:
        """The structure of a module or plan (or a list of them), or with ``task`` (a task
        name) that task's dataflow in the module, as DOT text."""
        from . import dot
        source = SourceNames() if self.source_names else None
        if task is None:
            items = modules if isinstance(modules, (list, tuple)) else [modules]
            writers = [m.writer if isinstance(m, TextPlan) else PlanWriter(m, source) for m in items]
            return dot.structure(writers)
        module = modules.module if isinstance(modules, TextPlan) else modules
        return dot.dataflow(module, task, source)

    @staticmethod
    def analyze(modules, defined: dict | None = None) -> list:
        """Blobs read before anything defined them, and blobs concurrent tasks both create,
        in ``modules`` run in order (see ``analysis``)."""
        from . import analysis
        return analysis.problems(modules, defined)

    @staticmethod
    def op_line(op_type: str, inputs, outputs, args: dict) -> str:
        """One recorded op as a plan line: ``y = Add(a, b, broadcast=1)``."""
        from .render import literal
        call = f"{op_type}({', '.join(list(inputs) + [f'{k}={literal(v)}' for k, v in args.items()])})"
        return f"{', '.join(outputs)} = {call}" if outputs else call

    @staticmethod
    def net_dot(name: str, ops) -> str:
        """A recorded net's dataflow as DOT; ``ops`` are (type, inputs, outputs) triples."""
        from . import dot
        return dot.net(name, ops)

    @staticmethod
    def net_dot_minimal(title: str, ops, rankdir: str = "LR") -> str:
        """A recorded net's ops alone as DOT, an arrow from each op to the later ops reading
        what it wrote (``ops`` as for ``net_dot``)."""
        from . import dot
        return dot.net_minimal(title, ops, rankdir)

    @staticmethod
    def plan_dot(nets, rankdir: str = "TB") -> str:
        """A plan's nets as DOT, each a cluster of its ops and blobs (``nets``: (name, ops) pairs)."""
        from . import dot
        return dot.plan_nets(nets, rankdir)
