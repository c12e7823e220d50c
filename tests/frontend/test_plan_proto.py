"""Plans as Caffe2's PlanDef messages and back (dslc/trace/steps.py): the fields by hand,
and a plan run from its serialized bytes doing what the plan does."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.net_builder import NetBuilder, ops
from dslc.trace.steps import PlanProtoError
from dslc.proto import caffe2_pb2


@pytest.fixture(autouse=True)
def _fresh():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _plan():
    init = core.Net("init")
    init.ConstantFill([], "x", shape=[1], value=0.0)
    init.ConstantFill([], "one", shape=[1], value=1.0)
    add = core.Net("add")
    add.Add(["x", "one"], "x")
    report = core.Net("report")
    report.Copy("x", "seen")
    loop = core.ExecutionStep("loop", add, num_iter=3)
    loop.SetReportNet(report, 1)
    plan = core.Plan("train")
    plan.AddStep(core.ExecutionStep("init", init))
    plan.AddStep(core.execution_step("outer", [loop]))
    return plan


def test_a_plan_as_a_plandef():
    msg = _plan().Proto()
    assert isinstance(msg, caffe2_pb2.PlanDef) and msg.name == "train"
    assert sorted(n.name for n in msg.network) == ["add", "init", "report"]
    init, outer = msg.execution_step
    assert (init.name, list(init.network)) == ("init", ["init"])
    (loop,) = outer.substep
    assert (loop.name, list(loop.network), loop.num_iter) == ("loop", ["add"], 3)
    assert (loop.report_net, loop.report_interval) == ("report", 1)
    assert not outer.HasField("num_iter")


def test_running_the_serialized_plan_does_what_the_plan_does():
    assert workspace.RunPlan(_plan().Proto().SerializeToString())
    assert workspace.FetchBlob("x").tolist() == [3.0]  # (0 + 1, three times)
    workspace.ResetWorkspace()
    assert workspace.RunPlan(_plan().Proto())
    assert workspace.FetchBlob("x").tolist() == [3.0]


def test_a_step_naming_a_net_the_plan_lacks_is_refused():
    msg = caffe2_pb2.PlanDef(name="p")
    msg.execution_step.add(name="s", network=["missing"])
    with pytest.raises(PlanProtoError, match="'missing'") as err:
        workspace.RunPlan(msg.SerializeToString())
    assert "test_plan_proto.py" in str(err.value)


def test_a_netbuilder_block_has_no_plandef_form_here():
    with NetBuilder() as nb:
        with ops.loop(2):
            ops.Const(np.int32(1))
    plan = core.Plan("blocks")
    plan.AddStep(core.to_execution_step(nb))
    with pytest.raises(PlanProtoError, match="NetBuilder block"):
        plan.Proto()
