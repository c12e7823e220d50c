"""Sessions: compile a Task, TaskGroup, Net or step and run it on a backend.

``LocalSession(backend="interp")`` runs everything in one root workspace; blobs of
GLOBAL tasks persist there between runs, PRIVATE tasks get a child workspace per
run. Task outputs are created in the root first, so they can be fetched after
``run()`` whichever workspace wrote them.
"""
from __future__ import annotations

import numpy as np

from dslc import backends
from dslc.backends.runtime.values import type_of_value
from dslc.backends.runtime.workspace import Workspace
from dslc.core import ExecutionStep, Net, Plan, execution_step
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.lower import lower_group
from dslc.net_builder import NetBuilder
from dslc.task import Task, TaskGroup, WorkspaceType


class CompiledRunnable:
    """A runnable lowered to IR and compiled by a backend, with what it assumed."""

    def __init__(self, group, module, program, deps):
        self.group, self.module, self.program, self.deps = group, module, program, deps


class Session:
    """Base session: open/close, context manager, ``run(runnable)``."""

    def __init__(self):
        self._open = True

    def is_open(self) -> bool:
        return self._open

    def close(self) -> None:
        if self._open:
            self._do_close()
            self._open = False

    def _do_close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, etype, *args):
        if etype is None:
            self.close()
        return False

    def run(self, runnable, workspace_type=None, setup_net_list=None):
        if not self._open:
            raise TraceError("this session is closed")
        if runnable is None:
            raise TraceError("session.run() needs something to run")
        self._run(self.as_group(runnable, workspace_type))


class LocalSession(Session):
    """Runs jobs in one process, on the chosen backend (``interp`` by default)."""

    def __init__(self, ws=None, backend: str = "interp", source: str = "", **options):
        super().__init__()
        from dslc import workspace
        self._ws = ws if ws is not None else workspace.current()
        self.backend = backends.get(backend)(**options)
        self.source = source
        self._groups: dict[int, tuple] = {}
        self._compiled: dict[int, CompiledRunnable] = {}

    @property
    def workspace(self) -> Workspace:
        return self._ws

    def as_group(self, runnable, workspace_type=None) -> TaskGroup:
        """The TaskGroup a runnable runs as (made once per runnable object)."""
        got = self._groups.get(id(runnable))
        if got is not None and got[0] is runnable:
            return got[1]
        group = _wrap(runnable, workspace_type)
        self._groups[id(runnable)] = (runnable, group)
        return group

    def compile(self, group: TaskGroup) -> CompiledRunnable:
        """Lower and compile ``group`` against what the root workspace holds now."""
        existing = {n: type_of_value(c.v) for n, c in self._ws.blobs.items() if c.v is not None}
        got = self._compiled.get(id(group))
        if got is not None and got.group is group and \
                all(existing.get(n) == t for n, t in got.deps.items()):
            return got
        module = lower_group(group, self.source, existing)
        loaded = {op.attrs["blob"] for op in module.walk() if op.name in ("load", "flag")}
        deps = {n: t for n, t in existing.items() if n in loaded}
        got = CompiledRunnable(group, module, self.backend.compile(module), deps)
        self._compiled[id(group)] = got
        return got

    def _run(self, group: TaskGroup) -> None:
        compiled = self.compile(group)
        for task in group.tasks():
            for name in task.output_names():
                self._ws.create_blob(name)
        compiled.program.run(self._ws)
        for task in group.tasks():
            task.output_list().set_values(task.output_names(), self._fetch)

    def _fetch(self, name):
        cell = self._ws.lookup(str(name))
        if cell is None or cell.v is None:
            raise DSLError(f"output {str(name)!r} was never written", hint="check that its task writes it")
        v = cell.v
        return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v


def _wrap(runnable, workspace_type) -> TaskGroup:
    if isinstance(runnable, TaskGroup):
        if workspace_type is not None and runnable.workspace_type() not in (None, workspace_type):
            raise TraceError(f"this TaskGroup is {runnable.workspace_type()}, not {workspace_type}")
        return runnable
    if isinstance(runnable, (list, tuple, dict, set)):
        raise TraceError(f"cannot run a {type(runnable).__name__}",
                         hint="put the nets in a Task or an execution_step first")
    group = TaskGroup(workspace_type=workspace_type or WorkspaceType.GLOBAL)
    if isinstance(runnable, Task):
        group.add(runnable)
    elif isinstance(runnable, ExecutionStep):
        Task(step=runnable, group=group)
    elif isinstance(runnable, Plan):
        steps = runnable.Steps()
        Task(step=steps[0] if len(steps) == 1 else execution_step(runnable.Name(), steps), group=group)
    elif isinstance(runnable, (Net, NetBuilder)):
        Task(step=execution_step("runnable", runnable), group=group)
    elif type(runnable).__name__ == "Job":
        raise TraceError("a Job is run by a JobRunner", hint="use JobRunner(job)(session)")
    else:
        raise TraceError(f"cannot run a {type(runnable).__name__}",
                         hint="run a Task, TaskGroup, Net, ExecutionStep or Plan")
    return group
