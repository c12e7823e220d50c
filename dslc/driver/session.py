"""Sessions: compile a Task, TaskGroup, Net or step and run it on a backend.

``LocalSession(backend="interp")`` runs everything in one root workspace; blobs of
GLOBAL tasks persist there between runs, PRIVATE tasks get a child workspace per
run. Task outputs are created in the root first, so they can be fetched after
``run()`` whichever workspace wrote them.
"""
from __future__ import annotations

import os

import numpy as np

from dslc import backends
from dslc.runtime.values import blob_types
from dslc.runtime.workspace import Workspace, to_user
from dslc.driver import options as driver_options
from dslc.driver import compile_clock, runner
from dslc.driver.jobrunner import JobRunner
from dslc.driver.variants import MAX_VARIANTS, Guard, generalized
from dslc.ir.gcpause import paused
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager, parse_pipeline
from dslc.ir.analysis import dropped_stores
from dslc.ir.types import join, subsumes
from dslc.lower import lower_group
from dslc.trace.blobref import BlobReference
from dslc.trace.job import Job
from dslc.trace.task import Task, TaskGroup, wrap_runnable
from dslc.trace.tracing import user_location


class CompiledRunnable:
    """A runnable lowered to IR and compiled by a backend, with what it assumed.

    ``tasks`` are the group's tasks at compile time (their outputs are pre-created
    and bound at every run); ``deps`` maps the root blobs the module loads to the
    types it was compiled for.
    """

    def __init__(self, group, module, program, deps, tasks, created=frozenset(), dropped=()):
        self.group, self.module, self.program, self.deps = group, module, program, deps
        # the blobs it stores in dropped workspaces, and which of them the root held (a store
        # there stays only for a blob the root holds: one made since needs a recompile)
        self.dropped = tuple(sorted(dropped))
        self.tasks = list(tasks)
        self.created = created  # the blobs of deps the root held created but empty
        # (a plain net has none: a rerun then skips making and binding them)
        self.has_outputs = any(task.output_names() for task in self.tasks)
        self.guard = Guard(deps)  # what it assumed of its loads, cheap to check again
        self.seen = None  # the loads' fingerprint when last found valid (Session.compile)
        self.held = ()  # the blobs of ``dropped`` the root held at compile time
        self.widens = True  # a run with other dims compiles with them unknown (else for them)


class Session:
    """Base session: open/close, context manager, ``run(runnable)``.

    The TaskGroup a runnable runs as is made once per runnable object and shared by
    every session of the process (Caffe2 keeps this cache on the Session class), so
    running the same Task/Net/step again reuses its tasks, names and outputs.
    """

    _groups: dict[int, tuple] = {}  # id(runnable) -> (runnable, TaskGroup); keeps both alive

    def __init__(self):
        self._open = True

    def is_open(self) -> bool:
        return self._open

    def close(self) -> None:
        """Close the session (idempotent); ``run`` raises afterwards."""
        if self._open:
            self._do_close()
            self._open = False

    def _do_close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, etype, *args):
        # Caffe2 leaves the session open when the block raised, so it can be inspected.
        if etype is None:
            self.close()
        return False

    @classmethod
    def as_group(cls, runnable, workspace_type=None) -> TaskGroup:
        """The TaskGroup ``runnable`` runs as: a TaskGroup itself, else a GLOBAL wrapper made once."""
        got = Session._groups.get(id(runnable))
        if got is not None and got[0] is runnable:
            return got[1]
        group = wrap_runnable(runnable, workspace_type)
        Session._groups[id(runnable)] = (runnable, group)
        return group

    @staticmethod
    def wrap(runnable, workspace_type=None, task_type=Task) -> TaskGroup:
        """A new TaskGroup running ``runnable`` in a ``task_type`` task (not cached: ``as_group`` caches)."""
        return wrap_runnable(runnable, workspace_type, task_type)

    def run(self, runnable, workspace_type=None, setup_net_list=None):
        """Compile ``runnable`` (once) and run it; its task outputs are fetchable afterwards."""
        if not self._open:
            raise TraceError("this session is closed", user_location(),
                             "run it before close(), or open a new session")
        if runnable is None:
            raise TraceError("session.run() needs something to run", user_location(),
                             "pass a Task, TaskGroup, Net, ExecutionStep or Plan")
        if isinstance(runnable, Job):  # its groups run epoch by epoch, without checkpoints
            JobRunner(runnable).train(self)
            return
        self._run(self.as_group(runnable, workspace_type))

    def _run(self, group: TaskGroup) -> None:
        raise NotImplementedError


class LocalSession(Session):
    """Runs jobs in one process, on the chosen backend (``interp`` by default)."""

    def __init__(self, ws=None, backend: str | None = None, source: str = "", passes=None,
                 verify_each=None, print_after=None, ir_out=None, **options):
        """``passes``: the pipeline to run before the backend (default: the driver's
        options, then the ``DSLC_PIPELINE`` environment variable, else the default pipeline;
        "none" for none). ``verify_each`` (default: the driver's options, then ``DSLC_DEBUG``)
        verifies after every pass; ``print_after`` ("all" or pass names) writes the IR after
        those passes to ``ir_out``. ``backend``: default the driver's options, then
        ``DSLC_BACKEND``, else interp. The driver's options (dslc/driver/options.py, set by
        the CLI) fill in what is not given here.
        """
        super().__init__()
        opts = driver_options.current()
        self._ws = ws if ws is not None else runner.current()
        if opts.profiler is not None:
            options.setdefault("profile", opts.profiler)
        self.backend = backends.get(backend or default_backend())(**options)
        self.source = source
        self.passes = pipeline(passes if passes is not None else opts.passes)
        if verify_each is None:
            verify_each = opts.verify_each
        self.verify_each = bool(os.environ.get("DSLC_DEBUG")) if verify_each is None else verify_each
        self.print_after = print_after if print_after is not None else opts.print_after
        self.ir_out = ir_out if ir_out is not None else opts.ir_out
        self.pass_manager: PassManager | None = None
        self._compiled: dict[int, CompiledRunnable] = {}  # id(group) -> the variant run last
        self._variants: dict[int, list] = {}  # id(group) -> its variants, least recently used first
        self.compiles = 0  # lowerings and backend compiles this session made (runnables, not modules)

    @property
    def workspace(self) -> Workspace:
        return self._ws

    def compile(self, runnable, workspace_type=None) -> CompiledRunnable:
        """Lower and compile ``runnable`` (or its TaskGroup) against what the root holds now.

        The result is reused while every root blob it loads holds a value of the type
        it was compiled for. A blob fed since with other dims compiles the runnable once
        more with those dims unknown, a compile later sizes reuse; another dtype or rank
        compiles a variant for it (at most ``variants.MAX_VARIANTS`` kept per runnable).
        """
        got = self._compiled.get(id(runnable))  # (a group run before: no wrapping to look it up)
        group = runnable if got is not None and got.group is runnable else self.as_group(runnable, workspace_type)
        got = got if group is runnable else self._compiled.get(id(group))
        if got is not None and got.group is group:
            if self._fits(got):
                return got
            kept = self._variants.get(id(group), [])
            for other in kept:  # (another variant: a blob back to a dtype or rank seen before)
                if other is not got and self._fits(other):
                    kept.remove(other)
                    kept.append(other)
                    self._compiled[id(group)] = other
                    return other
        existing, created = blob_types(self._ws)
        before = got if got is not None and got.group is group else None
        widens, widened = before is None or before.widens, []
        if before is not None and widens:
            # run again with other dims: compile once with the dims that changed unknown, a
            # compile every later size reuses (variants.py)
            existing, widened = generalized(existing, before.deps)
        try:
            got = self._compile_group(group, existing, created)
        except DSLError:
            if not widened:
                raise
            # (an op whose rule needs one of those dims known: compiled for the sizes held now,
            # and for each later size too, without trying to widen again)
            got = self._compile_group(group, blob_types(self._ws)[0], created)
            widens = False
        got.widens = widens
        kept = [v for v in self._variants.get(id(group), ()) if v.group is group]
        self._variants[id(group)] = kept
        kept.append(got)
        if len(kept) > MAX_VARIANTS:
            del kept[0]
        self._compiled[id(group)] = got
        return got

    def _fits(self, got: CompiledRunnable) -> bool:
        """Whether the root holds what ``got`` was compiled for (its loads' types, the blobs
        of dropped workspaces it held): a fingerprint compared first, the types if that differs."""
        if got.dropped and _held(self._ws, got.dropped) != got.held:
            return False
        seen = got.guard.fingerprint(self._ws)
        if seen == got.seen:  # (the blobs it loads hold what they held when last checked)
            return True
        # (only the blobs it loads are typed to reuse it: a root may hold thousands)
        known, created = blob_types(self._ws, got.deps)
        if _still_valid(got.deps, known) and got.created == created:
            got.seen = seen
            return True
        return False

    def _compile_group(self, group, existing: dict, created) -> CompiledRunnable:
        """Lower ``group`` against root blobs of the types ``existing`` gives, optimize, compile."""
        self.compiles += 1
        with paused(), compile_clock.compiling():
            module = lower_group(group, self.source, existing, created=created)
            deps = _load_types(module)  # before any pass: what the lowering assumed
            dropped = dropped_stores(module)
            self.optimize(module, lambda: lower_group(group, self.source, existing, created=created))
            program = self.backend.compile(module)
        got = CompiledRunnable(group, module, program, deps, group.tasks(), created.intersection(deps), dropped)
        got.seen = got.guard.fingerprint(self._ws)
        got.held = _held(self._ws, got.dropped)
        return got

    def optimize(self, module, redo=None) -> None:
        """Run the session's pass pipeline on ``module`` (and verify the result; ``redo``
        gives the same module again, to name the pass if one broke it: ``PassManager.run``)."""
        if self.passes:
            self.pass_manager = PassManager(self.passes, self.verify_each, self.print_after, self.ir_out)
            self.pass_manager.run(module, redo)
            driver_options.current().record_passes(self.pass_manager.times)
        driver_options.current().dump(module, self.source)

    def run_module(self, module) -> dict:
        """Run a module (e.g. parsed from IR text); returns its tasks' outputs by blob name
        (by the job file's names if the module records them)."""
        return self.run_modules([module])

    def run_modules(self, modules) -> dict:
        """Run modules in order, as a job file's runnables (a Job's epoch module, whose
        ``until`` names stop blobs, runs again until one holds true). Returns the outputs
        the modules name (see cli.name_outputs), else every task output by blob name."""
        named, plain = {}, {}
        for module in modules:
            self.optimize(module)
            names = [str(n) for op in module.walk() if op.name == "task" for n in op.attrs["outputs"]]
            for n in names:
                self._ws.create_blob(n)
            program = self.backend.compile(module)
            until = [str(b) for b in module.op.attrs.get("until") or []]
            while True:
                with runner.current_as(self._ws):
                    program.run(self._ws)
                if not until or any(bool(np.asarray(self._fetch(b)).any()) for b in until):
                    break
            for o in module.op.attrs.get("outputs") or []:
                named[str(o[0])] = self._fetch(o[1]) if len(o) == 2 else [self._fetch(n) for n in o[1:]]
            plain.update({n: self._fetch(n) for n in names if not n.endswith(DUMMY_OUTPUT)})
        return named or plain

    def _run(self, group: TaskGroup) -> None:
        current = runner.CURRENT  # (the current-workspace cell: this runs per RunNet)
        compiled = self.compile(group)
        # Outputs live in the root, so writes from private or instance workspaces land there.
        if compiled.has_outputs:
            for task in compiled.tasks:
                for name in task.output_names():
                    self._ws.create_blob(name)
        # Python ops that call FetchBlob see this root (workspace.current_as, inlined: a
        # created net may run once per iteration of a Python loop)
        saved = current[0]
        current[0] = self._ws
        try:
            compiled.program.run(self._ws)
        finally:
            if saved is not self._ws:
                current[0] = saved
        if compiled.has_outputs:
            for task in compiled.tasks:
                refs = [BlobReference(n) for n in task.output_names()]
                task.output_list().set_values(refs, self._fetch)

    def _fetch(self, name):
        cell = self._ws.lookup(str(name))
        if cell is None or cell.v is None:
            # located by the caller: TaskOutput.fetch names the line that made the output
            raise DSLError(f"output {str(name)!r} was never written: the run stored no value to it",
                           None, "check that an op of its task writes that blob (and the blob's name)")
        v = cell.v
        return to_user(np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v)



def default_backend() -> str:
    """The backend of sessions that name none: the driver's options' (``--backend``),
    else ``DSLC_BACKEND``, else interp."""
    return driver_options.default_backend()


DUMMY_OUTPUT = ":output/ConstantFill:0"  # the output Caffe2 gives tasks that have none


def pipeline(passes) -> list[str]:
    """The pass names a session runs: ``passes``, else $DSLC_PIPELINE, else the default."""
    if passes is None:
        passes = os.environ.get("DSLC_PIPELINE", "default")
    if isinstance(passes, str) and passes.strip() in ("none", ""):
        return []
    if isinstance(passes, str) and passes.strip() == "default":
        return list(DEFAULT_PIPELINE)
    return parse_pipeline(passes)


def _load_types(module) -> dict:
    """Blob -> the type the module's loads of it were given (the widest, if they differ)."""
    deps: dict = {}
    for op in module.walk():
        if op.name == "load":
            name, t = str(op.attrs["blob"]), op.results[0].type
            deps[name] = join(deps[name], t) if name in deps else t
    return deps


def _held(ws, names) -> tuple:
    """Which blobs of ``names`` root ``ws`` holds, with a value or created empty (the
    lowering's ``existing``)."""
    blobs = ws.blobs
    return tuple(n for n in names if n in blobs)


def _still_valid(deps: dict, existing: dict) -> bool:
    """A compiled module still fits the root if every blob it loads holds a value of its load type.

    A blob fed since with another dtype or shape forces a recompile; a blob that was
    absent at compile time and has since appeared is checked the same way.
    """
    return all(subsumes(t, existing[n]) for n, t in deps.items() if n in existing)
