"""Caffe2 naming rules (spec 1.1-1.5, 3.5, 8.2, 8.6): nets, auto blobs, scopes, tasks, reprs.

Every expected name here is spelled out by hand from the spec's rules; programs and
checkpoint tests hard-code such names, so they must come out exactly like this.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc.trace import names
from dslc.core import BlobReference, NameScope, Net
from dslc.ir.diagnostics import DSLError
from dslc.net_builder import NetBuilder, ops
from dslc.task import Cluster, Node, SetupNets, Task, TaskGroup, TaskOutput, WorkspaceType

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    """The error points at this test file (the user's line), not into dslc."""
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


# ----------------------------------------------------------------------------- net names


def test_net_names_are_uniquified_process_wide():
    assert [Net("a").Name() for _ in range(3)] == ["a", "a_1", "a_2"]
    assert Net("b").Name() == "b"
    assert Net("a").Name() == "a_3"


def test_reset_forgets_net_names():
    Net("a")
    names.reset()
    assert Net("a").Name() == "a"


def test_net_name_takes_the_builder_prefix():
    with NetBuilder(name="nb"):
        assert Net("x").Name() == "nb/x"
        assert Net(None).Name() == "nb"
        assert Net(None).Name() == "nb_1"
        with NetBuilder(name="inner"):
            assert Net("x").Name() == "nb/inner/x"
    assert Net("x").Name() == "x"


def test_net_inside_task_is_under_the_task_name():
    with Task():
        assert Net("my_net").Name() == "local/task/my_net"


def test_clone_of_a_net_gets_a_fresh_name():
    base = Net("orig")
    assert Net(base).Name() == "orig_1"
    assert base.Clone("copy").Name() == "copy"


def test_unnamed_loop_body_is_a_new_net_of_the_task_name():
    """An unnamed loop builder shares the task's name, so its nets are local/task_<k>.

    Its first net (local/task_1) holds the count check; the stop check ends that net,
    so the body's first op starts local/task_2.
    """
    with Task():
        before = ops.Add(["a", "b"])
        with ops.loop(2):
            inside = ops.Add(["a", "b"])
    assert str(before) == "local/task/Add"
    assert str(inside) == "local/task_2/Add"


# ----------------------------------------------------------------------------- auto blob names


def test_auto_blob_names_in_a_task():
    with Task():
        first_int = ops.Const(5)
        second_int = ops.Const(6)
        add_1 = ops.Add([first_int, second_int])
        add_2 = ops.Add([first_int, second_int])
        flag = ops.Const(True)
        half = ops.Const(0.5)
    assert str(first_int) == "local/task/GivenTensorInt64Fill:0"
    assert str(second_int) == "local/task/GivenTensorInt64Fill_2:0"
    assert str(add_1) == "local/task/Add"
    assert str(add_2) == "local/task/Add_2"
    assert str(flag) == "local/task/ConstantFill:0"
    assert str(half) == "local/task/GivenTensorFill:0"


def test_auto_name_suffix_keeps_counting():
    net = Net("n")
    outs = [str(net.Add(["a", "b"])) for _ in range(4)]
    assert outs == ["n/Add", "n/Add_2", "n/Add_3", "n/Add_4"]


def test_auto_name_skips_explicitly_taken_names():
    net = Net("n")
    net.Copy(["a"], ["n/Copy"])
    assert str(net.Copy(["a"])) == "n/Copy_2"


def test_int_output_count_gives_output_ids():
    net = Net("n")
    assert net.NextName("Split", 0) == "n/Split:0"
    assert net.NextName("Split", 1) == "n/Split:1"
    net.Copy(["a"], ["n/Split:1"])
    assert net.NextName("Split", 1) == "n/Split_2:1"


def test_next_name_without_prefix_counts_per_net():
    a, b = Net("a"), Net("b")
    assert [a.NextName(), a.NextName(), b.NextName()] == ["a_blob_0", "a_blob_1", "b_blob_0"]


def test_const_picks_the_fill_op_by_numpy_dtype():
    net = Net("n")
    net.Const(True)
    net.Const(5)
    net.Const(np.array(7, dtype=np.int32))
    net.Const(0.5)
    net.Const("hi")
    net.Const([100])
    kinds = [op.type for op in net.ops()]
    assert kinds == ["ConstantFill", "GivenTensorInt64Fill", "GivenTensorIntFill", "GivenTensorFill",
                     "GivenTensorStringFill", "GivenTensorInt64Fill"]
    assert net.ops()[0].args["dtype"] == core.DataType.BOOL == 5
    assert list(net.ops()[-1].args["shape"]) == [1]
    assert list(net.ops()[1].args["shape"]) == []


def test_const_of_other_integer_widths_is_a_float_fill():
    net = Net("n")
    net.Const(np.array([1, 2], dtype=np.uint8))
    net.Const(np.int16(3))
    assert [op.type for op in net.ops()] == ["GivenTensorFill", "GivenTensorFill"]
    assert net.ops()[0].args["values"].dtype == np.float32


def test_const_with_explicit_output_name():
    net = Net("n")
    assert str(net.Const(1, blob_out="one")) == "one"
    with NameScope("s"):
        assert str(net.Const(1, blob_out="one")) == "s/one"


def test_inputs_not_produced_by_the_net_become_external_inputs():
    net = Net("n")
    net.AddExternalInput("ext")
    net.Add(["a", "b"], ["c"])
    net.Add(["c", "d"], ["e"])
    assert [str(b) for b in net.external_inputs] == ["ext", "a", "b", "d"]
    assert net.UsedBlobNames() == {"ext", "a", "b", "c", "d", "e"}


def test_append_net_merges_external_inputs_but_not_attributes():
    src = Net("src")
    src.AddExternalInput("only_declared")
    src.Add(["a", "b"], ["c"])
    src.add_attribute("key", "obj")
    dst = Net("dst")
    dst.Copy(["z"], ["a"])
    dst.AppendNet(src)
    assert [str(b) for b in dst.external_inputs] == ["z", "only_declared", "b"]
    assert [op.type for op in dst.ops()] == ["Copy", "Add"]
    assert dst.get_attributes("key") == []


# ----------------------------------------------------------------------------- NextBlob


def test_next_blob_has_no_net_prefix_and_counts_from_auto_0():
    net = Net("n")
    assert [str(net.NextBlob("p")) for _ in range(3)] == ["p", "p_auto_0", "p_auto_1"]


def test_next_blob_avoids_names_the_net_produces():
    net = Net("n")
    net.Const(1, blob_out="q")
    assert str(net.NextBlob("q")) == "q_auto_0"


def test_next_scoped_blob_uses_the_name_scope():
    net = Net("n")
    with NameScope("s"):
        got = [str(net.NextScopedBlob("r")), str(net.NextScopedBlob("r")), str(net.NextBlob("r"))]
    assert got == ["s/r", "s/r_auto_0", "r"]


def test_next_blob_registry_is_per_net():
    a, b = Net("a"), Net("b")
    assert (str(a.NextBlob("v")), str(b.NextBlob("v"))) == ("v", "v")


# ----------------------------------------------------------------------------- NameScope


def test_name_scope_prefixes_strings_not_references():
    net = Net("n")
    with NameScope("s"):
        out = net.Add(["x", BlobReference("y")], ["z"])
    op = net.ops()[-1]
    assert op.inputs == ("s/x", "y")
    assert op.outputs == ("s/z",)
    assert str(out) == "s/z"


def test_name_scopes_nest_and_reset():
    net = Net("n")
    with NameScope("a"):
        with NameScope("b"):
            nested = net.Copy(["x"], ["y"])
        with NameScope("c", reset=True):
            fresh = net.Copy(["x"], ["y"])
    after = net.Copy(["x"], ["y"])
    assert (str(nested), str(fresh), str(after)) == ("a/b/y", "c/y", "y")


def test_auto_names_are_scoped_and_checked_with_the_scope():
    with Task():
        with NameScope("s"):
            scoped = ops.Add(["a", "b"])
            scoped_2 = ops.Add(["a", "b"])
        plain = ops.Add(["a", "b"])
    assert str(scoped) == "s/local/task/Add"
    assert str(scoped_2) == "s/local/task/Add_2"
    assert str(plain) == "local/task/Add"


# ----------------------------------------------------------------------------- BlobReference


def test_blob_reference_equals_and_hashes_like_its_name():
    ref = BlobReference("x")
    assert ref == "x" and "x" == ref and ref == BlobReference("x")
    assert ref != "y" and ref != BlobReference("y")
    assert hash(ref) == hash("x")
    assert {"x": 1}[ref] == 1 and {ref: 2}["x"] == 2
    assert ref != 3


def test_blob_reference_concatenation():
    net = Net("n")
    ref = BlobReference("x", net)
    assert isinstance(ref + "_s", BlobReference) and str(ref + "_s") == "x_s"
    assert isinstance("p_" + ref, BlobReference) and str("p_" + ref) == "p_x"
    assert str(ref + BlobReference("y")) == "xy"
    assert (ref + "_s").Net() is net


@pytest.mark.parametrize("expr", [
    lambda r: r + 1, lambda r: 1 + r, lambda r: r * 2, lambda r: 2 * r, lambda r: r - r,
    lambda r: r / 2, lambda r: r // 2, lambda r: r % 2, lambda r: r ** 2, lambda r: -r,
    lambda r: abs(r), lambda r: r < 3, lambda r: r >= r,
])
def test_blob_arithmetic_is_a_clear_error(expr):
    with pytest.raises(DSLError) as info:
        expr(BlobReference("x"))
    assert isinstance(info.value, TypeError)  # what Caffe2 (and Python) code expects to catch
    assert "BlobReference" in info.value.message
    assert "ops.Add" in info.value.hint
    assert _located_here(info.value)


def test_blob_reference_records_into_its_own_net():
    net, other = Net("n"), Net("other")
    x = net.Const(1)
    with NetBuilder():
        y = x.Add([x])
    assert str(y) == "n/Add"
    assert [op.type for op in net.ops()] == ["GivenTensorInt64Fill", "Add"]
    assert net.ops()[-1].inputs == (str(x), str(x))
    assert other.ops() == []


def test_blob_reference_without_a_net_cannot_record():
    ref = BlobReference("x")
    with pytest.raises(DSLError) as info:
        ref.Add([ref])
    assert isinstance(info.value, AttributeError) and info.value.hint and _located_here(info.value)
    assert not hasattr(ref, "field_blobs")


def test_blob_reference_only_chains_operators():
    ref = Net("n").Const(1)
    assert not hasattr(ref, "NotAnOperator")
    assert not hasattr(ref, "Name")


# ----------------------------------------------------------------------------- task names


def test_tasks_without_group_are_never_uniquified():
    assert [Task().name for _ in range(3)] == ["local/task"] * 3


def test_task_names_are_unique_among_a_groups_pending_tasks():
    with TaskGroup() as group:
        for _ in range(3):
            with Task():
                ops.Const(1)
    assert [t.name for t in group.tasks()] == ["local/task", "local/task:1", "local/task:2"]


def test_task_names_are_not_uniquified_across_groups_or_nodes():
    with TaskGroup():
        first = Task()
    with TaskGroup():
        second = Task()
    with TaskGroup():
        on_a, on_b = Task(node="a"), Task(node="b")
    assert (first.name, second.name) == ("local/task", "local/task")
    assert (on_a.name, on_b.name) == ("a/task", "b/task")


def test_task_name_from_argument_or_step():
    net = Net("n")
    assert Task(name="mine").name == "local/mine"
    assert Task(step=core.execution_step("my_step", net)).name == "local/my_step"
    assert Task(step=net).name == "local/task"
    with Node("trainer_3"):
        assert Task().name == "trainer_3/task"


def test_nets_of_tasks_in_a_group_use_the_uniquified_task_name():
    with TaskGroup():
        with Task():
            a = ops.Const(1)
        with Task():
            b = ops.Const(1)
    assert str(a) == "local/task/GivenTensorInt64Fill:0"
    assert str(b) == "local/task:1/GivenTensorInt64Fill:0"


def test_checkpoint_test_name_derivation(session):
    """Spec 8.2(c): three tasks on node trainer_1 give nets trainer_1/task, _1, _2."""
    totals = []
    with Node("trainer_1"):
        for _ in range(3):
            with Task() as task:
                ops.Const(np.arange(10), blob_out="val")
                totals.append(ops.Const([100]))
            session.run(task)
    assert [str(t) for t in totals] == ["trainer_1/task/GivenTensorInt64Fill:0",
                                        "trainer_1/task_1/GivenTensorInt64Fill:0",
                                        "trainer_1/task_2/GivenTensorInt64Fill:0"]
    got = session.workspace.fetch("trainer_1/task_2/GivenTensorInt64Fill:0")
    assert got.tolist() == [100]


def test_dummy_output_of_a_task_without_outputs():
    tasks = []
    for _ in range(2):
        with Task() as task:
            ops.Const(1)
        task.get_step()
        tasks.append(task)
    assert tasks[0].output_names() == ["local/task:output/ConstantFill:0"]
    assert tasks[1].output_names() == ["local/task:output_1/ConstantFill:0"]


def test_step_less_task_gets_no_dummy_output():
    task = Task()
    task.get_step()
    assert task.output_names() == []


def test_task_with_outputs_gets_no_dummy_output():
    with Task() as task:
        ops.Const(1, blob_out="x")
    task.add_output(BlobReference("x"))
    task.get_step()
    assert task.output_names() == ["x"]


def test_get_step_has_the_phases_in_order():
    with Task() as task:
        with ops.task_init():
            ops.Const(1, blob_out="i")
        ops.Const(2, blob_out="b")
        with ops.task_exit():
            ops.Const(3, blob_out="e")
    step = task.get_step()
    assert step is task.get_step()  # computed once
    def outs(items):
        return [o for item in items for n in core.iter_nets(item) for op in n.ops() for o in op.outputs]
    assert outs(step.phases.init) == ["i"]
    assert outs([step.phases.body]) == ["b"]
    assert outs(step.phases.exit) == ["e", "local/task:output/ConstantFill:0"]
    assert step.num_instances == 1


# ----------------------------------------------------------------------------- nodes, clusters, groups


def test_cluster_records_nodes_in_first_use_order_with_merged_kwargs():
    with Cluster() as cluster:
        Node("b", x=1)
        Node("a")
        Node("b", y=2)
        Node("b", x=3)
    assert cluster.nodes() == ["b", "a"]
    assert cluster.node_kwargs() == {"b": {"x": 3, "y": 2}, "a": {}}


def test_default_node_is_local():
    assert str(Node.current()) == "local"
    with Node("n1"):
        assert str(Node.current()) == "n1"
        assert Task().node == "n1"


def test_group_used_nodes_in_order():
    with TaskGroup() as group:
        Task(node="b")
        Task(node="a")
        Task(node="b")
    assert group.used_nodes() == ["b", "a"]


def test_workspace_type_inheritance():
    with TaskGroup() as typed_by_task:
        Task(workspace_type=WorkspaceType.GLOBAL)
        untyped = Task()
    typed_by_task.tasks()
    assert typed_by_task.workspace_type() == WorkspaceType.GLOBAL
    assert untyped.workspace_type() == WorkspaceType.GLOBAL
    with TaskGroup() as default:
        plain = Task()
    default.tasks()
    assert (default.workspace_type(), plain.workspace_type()) == (WorkspaceType.PRIVATE,) * 2


# ----------------------------------------------------------------------------- reprs (spec 8.6)


def test_reprs_of_spec_8_6():
    assert repr(Cluster()) == "Cluster(nodes=[], node_kwargs={})"
    assert repr(Node()) == "Node(name=local, kwargs={})"
    assert repr(TaskGroup()) == "TaskGroup(tasks=[], workspace_type=None, remote_nets=[])"
    assert repr(TaskOutput([])) == "TaskOutput(names=[], values=None)"
    assert repr(Task()) == "Task(name=local/task, node=local, outputs=[])"
    assert repr(SetupNets()) == "SetupNets(init_nets=None, exit_nets=None)"
