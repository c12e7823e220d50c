"""Execution steps and plans: trees of nets and steps, as Caffe2's ``core`` builds them, and
their forms as Caffe2's PlanDef and ExecutionStep messages, and back: ``plan.Proto()`` and ``workspace.RunPlan(plan.Proto().SerializeToString())``.

A PlanDef holds every net the plan runs (``network``) and its steps; a step names its
nets and holds its substeps, with the fields Caffe2 gives it (num_iter, should_stop_blob,
only_once, concurrent_substeps, create_workspace, num_concurrent_instances, run_every_ms,
report_net and report_interval)::

    Plan("train") with Step("loop", [net], num_iter=3)
      <=> PlanDef { name: "train"  network { name: "net" ... }
                    execution_step { name: "loop"  network: "net"  num_iter: 3 } }

NetBuilder's blocks (its loops and conditionals, which dslc records as they are) have no
message form here: ``Proto()`` of a plan holding one is a located error.
"""
from __future__ import annotations

from dslc.trace import names
from dslc.trace.blobref import ScopedName
from dslc.ir.core import MAX_NESTING
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.ir.escape import brief
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.net import Net
from dslc.trace.tracing import user_location


class ExecutionStep:
    """A step of an execution plan: nets run in order, or substeps (maybe concurrent).

    ``_items`` holds Nets, ExecutionSteps, and recorded NetBuilder blocks (loops,
    conditionals, stop checks), in program order.
    """

    def __init__(self, name, nets=None, num_iter=None):
        self._name = name or names.unique_step_name()
        self._items: list = []
        self._kind = None  # "nets" or "substeps"
        self._num_iter = None
        self._should_stop_blob = None
        self._only_once = None
        self._concurrent_substeps = None
        self._create_workspace = False
        self._num_concurrent_instances = None
        self._run_every_ms = None
        self._report_net = None
        self._report_interval = None
        self._used = False
        self._loc = user_location()
        if nets is not None:
            for n in (nets if isinstance(nets, (list, tuple)) else [nets]):
                self.AddNet(n)
        if num_iter is not None:
            self.SetIter(num_iter)

    def Name(self) -> str:
        return self._name

    def __repr__(self):
        return f"ExecutionStep({self._name!r})"

    def _check_mutable(self):
        if self._used:
            raise TraceError(f"step {self._name!r} cannot change after it was added to a plan or step",
                             user_location())

    def SetIter(self, num_iter):
        self._check_mutable()
        self._num_iter = int(num_iter)

    def SetShouldStopBlob(self, blob):
        self._check_mutable()
        self._should_stop_blob = str(blob)

    def SetOnlyOnce(self, only_once):
        self._check_mutable()
        self._only_once = bool(only_once)

    def SetConcurrentSubsteps(self, concurrent):
        self._check_mutable()
        self._concurrent_substeps = bool(concurrent)

    def SetCreateWorkspace(self, create):
        self._check_mutable()
        self._create_workspace = bool(create)

    def SetNumConcurrentInstances(self, n):
        self._check_mutable()
        self._num_concurrent_instances = int(n)

    def RunEveryMillis(self, interval):
        self._run_every_ms = int(interval)

    def SetReportNet(self, report_net, report_interval):
        self._check_mutable()
        self._report_net = report_net
        self._report_interval = report_interval

    def AddNet(self, net):
        self._check_mutable()
        if self._kind == "substeps":
            raise TraceError(f"step {self._name!r} has substeps; it cannot also have nets", user_location())
        if not isinstance(net, Net):
            raise TraceError(f"AddNet needs a Net, got {type(net).__name__}", user_location())
        self._kind = "nets"
        self._items.append(net)
        return self

    def AddSubstep(self, substep):
        self._check_mutable()
        if self._kind == "nets":
            raise TraceError(f"step {self._name!r} has nets; it cannot also have substeps", user_location())
        if isinstance(substep, ExecutionStep):
            if substep.is_empty():
                return self  # Caffe2 drops empty substeps silently
            substep._used = True
        self._kind = "substeps"
        self._items.append(substep)
        return self

    def _add_item(self, item):
        """Append a recorded builder block (loop, conditional, stop check)."""
        self._kind = self._kind or "substeps"
        self._items.append(item)

    def is_empty(self) -> bool:
        return not self._items

    def HasNets(self):
        return self._kind == "nets"

    def HasSubsteps(self):
        return self._kind == "substeps"

    def Nets(self):
        return [i for i in self._items if isinstance(i, Net)]

    def Substeps(self):
        return [i for i in self._items if not isinstance(i, Net)]

    def Proto(self):
        """This step as Caffe2's ExecutionStep message (nets by name; the end of this module)."""
        return step_message(self)

    def get_all_attributes(self, key):
        return self.attributes_by_key((key,))[key]

    def attributes_by_key(self, keys) -> dict:
        """{key: ``get_all_attributes(key)``} for each of ``keys``, in one walk of the nets
        (a task asks for several keys, and its step may hold many thousand nets)."""
        found = {k: [] for k in keys}
        for net in iter_nets(self):
            attrs = net._attributes
            if attrs:  # most nets have none
                for k in keys:
                    objs = attrs.get(k)
                    if objs:
                        found[k] += objs
        return found


def iter_nets(item):
    """Every Net reachable from a step, builder block or net, in program order.

    Walked with a stack (nested generators cost a step per level for every net).
    """
    stack = [item]
    while stack:
        it = stack.pop()
        if isinstance(it, Net):
            yield it
            continue
        parts = getattr(it, "_items", None) or getattr(it, "_children", None) or getattr(it, "_steps", None) or ()
        extra_regions = getattr(it, "_extra_regions", None)  # If/While blocks only
        if extra_regions is not None:
            parts = list(parts) + list(extra_regions())
        stack.extend(reversed(parts))


def execution_step(default_name, steps_or_nets, num_iter=None, report_net=None, report_interval=None,
                   concurrent_substeps=None, should_stop_blob=None, only_once=None,
                   num_concurrent_instances=None, create_workspace=False, run_every_ms=None):
    """Make a step: a Net or list of Nets becomes a net step, anything else substeps."""
    loc = user_location()
    if num_iter is not None and should_stop_blob is not None:
        raise TraceError("execution_step takes num_iter or should_stop_blob, not both", loc)
    step = ExecutionStep(default_name)
    if should_stop_blob is not None:
        step.SetShouldStopBlob(should_stop_blob)
    elif num_iter is not None:
        step.SetIter(num_iter)
    if only_once is not None:
        step.SetOnlyOnce(only_once)
    if concurrent_substeps is not None:
        step.SetConcurrentSubsteps(concurrent_substeps)
    if num_concurrent_instances is not None:
        step.SetNumConcurrentInstances(num_concurrent_instances)
    if create_workspace:
        step.SetCreateWorkspace(True)
    if report_net is not None:
        step.SetReportNet(report_net, report_interval)
    if run_every_ms:
        step.RunEveryMillis(run_every_ms)
    if isinstance(steps_or_nets, ExecutionStep):
        step.AddSubstep(steps_or_nets)
    elif isinstance(steps_or_nets, Net):
        step.AddNet(steps_or_nets)
    elif isinstance(steps_or_nets, (list, tuple)):
        if steps_or_nets and all(isinstance(x, Net) for x in steps_or_nets):
            for n in steps_or_nets:
                step.AddNet(n)
        else:
            for x in steps_or_nets:
                step.AddSubstep(to_execution_step(x))
    elif steps_or_nets is not None:
        step.AddSubstep(to_execution_step(steps_or_nets))
    return step


def scoped_execution_step(name, *args, **kwargs):
    return execution_step(ScopedName(name) if name else name, *args, **kwargs)


def to_execution_step(step_or_nets, default_name=None):
    """A step from a step (as is), a NetBuilder (its recorded children), a Net or a list."""
    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    if callable(getattr(type(step_or_nets), "as_step", None)):  # a NetBuilder (builder_base.py)
        return step_or_nets.as_step(default_name)
    if getattr(step_or_nets, "_is_block", False):
        step = ExecutionStep(default_name)
        step._add_item(step_or_nets)
        return step
    name = default_name or getattr(step_or_nets, "name", None)
    if isinstance(name, str) or name is None:
        return execution_step(name, step_or_nets)
    return execution_step(default_name, step_or_nets)


class Plan:
    """An ordered list of top-level steps (what ``workspace.RunPlan`` runs)."""

    def __init__(self, name_or_step):
        if isinstance(name_or_step, ExecutionStep):
            self._name, self._steps = name_or_step.Name(), [name_or_step]
        else:
            self._name, self._steps = str(name_or_step), []

    def Name(self):
        return self._name

    def AddStep(self, step):
        step = to_execution_step(step)
        if not step.is_empty():
            step._used = True
            self._steps.append(step)

    def Steps(self):
        return list(self._steps)

    def Nets(self):
        seen = {}
        for s in self._steps:
            for n in iter_nets(s):
                seen.setdefault(n.Name(), n)
        return list(seen.values())

    def AddNets(self, nets):
        pass  # nets are found through the steps

    def Proto(self):
        """This plan as Caffe2's PlanDef message, its nets included (the end of this module)."""
        return plan_message(self)

    @classmethod
    def create_from_proto(cls, plan_proto):
        """The Plan a PlanDef message describes, its nets rebuilt from the message's NetDefs
        (``Plan.create_from_proto(plan.Proto())`` rebuilds ``plan``)."""
        if not isinstance(plan_proto, caffe2_pb2.PlanDef):
            raise TypeError(f"Plan.create_from_proto takes a caffe2_pb2.PlanDef, not {type(plan_proto).__name__}")
        return plan_from_message(plan_proto)


# ----------------------------------------------------------------------------- PlanDef messages

class PlanProtoError(DSLError, ValueError):
    """A plan with no PlanDef form, or a PlanDef that names a net it does not hold."""


def plan_message(plan) -> caffe2_pb2.PlanDef:
    msg = caffe2_pb2.PlanDef(name=plan.Name())
    nets: dict = {}
    for step in plan.Steps():
        msg.execution_step.add().CopyFrom(_step_message(step, nets))
    for net in nets.values():
        msg.network.add().CopyFrom(net.Proto())
    return msg


def step_message(step) -> caffe2_pb2.ExecutionStep:
    return _step_message(step, {})


def _step_message(step, nets: dict) -> caffe2_pb2.ExecutionStep:
    msg = caffe2_pb2.ExecutionStep(name=str(step.Name()))
    for item in step._items:
        if isinstance(item, Net):
            nets.setdefault(item.Name(), item)
            msg.network.append(item.Name())
        elif isinstance(item, ExecutionStep):
            msg.substep.add().CopyFrom(_step_message(item, nets))
        else:
            raise PlanProtoError(f"step {step.Name()!r} holds a NetBuilder block ({type(item).__name__}), which has "
                                 "no PlanDef form in dslc", user_location(),
                                 "run the plan directly (workspace.RunPlan(plan), session.run(plan))")
    for field, value in (("num_iter", step._num_iter), ("should_stop_blob", step._should_stop_blob),
                         ("only_once", step._only_once), ("concurrent_substeps", step._concurrent_substeps),
                         ("num_concurrent_instances", step._num_concurrent_instances),
                         ("run_every_ms", step._run_every_ms), ("report_interval", step._report_interval)):
        if value is not None:
            setattr(msg, field, value)
    if step._create_workspace:
        msg.create_workspace = True
    if step._report_net is not None:
        nets.setdefault(step._report_net.Name(), step._report_net)
        msg.report_net = step._report_net.Name()
    return msg


def plan_from_message(msg: caffe2_pb2.PlanDef):
    """The Plan a PlanDef message describes (its nets rebuilt from their NetDefs)."""
    nets = {n.name: Net(n) for n in msg.network}
    plan = Plan(msg.name or "plan")
    for step in msg.execution_step:
        plan.AddStep(_step_from_message(step, nets, msg.name))
    return plan


def _step_from_message(msg, nets: dict, plan_name: str, depth: int = 0):
    if depth >= MAX_NESTING:  # (a message from a file may nest its steps without end)
        raise PlanProtoError(f"the steps of plan {brief(plan_name)!r} nest more than {MAX_NESTING} deep",
                             user_location(), "flatten the plan: no job nests its steps this deep")
    if msg.HasField("criteria_network"):
        raise PlanProtoError(f"step {msg.name!r} of plan {plan_name!r} has a criteria_network, which Caffe2 "
                             "itself no longer runs", user_location(), "use should_stop_blob instead")
    step = ExecutionStep(msg.name)
    for name in msg.network:
        net = nets.get(name)
        if net is None:
            raise PlanProtoError(f"step {msg.name!r} of plan {plan_name!r} runs net {name!r}, which the plan "
                                 "does not hold", user_location(), "add the net to the PlanDef's network list")
        step.AddNet(net)
    for sub in msg.substep:
        step.AddSubstep(_step_from_message(sub, nets, plan_name, depth + 1))
    if msg.HasField("num_iter"):
        step.SetIter(msg.num_iter)
    if msg.HasField("should_stop_blob"):
        step.SetShouldStopBlob(msg.should_stop_blob)
    if msg.HasField("only_once"):
        step.SetOnlyOnce(msg.only_once)
    if msg.HasField("concurrent_substeps"):
        step.SetConcurrentSubsteps(msg.concurrent_substeps)
    if msg.HasField("create_workspace") and msg.create_workspace:
        step.SetCreateWorkspace(True)
    if msg.HasField("num_concurrent_instances"):
        step.SetNumConcurrentInstances(msg.num_concurrent_instances)
    if msg.HasField("run_every_ms"):
        step.RunEveryMillis(msg.run_every_ms)
    if msg.HasField("report_net"):
        report = nets.get(msg.report_net)
        if report is None:
            raise PlanProtoError(f"step {msg.name!r} reports with net {msg.report_net!r}, which the plan does not "
                                 "hold", user_location(), "add the net to the PlanDef's network list")
        step.SetReportNet(report, msg.report_interval if msg.HasField("report_interval") else 0)
    return step
