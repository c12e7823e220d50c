"""Loading a job file: the convention ``dslc run`` and ``dslc ir`` rely on.

A job file defines ``build_job()``. dslc calls it with a fresh TaskGroup open, so
every Task it creates is collected. It may return:

* nothing: the collected tasks run, and all their outputs are printed;
* task outputs (one, a list/tuple, or a dict of name -> output): the collected
  tasks run, and those outputs are printed;
* runnables (a Task, TaskGroup, Net, ExecutionStep, Plan or Job, or a list/tuple
  of them, possibly mixed with outputs): those run in order instead; a Job runs
  under a JobRunner (no checkpoints), e.g. ``return job, fetcher_task``.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import sys
import traceback
import types
from dataclasses import dataclass, field

from dslc.driver import blame
from dslc.trace import names, pipes, tracing
from dslc.trace.job import Job
from dslc.ir.gcpause import paused
from dslc.ir.diagnostics import DSLError, JobFileError, Location
from dslc.trace.builder_base import NetBuilder
from dslc.trace.net import Net
from dslc.trace.steps import ExecutionStep, Plan
from dslc.trace.task import Cluster, Task, TaskGroup, TaskOutput

ENTRY = "build_job"
MODULE = "__dslc_job__"  # the name the job file runs under
RUNNABLES = (Task, TaskGroup, Net, ExecutionStep, Plan, NetBuilder, Job)


@dataclass
class LoadedJob:
    path: str
    runnables: list
    outputs: dict = field(default_factory=dict)  # shown name -> TaskOutput


def load(path: str) -> LoadedJob:
    """Import the job file and call its ``build_job()``.

    Every failure that is the job's fault raises a ``DSLError`` (``JobFileError`` for
    a missing file, a syntax error, no ``build_job()``, or an exception in the job's
    own code) located at the job file's line where one is known. An exception that
    escapes from inside dslc itself is an internal failure and propagates unchanged.
    """
    names.reset()
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "it is not UTF-8 text"
        raise JobFileError(f"cannot read the job file: {why}", _at(path, 0),
                           "check the path (dslc run path/to/job.py)") from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise JobFileError(f"syntax error: {e.msg}", _at(path, e.lineno or 0),
                           "fix the Python syntax of the job file") from None
    except ValueError as e:  # e.g. NUL bytes: not Python source at all
        raise JobFileError(f"cannot compile the job file: {e}", _at(path, 0),
                           "a job file is Python source that defines build_job()") from None
    _check_is_a_job(path, source)
    module = _fresh_module(path)
    job_dir = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, job_dir)  # so the job can import modules next to it
    try:
        _user_call(path, exec, code, module.__dict__)
        build = _entry(path, module)
        group = TaskGroup()
        mark = pipes.zero_thread_pipes_mark()
        with Cluster(), group, paused():  # tracing builds a big graph: see ir/gcpause.py
            result = _user_call(path, build)
        pipes.check_zero_thread_pipes(mark)
    finally:
        if job_dir in sys.path:  # the job may have edited sys.path itself
            sys.path.remove(job_dir)
    return _interpret(path, result, group, _def_line(path, build))


def _check_is_a_job(path: str, source: str) -> None:
    """Refuse, before running anything, a Caffe2 script (it imports ``caffe2``) or a file that
    cannot define ``build_job`` (a script of dslc calls): ``dslc exec`` runs those."""
    try:
        tree = ast.parse(source, path)
    except SyntaxError:
        return  # (compile() above reported it)
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n == "caffe2" or n.startswith("caffe2.") for n in names):
            raise JobFileError("this is a Caffe2 script (it imports caffe2), not a job file", _at(path, node.lineno),
                               f"run it as it is with: dslc exec {path} [ARGS]")
    if not _may_define(tree, ENTRY):
        raise JobFileError(f"no {ENTRY}() function in the job file", _at(path, 1),
                           f"define {ENTRY}() returning the outputs to print (see the README); "
                           f"a script that runs its nets itself runs with: dslc exec {path}")


def _may_define(tree: ast.Module, name: str) -> bool:
    """Whether the module's top level defines, assigns or imports ``name`` (or imports *)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name).split(".")[0] in (name, "*") for a in node.names):
            return True
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("globals", "setattr", "exec"):
            return True  # (defined in a way the text does not show)
    return False


def _at(path: str, line: int) -> Location:
    """A location in the job file, its name shown the way op locations show it."""
    return Location(tracing.display_path(path), line)


def _fresh_module(path: str) -> types.ModuleType:
    """The module the job file runs as; registered in sys.modules, which dataclasses,
    pickling and typing look the module up in."""
    module = types.ModuleType(MODULE)
    module.__file__ = os.path.abspath(path)
    sys.modules[MODULE] = module
    return module


def _entry(path: str, module):
    """The job's ``build_job``: a function callable without arguments."""
    build = getattr(module, ENTRY, None)
    if not callable(build):
        raise JobFileError(f"no {ENTRY}() function in the job file", _at(path, 1),
                           f"define {ENTRY}() returning the outputs to print (see the README)")
    try:
        inspect.signature(build).bind()
    except TypeError:
        raise JobFileError(f"{ENTRY}() must take no arguments", _def_line(path, build),
                           f"dslc calls {ENTRY}() with none; give its parameters defaults") from None
    except ValueError:  # no signature (a builtin): let the call itself decide
        pass
    return build


def _def_line(path: str, fn) -> Location:
    """The line ``fn`` is defined on, if it is in the job file (else line 1)."""
    code = getattr(fn, "__code__", None)
    if code is not None and _same_file(code.co_filename, path):
        return _at(path, code.co_firstlineno)
    return _at(path, 1)


def _user_call(path, fn, *args):
    """``fn(*args)``, turning exceptions of the job's own code into located DSLErrors."""
    try:
        return fn(*args)
    except DSLError as e:
        if e.loc is None:
            e.loc = _innermost(e, path)
        raise
    except Exception as e:
        if blame.raised_inside_dslc(e, __file__):
            raise  # a dslc bug, not the job's fault: the CLI reports an internal error
        notes = "".join(f"; {n}" for n in getattr(e, "__notes__", ()))
        raise JobFileError(f"{type(e).__name__}: {e}{notes}", _innermost(e, path),
                           "the exception came from the job's own code; fix it there "
                           "(rerun with --debug for the traceback)") from e


def _frames(e: BaseException):
    """The traceback of ``e``, outermost frame first, without this module's frames."""
    here = os.path.abspath(__file__)
    return [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) != here]


def _same_file(filename: str, path: str) -> bool:
    return os.path.abspath(filename) == os.path.abspath(path)


def _innermost(e: BaseException, path: str) -> Location | None:
    """The innermost line of the job file in ``e``'s traceback."""
    for frame in reversed(_frames(e)):
        if _same_file(frame.filename, path):
            return _at(path, frame.lineno or 0)
    return None


def _interpret(path: str, result, group: TaskGroup, where: Location) -> LoadedJob:
    """What to run and what to print, from ``build_job()``'s result (errors at ``where``)."""
    items = list(result) if isinstance(result, (list, tuple)) else [] if result is None else [result]
    outputs: dict = {}
    runnables = []
    for it in items:
        if isinstance(it, dict):
            for k, v in it.items():
                if not isinstance(v, TaskOutput):
                    raise JobFileError(f"{ENTRY}() returned a dict whose value for {k!r} is a "
                                       f"{type(v).__name__}, not a task output", where,
                                       "use final_output(blob) to make task outputs")
                outputs[str(k)] = v
        elif isinstance(it, TaskOutput):
            outputs[_shown(it, path)] = it
        elif isinstance(it, RUNNABLES):
            runnables.append(it)
        else:
            raise JobFileError(f"{ENTRY}() returned {_a(type(it).__name__)}", where,
                               "return task outputs (final_output(...)), or a Task/TaskGroup/Net to run")
    if not runnables:
        runnables = [group]
    else:
        _check_outputs_run(outputs, runnables, group)
    if not outputs:
        for r in runnables:
            for t in _tasks(r):
                for o in t.outputs():
                    if not any(str(n).endswith(":output/ConstantFill:0") for n in o.names):
                        outputs[_shown(o)] = o
    return LoadedJob(path, runnables, outputs)


def _tasks(r):
    if isinstance(r, Task):
        return [r]
    if isinstance(r, TaskGroup):
        return r._tasks + r._tasks_to_add
    return []


def _run_tasks(r) -> list:
    """Every task running ``r`` runs, a Job's groups' included (its stop signals too,
    which is why the outputs printed by default come from ``_tasks``)."""
    if isinstance(r, Job):
        return [t for g in (r.init_group, r.epoch_group, r.download_group, r.exit_group) for t in _tasks(g)]
    return _tasks(r)


def _check_outputs_run(outputs: dict, runnables, group: TaskGroup) -> None:
    """Refuse an output to print whose task is one of the collected ones but not among the
    runnables ``build_job()`` returned: it would never get a value."""
    run = {id(o) for r in runnables for t in _run_tasks(r) for o in t.outputs()}
    for t in _tasks(group):
        for o in t.outputs():
            if id(o) in run or not any(o is want for want in outputs.values()):
                continue
            if getattr(t, "made_by_final_output", False):
                raise JobFileError(
                    "final_output(...) is called outside any Task, so it made a task of its own, "
                    f"which the runnables {ENTRY}() returns do not run", o.loc,
                    "call final_output inside the `with Task():` block that computes the blob")
            raise JobFileError(f"this output belongs to a task that {ENTRY}() does not return to run",
                               o.loc, "return that task (or its TaskGroup) too, or return no runnable "
                               "to run every task the job made")


def _shown(o: TaskOutput, path: str | None = None) -> str:
    """The name an output prints under: its blobs' names; a blob named by dslc after its op
    (``local/task/Add_2``) goes by the job's own name for it, from ``final_output(y)`` or
    ``y = final_output(...)`` on its line, else "output"."""
    names = [str(n) for n in o.names]
    if path is None or len(names) != 1 or not _AUTO_BLOB.match(names[0].rsplit("/", 1)[-1]):
        return ", ".join(names)
    line = linecache.getline(os.path.abspath(path), o.loc.line if o.loc else 0).strip()
    try:
        tree = ast.parse(line.removeprefix("return ").strip())
    except SyntaxError:
        return "output"
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return node.targets[0].id
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            return node.args[0].id
    return "output"


_AUTO_BLOB = re.compile(r"^[A-Z][A-Za-z0-9]*(_\d+)?(:\d+)?$")  # an op type, numbered (Caffe2's auto names)


def _a(noun: str) -> str:
    """``noun`` with its indefinite article ("an int", "a str")."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
