"""dslc.net_printer (issue 15): plans as text, blob-definition analysis, logging nets."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, net_printer, workspace
from dslc.checkpoint import Job
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, WorkspaceType

HERE = __file__.rsplit("/", 1)[-1]


def _job():
    with Job() as job:
        with job.init_group, Task(workspace_type=WorkspaceType.GLOBAL):
            ops.Const(5, blob_out="w")
        with Task():
            ops.Add(["w", ops.Const(1)], ["w_plus"])
    return job


def test_to_string_shows_each_group_of_a_job():
    text = net_printer.to_string(_job())
    assert text.count("plan:") == 2  # the init group and the epoch group
    assert "w = 5" in text and "w_plus = Add(w, 1)" in text


def test_analyze_accepts_reads_after_definitions():
    net_printer.analyze(_job())  # w is made by the init group before the epoch reads it


def test_analyze_reports_the_first_undefined_blob_at_its_line():
    job = _job()
    with job:
        with Task():
            ops.Add(["nowhere", "w"], ["x"])  # @undefined
    with pytest.raises(AssertionError) as e:
        net_printer.analyze(job)
    assert str(e.value) == "Blob undefined: nowhere"
    line = [i for i, t in enumerate(open(__file__).read().splitlines(), 1) if t.endswith("# @undefined")][0]
    assert e.value.loc.file.endswith(HERE) and e.value.loc.line == line
    assert "define it earlier" in e.value.one_line()


def test_analyze_reports_a_blob_two_concurrent_global_tasks_create():
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as tg:
        with Task():
            ops.Const(1, blob_out="both")
        with Task():
            ops.Const(2, blob_out="both")
    with pytest.raises(AssertionError) as e:
        net_printer.analyze(tg)
    assert "multiple parallel steps: both" in str(e.value)


def test_analyze_lets_private_tasks_make_the_same_blob():
    with TaskGroup() as tg:
        with Task():
            ops.Const(1, blob_out="mine")
        with Task():
            ops.Const(2, blob_out="mine")
    net_printer.analyze(tg)


def test_analyze_refuses_a_task_whose_workspace_type_differs_from_its_group():
    # As in Caffe2, the mismatch surfaces when the group's tasks are first read (here by
    # analyze) as an AssertionError; dslc's also names the task's line and says what to do.
    job = _job()
    with job:
        with Task(workspace_type=WorkspaceType.GLOBAL):  # @global-in-private
            ops.Const(1, blob_out="g")
    with pytest.raises(AssertionError) as e:
        net_printer.analyze(job)
    line = [i for i, t in enumerate(open(__file__).read().splitlines(), 1)
            if t.endswith("# @global-in-private")][0]
    assert e.value.loc.file.endswith(HERE) and e.value.loc.line == line
    assert "same workspace_type" in e.value.one_line()


def test_debug_net_logs_each_op_then_runs_it(backend, capsys):
    net = core.Net("dbg")
    net.ConstantFill([], ["a"], shape=[2], value=1.5)
    net.Add(["a", "a"], ["b"])
    logged = net_printer.debug_net(net)
    assert [op.type for op in logged._ops if op.type != "GivenTensorStringFill"] == \
        ["Print", "ConstantFill", "Print", "Add"]
    ws = workspace.C.Workspace()
    ws.run(logged, backend=backend)
    np.testing.assert_array_equal(ws.blobs["b"].fetch(), [3.0, 3.0])
    out = capsys.readouterr()
    said = out.out + out.err
    assert "a = ConstantFill(shape=[2], value=1.5)" in said and "b = Add(a, a)" in said
