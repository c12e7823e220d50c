"""Running a module's plan: groups, tasks, instances, concurrent regions, reporters.

Task order: task init (once) -> N instances, each on its own thread and workspace
when N > 1 (instance init -> body -> instance exit) -> task exit (once). The tasks
of a group run concurrently. A failure anywhere cancels its siblings: their loops
stop at the next iteration, and the first real error is raised with the task name
and the failing op's line.
"""
from __future__ import annotations

import threading

import numpy as np

from dslc.runtime import hooks
from dslc.runtime.cancel import Cancelled, Watch, swap_token
from dslc.runtime.ieee import ieee, in_ieee
from dslc.runtime.workspace import Workspace
from dslc.ir import Module
from dslc.ir.diagnostics import DSLError, ExecutionError

from .codegen import SOURCES, ChildPlan, compile_region, rechecked
from .kernels import PythonOpError


class UnsetBlob(Exception):
    def __init__(self, name):
        super().__init__(name)
        self.name = name


class CancelToken:
    """Shared by siblings; cancelling a token cancels the tokens made from it.

    ``watch`` (a ``Watch`` or None) and ``collective`` (the transport the run's collective
    ops meet other shards through, or None: runtime/collectives.py) are shared by every
    token of one run."""

    __slots__ = ("flag", "children", "lock", "waiters", "watch", "collective")

    def __init__(self, watch: Watch | None = None, collective=None):
        self.flag = False
        self.children: list[CancelToken] = []
        self.lock = threading.Lock()
        self.waiters: list = []
        self.watch = watch
        self.collective = collective

    def child(self) -> "CancelToken":
        t = CancelToken(self.watch, self.collective)
        with self.lock:
            self.children.append(t)
        if self.flag:
            t.cancel()
        return t

    def release(self, child: "CancelToken") -> None:
        """Forget a finished child, so a parallel region in a long loop does not pile them up."""
        with self.lock:
            try:
                self.children.remove(child)
            except ValueError:
                pass

    def cancel(self) -> None:
        self.flag = True
        with self.lock:
            children, waiters = list(self.children), list(self.waiters)
        for w in waiters:
            w()
        for c in children:
            c.cancel()


class Instance:
    """What per-instance op makers see: the workspace they are bound in, and the task."""

    __slots__ = ("ws", "task", "cfg")

    def __init__(self, ws, task, cfg):
        self.ws, self.task, self.cfg = ws, task, cfg


class Run:
    """The ``rt`` of generated code: one per thread of a run."""

    __slots__ = ("cancel", "executor", "task")

    def __init__(self, cancel, executor, task):
        self.cancel, self.executor, self.task = cancel, executor, task

    def unset(self, cell):
        raise UnsetBlob(cell.name)

    @staticmethod
    def trip(v) -> int:
        n = int(v)
        if n < 0:  # a DSLError, so that ``call`` locates it at the loop and names the task
            raise DSLError(f"the loop count is negative ({n})",
                           hint="a loop cannot run a negative number of times")
        return n

    @staticmethod
    def arange(n):
        return np.arange(n, dtype=np.int64) if n <= 1 << 20 else map(np.int64, range(n))

    def cancelled(self):
        raise Cancelled()

    @staticmethod
    def progress(loc, count):
        """The tick of a top-level loop's progress counter, or None when progress is off."""
        make = hooks.progress  # installed by the driver (dslc/driver/progress.py) while it shows progress
        if make is None:
            return None
        n = int(count)
        return make(f"loop at {loc}", n).tick if n > 1 else None

    def plan(self, child: ChildPlan, ws) -> None:
        self.executor.run_child(child, ws, self)


class _Task:
    """A task op with its five phase regions compiled."""

    def __init__(self, op, compile_fn):
        self.op = op
        self.name = op.attrs["name"]
        self.instances = max(1, int(op.attrs["instances"] or 1))
        self.global_ws = op.attrs["workspace"] == "global"
        self.init, ii, body, ie, self.exit = (compile_fn(r) for r in op.regions)
        self.instance_parts = (ii, body, ie)
        self.nonempty_parts = tuple(c for c in self.instance_parts if not c.empty)
        # a GLOBAL task whose parts keep no per-run op state binds them to the root once:
        # (root, its epoch, the bound parts) of the last run (a created net run per Python
        # loop iteration would resolve its cells on every call)
        self.reusable = self.global_ws and self.instances == 1 and not any(c.makers for c in self.nonempty_parts)
        self.bound = None

    def parts(self, ws, inst) -> list:
        """The non-empty instance parts bound to ``ws`` (the cells they resolved last time,
        if ``ws`` is the workspace they were bound to and has not been reset since)."""
        got = self.bound
        if got is not None and got[0] is ws and got[1] == ws.epoch:
            return got[2]
        parts = [c.bind(ws, inst) for c in self.nonempty_parts]
        if self.reusable:
            self.bound = (ws, ws.epoch, parts)
        return parts


class Executor:
    """A compiled module, ready to run on a workspace (any number of times)."""

    def __init__(self, module: Module, cfg, compile_fn=None):
        self.cfg = cfg
        compile_fn = compile_fn or (lambda r: compile_region(r, cfg))
        self.groups = []
        for g in module.body.ops:
            init, body, exit_ = g.regions
            tasks, reporters = [], None
            for op in body.ops:
                if op.name == "reporting":
                    reporters = (op.attrs["intervals_ms"], [compile_fn(r) for r in op.regions[1:]])
                    tasks += [_Task(t, compile_fn) for t in op.regions[0].ops]
                else:
                    tasks.append(_Task(op, compile_fn))
            self.groups.append((compile_fn(init), tasks, reporters, compile_fn(exit_)))

    # --- entry
    def run(self, root: Workspace, token: CancelToken | None = None) -> None:
        """Run every group on ``root``; ``token.cancel()`` from another thread stops the run."""
        with ieee():
            self.run_groups(root, token)

    def run_groups(self, root: Workspace, token: CancelToken | None = None) -> None:
        # a run started here owns all its threads, so it can tell when they are all stuck
        token = token or CancelToken(Watch())
        for init, tasks, reporters, exit_ in self.groups:
            if init.empty and exit_.empty and not reporters and len(tasks) == 1:
                self.run_task(tasks[0], root, token)  # (a plain net's group: its one task)
                continue
            rt = Run(token, self, None)
            inst = Instance(root, None, self.cfg)
            if not init.empty:
                self.call(init.bind(root, inst), rt, root)

            def run_tasks(tok, tasks=tasks):
                self.concurrently([lambda t, task=task: self.run_task(task, root, t) for task in tasks], tok)

            if reporters:
                self.with_reporters(run_tasks, reporters[0], [c.bind(root, inst) for c in reporters[1]],
                                    rt, root)
            else:
                run_tasks(token)
            if not exit_.empty:
                self.call(exit_.bind(root, inst), rt, root)

    def run_task(self, task: _Task, root: Workspace, token: CancelToken) -> None:
        ws = root if task.global_ws else Workspace(root)
        inst = Instance(ws, task.name, self.cfg)
        rt = Run(token, self, task.name)
        init = None if task.init.empty else task.init.bind(ws, inst)
        exit_ = None if task.exit.empty else task.exit.bind(ws, inst)
        if task.instances == 1:
            parts = task.parts(ws, inst)
            if init is not None:
                self.call(init, rt, ws)
            for p in parts:
                self.call(p, rt, ws)
        else:
            if init is not None:
                self.call(init, rt, ws)

            def one(tok):
                iws = Workspace(ws)
                iinst = Instance(iws, task.name, self.cfg)
                parts = [c.bind(iws, iinst) for c in task.instance_parts]
                irt = Run(tok, self, task.name)
                for p in parts:
                    self.call(p, irt, iws)

            self.concurrently([one] * task.instances, token)
        if exit_ is not None:
            self.call(exit_, rt, ws)

    # --- nested plan ops
    def run_child(self, child: ChildPlan, ws: Workspace, rt: Run) -> None:
        op = child.op
        inst = Instance(ws, rt.task, self.cfg)
        if op.name == "scope":
            cws = Workspace(ws)
            self.call(child.codes[0].bind(cws, Instance(cws, rt.task, self.cfg)), rt, cws)
        elif op.name == "parallel":
            bound = [c.bind(ws, inst) for c in child.codes]
            n = max(1, int(op.attrs["instances"]))
            fns = [lambda tok, b=b: self.call(b, Run(tok, self, rt.task), ws) for b in bound for _ in range(n)]
            self.concurrently(fns, rt.cancel)
        elif op.name == "reporting":
            body = child.codes[0].bind(ws, inst)
            reps = [c.bind(ws, inst) for c in child.codes[1:]]
            self.with_reporters(lambda tok: self.call(body, Run(tok, self, rt.task), ws),
                                op.attrs["intervals_ms"], reps, rt, ws)
        else:
            raise ExecutionError(f"the interp backend cannot run {op.name} here", op.loc)

    def with_reporters(self, body, intervals, reporters, rt: Run, ws) -> None:
        """Run ``body``; each reporter runs every interval meanwhile, and once at the end."""
        done = threading.Event()
        errors: list = []

        def report(b, ms):
            try:
                while not done.wait(ms / 1000.0):
                    self.call(b, Run(rt.cancel, self, rt.task), ws)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=in_ieee(report), args=(b, ms), daemon=True)
                   for b, ms in zip(reporters, intervals)]
        watch = rt.cancel.watch
        if watch is not None:  # a reporter may act on a queue: it counts as running
            watch.add_running(len(threads))
        for t in threads:
            t.start()
        try:
            body(rt.cancel)
        finally:
            done.set()
            for t in threads:
                t.join()
            if watch is not None:
                watch.add_running(-len(threads))
        if errors:
            raise errors[0]
        for b in reporters:
            self.call(b, rt, ws)

    # --- threads and errors
    def concurrently(self, fns, token: CancelToken) -> None:
        """Run each ``fn(token)`` on its own thread; the first failure cancels the rest."""
        if len(fns) == 1:
            return fns[0](token)
        tok = token.child()
        errors: list = []
        watch = tok.watch

        def guarded(fn):
            try:
                fn(tok)
            except BaseException as e:
                errors.append(e)
                tok.cancel()
            finally:
                if watch is not None:
                    watch.add_running(-1)

        threads = [threading.Thread(target=in_ieee(guarded), args=(fn,), daemon=True) for fn in fns]
        if watch is not None:  # the children run; this thread only joins them
            watch.add_running(len(threads) - 1)
        try:
            for t in threads:
                t.start()
        finally:
            started = sum(t.ident is not None for t in threads)
            if watch is not None and started < len(threads):
                watch.add_running(started - len(threads))
            for t in threads:
                if t.ident is not None:
                    t.join()
            if watch is not None:
                watch.add_running(1)
            token.release(tok)
        real = [e for e in errors if not isinstance(e, Cancelled)]
        if real:
            raise real[0]
        if errors:
            raise errors[0]

    def call(self, bound, rt: Run, ws) -> None:
        # blocking kernels (queue reads and writes) find the thread's token here
        prev = swap_token(rt.cancel)
        try:
            bound.code.fn(bound.cells, bound.states, rt, ws)
        except (Cancelled, ExecutionError):
            raise
        except Exception as e:
            raise located(e, rt.task) from e
        finally:
            swap_token(prev)


_RAISED_AS: dict = {}


def _raised_as(user_type: type) -> type:
    """An ExecutionError that is also a ``user_type``: code that catches the exception its
    Python op raised (as Caffe2 re-raises it) still catches it, with the op's location."""
    got = _RAISED_AS.get(user_type)
    if got is None:
        try:
            got = type(user_type.__name__, (ExecutionError, user_type), {"__module__": user_type.__module__})
        except TypeError:  # (a layout that cannot be mixed in, e.g. some built-in exceptions)
            got = ExecutionError
        _RAISED_AS[user_type] = got
    return got


_GENERIC = (ValueError, IndexError, TypeError)  # what numpy raises for operands that do not fit


def located(e: Exception, task: str | None) -> DSLError:
    """An ExecutionError for ``e`` at the op whose generated line raised it (the type error
    of that op, for a shape check its compile left to the run: ``codegen.rechecked``)."""
    op = part = frame = None
    tb = e.__traceback__
    while tb is not None:
        code = SOURCES.get(tb.tb_frame.f_code.co_filename)
        if code is not None:
            at = code.line_ops.get(tb.tb_lineno)
            if at is not None:
                op, part, frame = at, code, tb.tb_frame
        tb = tb.tb_next
    if op is not None and type(e) in _GENERIC:
        # (a shape check its compile left to the run, failing in numpy; a kernel's own
        # error, a subclass worded for the user, stays as it is)
        typed = rechecked(part, op, frame)
        if typed is not None:
            return typed
    loc = op.loc if op is not None else None
    if isinstance(e, UnsetBlob):
        return ExecutionError(f"blob {e.name!r} is read before anything wrote it", loc,
                              "check that an earlier op or task writes it", task=task)
    if isinstance(e, DSLError):
        return ExecutionError(e.message, e.loc or loc, e.hint, task=task)
    if isinstance(e, PythonOpError):
        hint = "fix that Python function (rerun with --debug for its traceback)"
        kind = _raised_as(type(e.__cause__)) if e.__cause__ is not None else ExecutionError
        try:
            return kind(str(e), loc, hint, task=task)
        except Exception:  # (an exception class whose constructor wants other arguments)
            return ExecutionError(str(e), loc, hint, task=task)
    what = op.name if op is not None else "the job"
    return ExecutionError(f"{what} failed: {type(e).__name__}: {e}", loc, task=task)
