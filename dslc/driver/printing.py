"""A job as text, a check of its blob definitions, a logging net (Caffe2's ``net_printer``).

``to_string(obj)`` is the text backend's plan of a Job, TaskGroup, Task, Net, step or
Plan; ``analyze(obj)`` raises an ``AnalysisError`` (an AssertionError, as Caffe2's
analyzer raises) for the first blob read before anything defined it, or created by
two concurrent tasks; ``debug_net(net)`` is a copy of ``net`` logging each op before
it runs.

Like the session and the CLI, this ties the front end (lowering) to a backend. The text
backend already knows how to read a lowered module as a plan (its order of phases,
concurrency, names), so the printing and the analysis are done there; this module reaches
it through the backend registry, never by importing it.
"""
from __future__ import annotations

from dslc import backends
from dslc.driver.session import Session
from dslc.ir.diagnostics import DSLError
from dslc.ir.types import join
from dslc.lower import lower_group
from dslc.trace.builder_base import NetBuilder
from dslc.trace.job import Job
from dslc.trace.net import Net
from dslc.trace.steps import ExecutionStep, Plan
from dslc.trace.task import Task, TaskGroup
from dslc.trace.tracing import user_location


class AnalysisError(DSLError, AssertionError):
    """A blob read before it is defined, or defined by two concurrent tasks.

    ``str()`` is Caffe2's message (``Blob undefined: a``), so code checking it keeps
    working; ``one_line()`` has the location of the op at fault and a hint.
    """

    def __str__(self) -> str:
        return self.message


def _groups(obj) -> list:
    """The task groups ``obj`` runs, in order: a Job's init, epoch, download and exit groups."""
    if isinstance(obj, Job):
        return [g for g in (obj.init_group, obj.epoch_group, obj.download_group, obj.exit_group)
                if g.tasks()]
    if isinstance(obj, (TaskGroup, Task, Net, NetBuilder, ExecutionStep, Plan)):
        return [Session.as_group(obj)]
    raise DSLError(f"net_printer cannot show a {type(obj).__name__}", user_location(2),
                   "pass a Job, TaskGroup, Task, Net, ExecutionStep or Plan")


def _modules(obj, check_reads: bool = True) -> list:
    """The lowered module of each group, each lowered knowing what the ones before store."""
    known: dict = {}
    modules = []
    for group in _groups(obj):
        module = lower_group(group, "", dict(known), check_reads=check_reads)
        for op in module.walk():
            if op.name == "store":
                b, t = str(op.attrs["blob"]), op.operands[0].type
                known[b] = join(known[b], t) if b in known else t
        modules.append(module)
    return modules


def to_string(obj, with_locs: bool = False) -> str:
    """The plan of ``obj`` as the text backend writes it (``with_locs``: ``# line N`` marks)."""
    text = backends.get("text")(with_locs=with_locs)
    return "\n".join(text.compile(m).text for m in _modules(obj))


def analyze(obj) -> None:
    """Raise ``AnalysisError`` for the first blob read before it is defined, or defined by
    two concurrent tasks; do nothing for a job whose every read follows a definition."""
    found = backends.get("text").analyze(_modules(obj, check_reads=False))
    if not found:
        return
    p = found[0]
    if p.kind == "undefined":
        raise AnalysisError(f"Blob undefined: {p.blobs[0]}", p.loc,
                            "define it earlier in the job (or feed it before running)")
    raise AnalysisError(f"Error: Blobs created by multiple parallel steps: {', '.join(p.blobs)}", p.loc,
                        "let one task create each blob, or give the tasks private workspaces")


def debug_net(net: Net) -> Net:
    """A copy of ``net`` that logs each op (as a plan line) before running it."""
    if not isinstance(net, Net):
        raise DSLError(f"debug_net needs a Net, got {type(net).__name__}", user_location(),
                       "pass a core.Net")
    line = backends.get("text").op_line
    out = Net(net.Name())
    for op in net._ops:
        out.LogInfo(line(op.type, op.inputs, op.outputs, {k: v for k, v in op.args.items() if not callable(v)}))
        out._ops.append(op)
        out._produced.update(op.outputs)
    out._external_inputs = dict(net._external_inputs)  # (LogInfo's constants are made here)
    out.AddExternalOutput(*net._external_outputs)
    return out
