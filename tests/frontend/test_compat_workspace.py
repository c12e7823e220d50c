"""Caffe2's workspace API (issue 15): ``ws.blobs[name].fetch()/.feed()``, the module-level
workspace functions, the read-only proto views and the default backend.

Expected values are worked out by hand in each test's comments.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession
from dslc.test_util import TestCase

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


# ----------------------------------------------------------------------------- ws.blobs


def test_blobs_fetch_reads_what_a_session_run_wrote(backend):
    ws = workspace.C.Workspace()
    net = core.Net("fill")
    net.ConstantFill([], ["x"], shape=[2, 2], value=1.5)
    net.Add(["x", "x"], ["y"])
    LocalSession(ws, backend=backend).run(net)
    np.testing.assert_array_equal(ws.blobs["y"].fetch(), np.full((2, 2), 3.0))  # 1.5 + 1.5
    assert "x" in ws.blobs and "nothing" not in ws.blobs


def test_blobs_feed_then_a_net_reads_it(backend):
    ws = workspace.C.Workspace()
    ws.create_blob("a").feed(np.array([1.0, 2.0, 4.0], dtype=np.float32))
    net = core.Net("double")
    net.Add(["a", "a"], ["b"])
    session = LocalSession(ws, backend=backend)
    session.run(net)
    np.testing.assert_array_equal(ws.blobs["b"].fetch(), [2.0, 4.0, 8.0])
    ws.blobs["a"].feed(np.array([0.5, 0.5, 0.5], dtype=np.float32))  # feed through the existing blob
    session.run(net)
    np.testing.assert_array_equal(session.workspace.blobs["b"].fetch(), [1.0, 1.0, 1.0])


def test_blobs_of_the_current_workspace_fetch_a_scalar_as_a_0d_array(backend):
    net = core.Net("scalar")
    net.ConstantFill([], ["s"], shape=[], value=7, dtype=core.DataType.INT64)
    LocalSession(backend=backend).run(net)
    got = workspace.current().blobs["s"].fetch()
    assert isinstance(got, np.ndarray) and got.shape == () and got == 7


def test_fetch_of_a_blob_never_written_is_a_located_error():
    ws = workspace.C.Workspace()
    blob = ws.create_blob("empty")
    with pytest.raises(DSLError) as e:
        blob.fetch()
    assert "no value" in str(e.value) and _located_here(e.value)


def test_test_util_testcase_starts_with_an_empty_workspace():
    workspace.FeedBlob("left_over", np.array([1]))

    class T(TestCase):
        def test_it(self):
            assert not workspace.HasBlob("left_over")
            assert len(self.ws.blobs) == 0

    result = T("test_it").run()
    assert result.wasSuccessful(), result.failures + result.errors


# ----------------------------------------------------------------------------- workspace functions


def _counter_net(name="count"):
    """x <- x + 1.0 on a float32 [2] blob x."""
    net = core.Net(name)
    net.Add(["x", net.Const(np.array([1.0, 1.0], dtype=np.float32))], ["x"])  # @counter-add
    return net


_COUNTER_LINE = [i for i, t in enumerate(open(__file__).read().splitlines(), 1) if t.endswith("# @counter-add")][0]


def test_str_of_a_net_is_its_name_and_runs_it_by_name(backend, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    net = _counter_net()
    assert str(net) == net.Name() == "count"
    workspace.FeedBlob("x", np.zeros(2, dtype=np.float32))
    assert workspace.CreateNet(net) is True
    assert workspace.RunNet(str(net)) is True
    assert workspace.RunNet(net, num_iter=3) is True
    np.testing.assert_array_equal(workspace.FetchBlob("x"), [4.0, 4.0])  # 0 + 1 + 3 * 1


def test_run_net_once_and_run_plan_make_no_task_output_blob(backend, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    net = core.Net("fill")
    net.ConstantFill([], ["a"], shape=[3], value=2.0)
    assert workspace.RunNetOnce(net) is True
    assert workspace.Blobs() == ["a"]  # Caffe2 runs the net itself: no ":output" blob beside it
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("twice", _counter_net("inc"), num_iter=2))
    workspace.FeedBlob("x", np.array([0.5, 1.5], dtype=np.float32))
    assert workspace.RunPlan(plan) is True
    np.testing.assert_array_equal(workspace.FetchBlob("x"), [2.5, 3.5])  # + 2 * 1
    assert workspace.HasBlob("a") and not workspace.HasBlob("b")
    assert sorted(workspace.Blobs()) == ["a", "inc/GivenTensorFill:0", "x"]  # the net's Const is a blob too
    assert workspace.ResetWorkspace() is True and workspace.Blobs() == []


def test_module_level_blobs_mapping_reads_and_writes_the_current_workspace():
    workspace.blobs["w"] = np.array([3, 4], dtype=np.int32)
    assert "w" in workspace.blobs and len(workspace.blobs) == 1
    np.testing.assert_array_equal(workspace.FetchBlob("w"), [3, 4])
    np.testing.assert_array_equal(workspace.blobs["w"], [3, 4])


def test_create_net_with_a_missing_input_is_a_located_error():
    net = _counter_net()
    with pytest.raises(DSLError) as e:
        workspace.CreateNet(net)
    assert "'x'" in str(e.value) and "FeedBlob" in str(e.value) and _located_here(e.value)
    workspace.CreateNet(net, input_blobs=["x"])  # Caffe2 creates listed inputs (empty) first


def test_a_type_error_waits_for_run_net_and_is_located_at_the_op(backend, monkeypatch):
    # Caffe2 creates a net whose operand types do not fit and fails when it runs it; so does
    # dslc, with the op's line. Fed again with the right dtype, the created net runs: [2, 3] + 1.
    monkeypatch.setenv("DSLC_BACKEND", backend)
    ws = workspace.C.Workspace()
    ws.create_blob("x").feed(np.array([1, 2], dtype=np.int64))
    net = _counter_net("typed")  # float32 + int64: no common type
    ws.create_net(net)
    with pytest.raises(DSLError) as e:
        ws.run("typed")
    assert "Add" in str(e.value) and e.value.loc.file.endswith(HERE) and e.value.loc.line == _COUNTER_LINE
    ws.create_blob("x").feed(np.array([2.0, 3.0], dtype=np.float32))
    ws.run("typed")
    np.testing.assert_array_equal(ws.blobs["x"].fetch(), [3.0, 4.0])


def test_run_net_of_a_net_never_created_is_a_located_error():
    with pytest.raises(DSLError) as e:
        workspace.RunNet("never_made")
    assert "CreateNet" in str(e.value) and _located_here(e.value)


def test_a_second_net_of_the_same_name_needs_overwrite():
    workspace.FeedBlob("x", np.zeros(2, dtype=np.float32))
    first, second = _counter_net("same"), core.Net("other")
    second._name = "same"  # (Net() would make the name unique; two Caffe2 NetDefs may share one)
    second.ConstantFill([], ["x"], shape=[2], value=9.0)
    workspace.CreateNet(first)
    with pytest.raises(DSLError) as e:
        workspace.CreateNet(second)
    assert "overwrite=True" in str(e.value) and _located_here(e.value)
    workspace.CreateNet(second, overwrite=True)
    workspace.RunNet("same")
    np.testing.assert_array_equal(workspace.FetchBlob("x"), [9.0, 9.0])


def test_c_workspace_create_net_and_run(backend):
    ws = workspace.C.Workspace()
    net = _counter_net()
    ws.create_blob("x").feed(np.array([1.0, 2.0], dtype=np.float32))
    ws.create_net(net)
    ws.run(net, backend=backend)
    ws.run("count")
    np.testing.assert_array_equal(ws.blobs["x"].fetch(), [3.0, 4.0])  # two runs of + 1


def test_registered_dbs_and_gpu_support():
    from dslc.runtime import blobdb
    dbs = core.C.registered_dbs()
    assert core.C is workspace.C
    assert {"minidb", "dslcdb", "lmdb"} <= set(dbs)
    for name in dbs:
        blobdb.get(name)  # every listed type is one Save/Load accept
    assert workspace.has_gpu_support is False


def test_registered_operators_and_is_operator():
    ops = workspace.RegisteredOperators()
    assert "Add" in ops and "GivenTensorInt64Fill" in ops and "load" not in ops
    assert core.IsOperator("Add") and not core.IsOperator("NoSuchOp")
    assert core.IsOperatorWithEngine("Add", "DEFAULT") and not core.IsOperatorWithEngine("Add", "CUDNN")


# ----------------------------------------------------------------------------- default backend


@pytest.mark.parametrize("name", ["interp", "numba"])
def test_dslc_backend_sets_the_default_of_sessions_and_workspaces(monkeypatch, name):
    monkeypatch.setenv("DSLC_BACKEND", name)
    assert LocalSession().backend.name == name
    assert workspace.C.Workspace().session().backend.name == name
    assert LocalSession(backend="interp").backend.name == "interp"  # a named backend wins


def test_unknown_dslc_backend_is_an_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", "fortran")
    with pytest.raises(DSLError) as e:
        LocalSession()
    assert "fortran" in str(e.value) and "numba" in str(e.value)


def test_fetch_blob_gives_a_copy_the_caller_may_write():
    """As Caffe2's: writing to a fetched array changes neither the workspace nor a constant."""
    net = core.Net("consts")
    net.ConstantFill([], "c", shape=[2, 3], value=1.0)
    workspace.RunNetOnce(net)
    got = workspace.FetchBlob("c")
    got[:] = 2.0
    np.testing.assert_array_equal(workspace.FetchBlob("c"), np.ones((2, 3), np.float32))
    workspace.FeedBlob("c", got)
    np.testing.assert_array_equal(workspace.FetchBlob("c"), np.full((2, 3), 2.0, np.float32))


def test_net_attributes_caffe2_code_reaches_for():
    net = core.Net("scoped")
    with core.NameScope("s"):
        a, b = net.AddScopedExternalInputs("a", "b")
    net.Add([a, b], "c")
    assert [str(a), str(b)] == ["s/a", "s/b"] and list(net.Proto().external_input) == ["s/a", "s/b"]
    assert net._net.op[-1].type == "Add"  # (Caffe2's attribute for the NetDef)


def test_a_created_net_run_again_sees_a_blob_fed_with_another_shape_or_dtype():
    """RunNet reruns the compiled net while the blobs it loads keep their dtype and shape,
    and compiles again when one changes."""
    workspace.FeedBlob("x", np.array([1.0, -2.0], np.float32))
    net = core.Net("again")
    net.Relu(["x"], "y")
    workspace.CreateNet(net)
    workspace.RunNet("again")
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [1.0, 0.0])
    workspace.FeedBlob("x", np.array([-1.0, 3.0], np.float32))  # same type: the same program
    workspace.RunNet("again")
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 3.0])
    workspace.FeedBlob("x", np.array([[2.0, -1.0, 5.0]], np.float64))  # another shape and dtype
    workspace.RunNet("again", 2)
    got = workspace.FetchBlob("y")
    assert got.dtype == np.float64 and got.tolist() == [[2.0, 0.0, 5.0]]


def test_workspace_calls_caffe2_programs_make():
    workspace.FeedBlob("f", np.zeros((2, 3), np.float16))
    assert workspace.GetBlobSizeBytes("f") == 12
    workspace.FeedBlob("s", np.array([b"Hello World!", b"abcd"]))
    workspace.FeedBlob("t", np.array([b"element1", b"element2"]))
    assert workspace.GetBlobSizeBytes("s") - workspace.GetBlobSizeBytes("t") == 16 - 16 + (12 + 4) - (8 + 8)
    plan = core.Plan("bg")
    net = core.Net("bg_net")
    net.ConstantFill([], "made", shape=[2], value=3.0)
    plan.AddStep(core.ExecutionStep("bg_step", net))
    handle = workspace.RunPlanInBackground(plan)
    assert handle.is_succeeded() and handle.is_done()
    np.testing.assert_array_equal(workspace.FetchBlob("made"), [3.0, 3.0])
    assert workspace.SwitchWorkspace("other", True) is None
    workspace.SwitchWorkspace("default")
    ws = workspace.C.Workspace()
    with pytest.raises(TypeError):
        ws.create_net("not a net")
    ws.run(plan)
    assert "bg_net" in ws.nets  # (a plan's nets are made in the workspace that ran it)
