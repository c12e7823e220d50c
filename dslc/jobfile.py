"""Loading a job file: the convention ``dslc run`` and ``dslc ir`` rely on.

A job file defines ``build_job()``. dslc calls it with a fresh TaskGroup open, so
every Task it creates is collected. It may return:

* nothing: the collected tasks run, and all their outputs are printed;
* task outputs (one, a list/tuple, or a dict of name -> output): the collected
  tasks run, and those outputs are printed;
* runnables (a Task, TaskGroup, Net, ExecutionStep or Plan, or a list/tuple of
  them, possibly mixed with outputs): those run in order instead.
"""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field

from dslc import names
from dslc.core import ExecutionStep, Net, Plan
from dslc.ir.diagnostics import DSLError, JobFileError, Location
from dslc.net_builder import NetBuilder
from dslc.task import Cluster, Task, TaskGroup, TaskOutput

ENTRY = "build_job"
RUNNABLES = (Task, TaskGroup, Net, ExecutionStep, Plan, NetBuilder)


@dataclass
class LoadedJob:
    path: str
    runnables: list
    outputs: dict = field(default_factory=dict)  # shown name -> TaskOutput


def load(path: str) -> LoadedJob:
    """Import the job file and call its ``build_job()``; errors name the file and line."""
    names.reset()
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise JobFileError(f"cannot read job file {path!r}: {e.strerror}",
                           hint="check the path (dslc run path/to/job.py)") from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise JobFileError(f"syntax error: {e.msg}", Location(path, e.lineno or 0),
                           "fix the Python syntax of the job file") from None
    ns = {"__name__": "__dslc_job__", "__file__": os.path.abspath(path)}
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        _user_call(path, exec, code, ns)
        build = ns.get(ENTRY)
        if not callable(build):
            raise JobFileError(f"no {ENTRY}() function in the job file", Location(path, 1),
                               f"define {ENTRY}() returning the outputs to print (see the README)")
        group = TaskGroup()
        with Cluster(), group:
            result = _user_call(path, build)
    finally:
        sys.path.remove(os.path.dirname(os.path.abspath(path)))
    return _interpret(path, result, group)


def _user_call(path, fn, *args):
    try:
        return fn(*args)
    except DSLError:
        raise
    except Exception as e:
        raise JobFileError(f"{type(e).__name__}: {e}", _innermost(e, path),
                           "this exception came from the job file's own code") from e


def _innermost(e: BaseException, path: str) -> Location | None:
    target = os.path.abspath(path)
    found = None
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == target:
            found = Location(path, frame.lineno or 0)
    return found


def _interpret(path: str, result, group: TaskGroup) -> LoadedJob:
    items = list(result) if isinstance(result, (list, tuple)) else [] if result is None else [result]
    outputs: dict = {}
    runnables = []
    for it in items:
        if isinstance(it, dict):
            for k, v in it.items():
                if not isinstance(v, TaskOutput):
                    raise JobFileError(f"{ENTRY}() returned a dict whose value for {k!r} is a "
                                       f"{type(v).__name__}, not a task output", Location(path, 1),
                                       "use final_output(blob) to make task outputs")
                outputs[str(k)] = v
        elif isinstance(it, TaskOutput):
            outputs[_shown(it)] = it
        elif isinstance(it, RUNNABLES):
            runnables.append(it)
        else:
            raise JobFileError(f"{ENTRY}() returned a {type(it).__name__}", Location(path, 1),
                               "return task outputs (final_output(...)), or a Task/TaskGroup/Net to run")
    if not runnables:
        runnables = [group]
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


def _shown(o: TaskOutput) -> str:
    return ", ".join(str(n) for n in o.names)
