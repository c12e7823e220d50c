"""``ops`` and ``NetBuilder``: record nets, loops, conditionals and phases as what they are.

The builder itself is in builder_base.py, its nested blocks (``_Loop``, ``_RunIf``,
``_StopGuard``, ``_RunIfNet``, ``_RunWhileNet``...) in builder_blocks.py; this module
holds ``ops``, the facade that records into the innermost open builder. The lowering
turns each kind into structured IR; nothing here is pre-lowered into stop-blob tricks. Blob and net names are still taken the way
Caffe2 takes them, so auto-generated names match.
"""
from __future__ import annotations

from dslc.trace.builder_base import NetBuilder, NoBuilderError, StopIf
from dslc.trace.builder_blocks import (_Loop, _ReporterBuilder, _RunElseNet, _RunIf, _RunIfNet,
                                 _RunWhileCondition, _RunWhileNet, _SetupBuilder, _StopGuard)
from dslc.trace.net import Net
from dslc.trace.net_record import GetattrShortcut, _OpRecorder
from dslc.trace.oprecord import is_operator
from dslc.trace.steps import ExecutionStep
from dslc.trace.task import Task
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location


# ----------------------------------------------------------------------------- ops


class Operations:
    """``ops``: record into the current NetBuilder (``ops.Add(...)``, ``ops.loop(...)``...)."""

    def net(self, net=None, name=None):
        """Add ``net`` (a Net or step) as the next child; or return the current net."""
        if net is not None and name is not None:
            raise TraceError("ops.net takes a net or a name, not both", user_location(),
                             "ops.net(net) adds an existing net; ops.net(name=...) starts a new one")
        builder = _builder()
        if net is not None:
            if not isinstance(net, (Net, ExecutionStep)):
                raise TraceError(f"ops.net needs a Net or an ExecutionStep, got {type(net).__name__}",
                                 user_location(), "wrap other things with core.execution_step(name, ...)")
            if isinstance(net, ExecutionStep):
                if builder._use_control_ops:
                    raise TraceError("steps cannot be added inside ops.IfNet/ops.WhileNet", user_location(),
                                     "add the step outside the IfNet/WhileNet block, or add its nets")
                net._used = True
            builder.add(net)
            return net
        return builder.current_net(name, _innermost=True)

    def __getattr__(self, name):
        """``ops.<name>``: the current net's ``<name>`` (for operators, from then on a class attribute)."""
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(_builder().current_net(), name)
        if is_operator(name) or hasattr(Net, name):  # an operator, or a method such as Const
            setattr(Operations, name, _OfCurrentNet(name))
        return found

    def stop(self):
        """Leave the innermost block (break out of a loop, skip the rest of an If branch)."""
        self.stop_if(self.Const(True))

    def stop_if(self, blob):
        _builder().stop_if(blob, user_location())

    def loop(self, iters=None, name=None):
        """``with ops.loop(n) as loop:`` runs n times (``loop.iter()`` is 0..n-1); no n: until stopped."""
        builder = _ordinary_builder("ops.loop")
        return builder.add(_Loop(iters, name=name, _loc=user_location(2), _parent=builder))

    def stop_guard(self, has_stopped_blob=None, name=None):
        builder = _ordinary_builder("ops.stop_guard")
        return builder.add(_StopGuard(has_stopped_blob=has_stopped_blob, name=name))

    def If(self, cond, name=None):
        """``with ops.If(c) as c:`` ... ``with c.Elif(c2) as c:`` ... ``with c.Else():``."""
        builder = _ordinary_builder("ops.If")
        return builder.add(_RunIf(cond, name=name, _loc=user_location(2), _parent=builder))

    def IfNet(self, cond, name=None):
        return _builder().add(_RunIfNet(cond, name=name))

    def Else(self, name=None):
        return _RunElseNet(name=name)

    def WhileNet(self, name=None):
        return _builder().add(_RunWhileNet(name=name))

    def Condition(self, name=None):
        return _RunWhileCondition(name=name)

    def _setup(self, key, kind, what):
        if key != "local_setup" and Task.current(required=False) is None:
            raise TraceError(f"ops.{what}() is only valid inside a Task", user_location(),
                             f"open it inside `with Task():` (a {what} block outside a task would never run)")
        setup = _SetupBuilder(kind)
        setup._loc = user_location(2)
        _builder().current_net().add_attribute(key, setup)
        return setup

    def task_init(self):
        """Ops in this block run once per task run, before the body (and its instances)."""
        return self._setup("task_setup", _SetupBuilder.INIT, "task_init")

    def task_exit(self):
        """Ops in this block run once per task run, after the body."""
        return self._setup("task_setup", _SetupBuilder.EXIT, "task_exit")

    def task_instance_init(self):
        """Ops in this block run in each instance, before the body; their blobs are per instance."""
        return self._setup("task_instance_setup", _SetupBuilder.INIT, "task_instance_init")

    def task_instance_exit(self):
        """Ops in this block run in each instance, after the body."""
        return self._setup("task_instance_setup", _SetupBuilder.EXIT, "task_instance_exit")

    def local_init(self):
        """Ops in this block run once per node, before the task group's tasks."""
        return self._setup("local_setup", _SetupBuilder.INIT, "local_init")

    def local_exit(self):
        return self._setup("local_setup", _SetupBuilder.EXIT, "local_exit")

    def task_reporter(self, interval_ms=1000, name=None):
        """A block run every ``interval_ms`` while the task body runs, and once after it."""
        return _ReporterBuilder(interval_ms, net=self.net(), name=name)

    def local_reporter(self, interval_ms=1000, name=None):
        """A block run every ``interval_ms`` on the node while the task group runs."""
        return _ReporterBuilder(interval_ms, name=name)

    def task_group(self):
        raise TraceError("ops.task_group() is not supported", user_location(),
                         "create a TaskGroup() outside the builder and add Tasks to it")


class _OfCurrentNet(GetattrShortcut):
    """``ops.<Op>``: the current net's ``<Op>``, looked up at each access (as Operations.__getattr__)."""

    __slots__ = ("records",)

    def __init__(self, name: str):
        super().__init__(name)
        # Whether a plain Net records ``name`` through an _OpRecorder (not a method such as Const):
        # then the recording function is made here, without looking the name up on the net.
        self.records = isinstance(vars(Net).get(name), _OpRecorder)

    def __get__(self, ops_, owner=None):
        if ops_ is None:
            return self
        if type(ops_) is not Operations and self.overridden(ops_):
            return self.overridden(ops_)(ops_, self.name)
        builder = NetBuilder.current(required=False) or _builder()  # (_builder raises the error)
        net = builder._current_net
        if net is None or builder._frozen:  # current_net(), inlined for its common case
            net = builder.current_net(_innermost=True)
        if self.records and type(net) is Net:
            return net._recorder(self.name)
        return getattr(net, self.name)


def _builder() -> NetBuilder:
    nb = NetBuilder.current(required=False)
    if nb is None:
        raise NoBuilderError("no active NetBuilder: ops can only be recorded inside a Task or NetBuilder",
                             user_location(2), "wrap the code in `with Task():` or `with NetBuilder():`")
    return nb


def _ordinary_builder(what: str) -> NetBuilder:
    nb = _builder()
    if nb._use_control_ops:
        raise TraceError(f"{what} cannot be used inside ops.IfNet/ops.WhileNet", user_location(2),
                         "use ops.IfNet / ops.WhileNet there")
    return nb


_OfCurrentNet.owner = Operations
ops = Operations()

__all__ = ["NetBuilder", "NoBuilderError", "ops", "StopIf"]
