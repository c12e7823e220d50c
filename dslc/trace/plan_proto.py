"""Plans and execution steps as Caffe2's PlanDef and ExecutionStep messages, and back:
``plan.Proto()`` and ``workspace.RunPlan(plan.Proto().SerializeToString())``.

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

from dslc.ir.core import MAX_NESTING
from dslc.ir.diagnostics import DSLError
from dslc.ir.escape import brief
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location


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
    from dslc.trace.net import Net
    from dslc.trace.steps import ExecutionStep
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
    from dslc import core
    from dslc.trace.steps import Plan
    nets = {n.name: core.Net(n) for n in msg.network}
    plan = Plan(msg.name or "plan")
    for step in msg.execution_step:
        plan.AddStep(_step_from_message(step, nets, msg.name))
    return plan


def _step_from_message(msg, nets: dict, plan_name: str, depth: int = 0):
    from dslc.trace.steps import ExecutionStep
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
