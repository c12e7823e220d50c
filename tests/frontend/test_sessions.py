"""Sessions and workspaces (spec 3.3-3.9, 4, 7.3): where blobs live, outputs, caching, lifetime.

Expected values are worked out by hand in each test's comments.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.core import BlobReference, Net
from dslc.ir.diagnostics import DSLError
from dslc.net_builder import NetBuilder, ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, WorkspaceType, final_output

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


def _value(session, name):
    return session.workspace.fetch(name)


def _init_globals(session, **values):
    """Run a GLOBAL task that creates int64 blobs ``name = value`` in the root."""
    with Task() as task:
        for name, v in values.items():
            ops.Const(v, blob_out=name)
    session.run(task)


# ----------------------------------------------------------------------------- GLOBAL vs PRIVATE


def test_blobs_of_a_run_task_persist_across_runs(session):
    _init_globals(session, acc=0)
    with Task() as bump:
        ops.Add(["acc", ops.Const(5)], ["acc"])
        ops.Const(1, blob_out="made_by_bump")
    session.run(bump)
    session.run(bump)
    assert int(_value(session, "acc")) == 10  # 0 + 5 + 5
    assert session.workspace.has_blob("made_by_bump")


def test_user_task_group_is_private_new_blobs_vanish_existing_are_updated(session):
    _init_globals(session, acc=1)
    with TaskGroup() as group:
        with Task():
            ops.Add(["acc", ops.Const(2)], ["acc"])
            ops.Const(9, blob_out="scratch")
    session.run(group)
    assert group.workspace_type() == WorkspaceType.PRIVATE
    assert int(_value(session, "acc")) == 3  # 1 + 2, written through to the root
    assert not session.workspace.has_blob("scratch")
    session.run(group)
    assert int(_value(session, "acc")) == 5


def test_private_task_outputs_are_fetchable(session):
    with TaskGroup() as group:
        with Task():
            out = final_output(ops.Add([ops.Const(20), ops.Const(22)]))
    session.run(group)
    assert out.fetch() == 42


def test_global_task_group_keeps_new_blobs(session):
    with TaskGroup(WorkspaceType.GLOBAL) as group:
        with Task():
            ops.Const(4, blob_out="kept")
    session.run(group)
    assert int(_value(session, "kept")) == 4


def test_run_with_private_workspace_type(session):
    with Task() as task:
        ops.Const(3, blob_out="private_blob")
        out = final_output(ops.Const(4))
    session.run(task, workspace_type=WorkspaceType.PRIVATE)
    assert out.fetch() == 4
    assert not session.workspace.has_blob("private_blob")


def test_mixing_global_and_private_tasks_raises(session):
    with TaskGroup() as group:
        Task(step=Net("a"), workspace_type=WorkspaceType.GLOBAL)
        Task(step=Net("b"), workspace_type=WorkspaceType.PRIVATE)
    with pytest.raises(DSLError) as info:
        session.run(group)
    assert isinstance(info.value, AssertionError)  # (Caffe2's TaskGroup asserts)
    assert "global" in info.value.message and "private" in info.value.message
    assert info.value.hint and _located_here(info.value)


def test_task_type_must_match_a_typed_group():
    with TaskGroup(WorkspaceType.PRIVATE) as group:
        Task(step=Net("a"), workspace_type=WorkspaceType.GLOBAL)
    with pytest.raises(DSLError):
        group.tasks()


def test_tasks_of_a_group_run_in_sibling_workspaces(session):
    # Both private tasks write "tmp"; neither sees the other's, and neither survives.
    with TaskGroup() as group:
        with Task():
            ops.Const(1, blob_out="tmp")
            a = final_output(ops.Add(["tmp", ops.Const(10)]))
        with Task():
            ops.Const(2, blob_out="tmp")
            b = final_output(ops.Add(["tmp", ops.Const(10)]))
    session.run(group)
    assert (a.fetch(), b.fetch()) == (11, 12)
    assert not session.workspace.has_blob("tmp")


# ----------------------------------------------------------------------------- num_instances


def test_instances_share_task_init_blobs(session):
    # 4 instances, each counts up the init-created counter 3 times: 12.
    with Task(num_instances=4) as task:
        with ops.task_init():
            counter = ops.CreateCounter([], ["shared_counter"])
        with ops.loop(3):
            ops.CountUp(counter)
        with ops.task_exit():
            total = final_output(ops.RetrieveCount(counter))
    session.run(task)
    assert total.fetch() == 12


def test_body_blobs_are_per_instance(session):
    # Each instance makes its own counter in the body and counts it to 5. If the
    # counter were shared, one instance's CreateCounter would reset another's count.
    with Task(num_instances=6) as task:
        with ops.task_init():
            done = ops.CreateCounter([], ["done"])
        mine = ops.CreateCounter([], ["mine"])
        with ops.loop(5):
            ops.CountUp(mine)
        with ops.If(ops.EQ([ops.RetrieveCount(mine), ops.Const(5)])):
            ops.CountUp(done)
        ops.Const(1, blob_out="body_only")
        with ops.task_exit():
            total = final_output(ops.RetrieveCount(done))
    session.run(task)
    assert total.fetch() == 6
    # The task is GLOBAL, yet body blobs lived in instance workspaces only.
    assert not session.workspace.has_blob("body_only")
    assert not session.workspace.has_blob("mine")
    assert session.workspace.has_blob("done")


def test_blob_mentioned_only_in_task_exit_is_shared(session):
    # Task exit is bound before the instances start, so "last" exists in the task
    # workspace and every instance writes that one cell; exit reads 7.
    with Task(num_instances=3) as task:
        ops.Const(7, blob_out="last")
        with ops.task_exit():
            seen = final_output(ops.Copy(["last"], ["seen"]))
    session.run(task)
    assert seen.fetch() == 7
    assert int(_value(session, "last")) == 7


def test_output_written_by_instances_of_a_private_task_reaches_the_root(session):
    # Outputs are pre-created in the root, so the instances' writes resolve there.
    with TaskGroup() as group:
        with Task(num_instances=3):
            out = final_output(ops.Const(5, blob_out="inst_out"))
    session.run(group)
    assert out.fetch() == 5
    assert session.workspace.names() == ["inst_out"]


def test_single_instance_body_blobs_live_in_the_task_workspace(session):
    for n in (None, 1):  # 0 runs once in Caffe2; dslc refuses it (docs/differences.md)
        with Task(num_instances=n) as task:
            ops.Const(3, blob_out=f"body_{n}")
        session.run(task)
        assert int(_value(session, f"body_{n}")) == 3


# ----------------------------------------------------------------------------- outputs


def test_scalar_output_is_a_zero_d_array(session):
    with Task() as task:
        out = final_output(ops.Add([ops.Const(2), ops.Const(3)]))
    session.run(task)
    got = out.fetch()
    assert isinstance(got, np.ndarray) and got.shape == () and got == 5


def test_list_output_fetches_a_list(session):
    with Task() as task:
        out = final_output([ops.Const(4), ops.Const([1, 2])])
    session.run(task)
    first, second = out.fetch()
    assert first == 4 and second.tolist() == [1, 2]


def test_output_get_names_the_root_blob(session):
    with Task() as task:
        blob = ops.Const(1)
        out = final_output(blob)
    session.run(task)
    got = out.get()
    assert isinstance(got, BlobReference) and got == str(blob)


def test_fetch_before_run_is_a_clear_error():
    with Task():
        out = final_output(ops.Const(4))
    with pytest.raises(DSLError) as info:
        out.fetch()
    assert "run" in info.value.hint and _located_here(info.value)
    with pytest.raises(DSLError):
        out.get()


def test_add_output_after_the_task_ran_raises(session):
    with Task() as task:
        x = ops.Const(1)
    session.run(task)
    with pytest.raises(DSLError):
        task.add_output(x)


def test_final_output_outside_a_task_makes_a_stepless_task_in_the_group(session):
    with TaskGroup() as group:
        with Task() as writer:
            made = ops.Const(5)
        out = final_output(made)
    tasks = group.tasks()
    assert len(tasks) == 2 and tasks[0] is writer
    assert tasks[1].name == "local/task:1" and tasks[1].get_step().phases.body is None
    session.run(group)
    # The output is pre-created in the root, so the private writer's value lands there.
    assert out.fetch() == 5


def test_final_output_outside_any_group_makes_a_lone_task():
    out = final_output(BlobReference("x"))
    assert out.names == ["x"]


# ----------------------------------------------------------------------------- caching, runnables


class _CountingCompiles:
    """Wraps a backend's compile to count how often a module is compiled."""

    def __init__(self, backend):
        self.count = 0
        self._inner = backend.compile
        backend.compile = self

    def __call__(self, module):
        self.count += 1
        return self._inner(module)


def test_running_the_same_task_twice_reuses_the_compile(session):
    _init_globals(session, acc=0)
    compiles = _CountingCompiles(session.backend)
    with Task() as task:
        ops.Add(["acc", ops.Const(3)], ["acc"])
    session.run(task)
    session.run(task)
    session.run(task)
    assert compiles.count == 1
    assert int(_value(session, "acc")) == 9  # GLOBAL: 3 per run


def test_running_the_same_net_twice_reuses_the_compile(session):
    _init_globals(session, acc=1)
    compiles = _CountingCompiles(session.backend)
    net = Net("double")
    net.Add(["acc", "acc"], ["acc"])
    session.run(net)
    session.run(net)
    assert compiles.count == 1
    assert int(_value(session, "acc")) == 4  # 1 -> 2 -> 4


def test_a_net_run_again_after_the_workspace_is_reset_writes_its_new_blobs(session):
    # A rerun reuses the cells its first run resolved; a reset workspace has new ones:
    # the second run must write there (1 + 1 = 2, readable), not into the dropped cells.
    net = Net("twice")
    net.Add([net.Const(1), net.Const(1)], ["two"])
    session.run(net)
    session.run(net)
    session.workspace.reset()
    assert not session.workspace.has_blob("two")
    session.run(net)
    assert int(_value(session, "two")) == 2


def test_compile_accepts_a_runnable_and_returns_the_cached_plan(session):
    with Task() as task:
        ops.Const(1, blob_out="c")
    first = session.compile(task)
    assert session.compile(task) is first
    assert session.compile(session.as_group(task)) is first


def test_run_execution_step_with_num_iter(session):
    _init_globals(session, acc=0)
    net = Net("inc")
    net.Add(["acc", net.Const(2)], ["acc"])
    session.run(core.execution_step("three_times", net, num_iter=3))
    assert int(_value(session, "acc")) == 6


def test_run_plan(session):
    _init_globals(session, a=0, b=0)
    net_a, net_b = Net("pa"), Net("pb")
    net_a.Add(["a", net_a.Const(1)], ["a"])
    net_b.Add(["b", "a"], ["b"])
    plan = core.Plan("plan")
    plan.AddStep(core.execution_step("first", net_a, num_iter=4))
    plan.AddStep(core.execution_step("second", net_b))
    session.run(plan)
    assert (int(_value(session, "a")), int(_value(session, "b"))) == (4, 4)


def test_run_net_builder_through_to_execution_step(session):
    with NetBuilder() as nb:
        x = ops.Const(6)
        y = ops.Mul([x, ops.Const(7)])
    session.run(core.to_execution_step(nb))
    assert int(_value(session, str(y))) == 42


def test_running_a_list_is_an_error(session):
    with pytest.raises(DSLError) as info:
        session.run([Net("a")])
    assert info.value.hint and _located_here(info.value)


# ----------------------------------------------------------------------------- fed blobs


def test_fed_blob_is_read_by_a_task(session):
    workspace.FeedBlob("fed", np.array([1.0, 2.0], dtype=np.float32))
    with Task() as task:
        out = final_output(ops.Add(["fed", ops.Const([0.5, 0.25])]))
    session.run(task)
    got = out.fetch()
    assert got.dtype == np.float32 and got.tolist() == [1.5, 2.25]


def test_fed_blob_type_is_checked_before_running(session):
    workspace.FeedBlob("fed", np.float32(1.5))
    with Task() as task:
        ops.Const(1, blob_out="marker")
        ops.Add(["fed", ops.Const(2)], ["bad"])  # float32 + int64
    with pytest.raises(DSLError) as info:
        session.run(task)
    assert "f32" in info.value.message and "i64" in info.value.message
    assert not session.workspace.has_blob("marker")  # nothing ran


def test_feeding_a_new_type_recompiles(session):
    with Task() as task:
        out = final_output(ops.Add(["fed", "fed"]))
    workspace.FeedBlob("fed", np.int64(2))
    session.run(task)
    assert out.fetch() == 4 and out.fetch().dtype == np.int64
    workspace.FeedBlob("fed", np.float32(0.25))
    session.run(task)
    assert out.fetch() == 0.5 and out.fetch().dtype == np.float32


def test_blob_that_appears_after_compile_with_another_type_recompiles(session):
    # Compiled while "x" was absent, the task assumed its own int64 type for it.
    with Task() as task:
        ops.Add(["x", ops.Const(1)], ["x"])
    with pytest.raises(DSLError):
        session.run(task)  # x is read before anything wrote it
    workspace.FeedBlob("x", np.float32(1))
    with pytest.raises(DSLError) as info:
        session.run(task)  # float32 + int64: caught by recompiling, not run on a stale plan
    assert "f32" in info.value.message
    workspace.FeedBlob("x", np.int64(1))
    session.run(task)
    assert workspace.FetchBlob("x") == 2


def test_private_write_reaches_a_root_blob_fed_after_the_compile(session):
    # A PRIVATE task's write to a blob the root holds goes to the root; to one it does not
    # hold, it stays private. The real Caffe2 (run side by side): "c" fed between two runs
    # of the same group holds 1 + 1 = 2 after the second. Compiled while "c" was absent,
    # the module dropped that store: feeding "c" must not reuse it.
    workspace.FeedBlob("a", np.float32(1))
    compiles = _CountingCompiles(session.backend)
    with TaskGroup(workspace_type=WorkspaceType.PRIVATE) as group, Task():
        ops.Add(["a", "a"], ["c"])
        final_output(ops.Add(["c", "a"], ["b"]))
    session.run(group)
    session.run(group)  # (its output, made in the root by the first run, changes nothing)
    assert not workspace.HasBlob("c") and compiles.count == 1
    workspace.FeedBlob("c", np.float32(0))
    session.run(group)
    assert workspace.FetchBlob("c") == 2 and compiles.count == 2


def test_private_write_reaches_a_root_blob_created_empty(session):
    # CreateBlob makes a blob that exists without a value; a PRIVATE task's write reaches it
    # (the real Caffe2, run side by side: [1, 1, 1] + [1, 1, 1] = [2, 2, 2]).
    workspace.FeedBlob("a", np.ones(3, np.float32))
    workspace.CreateBlob("c")
    with TaskGroup(workspace_type=WorkspaceType.PRIVATE) as group, Task():
        ops.Add(["a", "a"], ["c"])
        final_output(ops.Add(["c", "a"], ["b"]))
    session.run(group)
    assert workspace.FetchBlob("c").tolist() == [2, 2, 2]


def test_fetch_blob_reads_what_a_task_wrote(session):
    with Task() as task:
        ops.Const(8, blob_out="written")
    session.run(task)
    assert workspace.FetchBlob("written") == 8
    assert workspace.HasBlob("written") and "written" in workspace.Blobs()


def test_fetch_blob_of_an_unknown_name_is_a_clear_error():
    with pytest.raises(DSLError) as info:
        workspace.FetchBlob("nope")
    assert info.value.hint and _located_here(info.value)


def test_python_op_sees_the_session_root_as_current_workspace(backend):
    seen = []
    root = workspace.C.Workspace()
    root.feed("x", np.int64(11))

    def op(inputs, outputs):
        seen.append(int(workspace.FetchBlob("x")))

    with Task() as task:
        ops.Python(op)([], [])
    with LocalSession(root, backend=backend) as s:
        s.run(task)
    assert seen == [11]
    assert not workspace.HasBlob("x")  # the global workspace is current again


# ----------------------------------------------------------------------------- groups and lifetime


def test_task_group_add_after_use_raises(session):
    with TaskGroup() as group:
        Task(step=Net("a"))
    session.run(group)
    with pytest.raises(DSLError) as info:
        group.add(Task(step=Net("b")))
    assert info.value.hint and _located_here(info.value)


def test_closed_session_cannot_run(backend):
    s = LocalSession(backend=backend)
    s.close()
    s.close()  # idempotent
    assert not s.is_open()
    with pytest.raises(DSLError) as info:
        s.run(Task())
    assert info.value.hint and _located_here(info.value)


def test_context_manager_closes_only_without_exception(backend):
    with LocalSession(backend=backend) as clean:
        pass
    assert not clean.is_open()
    with pytest.raises(ValueError):
        with LocalSession(backend=backend) as failed:
            raise ValueError("boom")
    assert failed.is_open()


def test_sessions_share_the_root_workspace_by_default(backend):
    with LocalSession(backend=backend) as first:
        _init_globals(first, shared=3)
    with LocalSession(backend=backend) as second:
        assert int(second.workspace.fetch("shared")) == 3


def test_get_all_blob_names_in_a_global_task_lists_root_blobs(session):
    # Spec 7.3: the root holds the earlier blob, this task's own blobs, and its
    # pre-created output (the names blob itself) when the op runs.
    _init_globals(session, earlier=1)
    with Task() as task:
        ops.Const(2, blob_out="own")
        listed = ops.GetAllBlobNames([], ["blob_names"], include_shared=False)
        out = final_output(listed)
    session.run(task)
    got = {name.decode() for name in out.fetch().tolist()}  # (bytes, as Caffe2 fetches strings)
    assert {"earlier", "own", "blob_names"} <= got
    assert got == set(session.workspace.names())
