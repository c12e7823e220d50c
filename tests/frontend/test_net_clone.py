"""Net.Clone and Net.ClonePartial (issue 15).

The expected ops and external lists were worked out by hand from the net below and
checked against the real Caffe2 (torch 1.10.2), by running the same calls through
/work/shared/tools/caffe2-ref/run.sh and printing Proto()'s ops and external lists.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from dslc import core, schema, workspace
from dslc.proto import caffe2_pb2
from dslc.ir.diagnostics import DSLError

HERE = __file__.rsplit("/", 1)[-1]


def _net():
    """x -> Relu -> y; z = y + w; z += (in place); u = z + y; v = y (w is never written)."""
    n = core.Net("orig")
    x = n.AddExternalInput("x")
    y = n.Relu([x], ["y"])       # op 0
    z = n.Sum([y, "w"], ["z"])   # op 1
    z = n.Sum([z], [z])          # op 2, in place
    n.Sum([z, y], ["u"])         # op 3
    n.Sum([y], ["v"])            # op 4
    return n


def _ops(net):
    return [(op.type, list(op.input), list(op.output)) for op in net.Proto().op]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE)


def test_op_id_mask_picks_ops_in_the_order_it_lists_them():
    c = _net().Clone("c1", op_id_mask=[3, 0])
    assert [(t, o) for t, _, o in _ops(c)] == [("Sum", ["u"]), ("Relu", ["y"])]


def test_blob_remap_renames_op_blobs_and_external_lists():
    c = _net().Clone("c3", blob_remap={"x": "X", "u": "U"})
    assert c.Name() == "c3"
    assert _ops(c)[0] == ("Relu", ["X"], ["y"]) and _ops(c)[3] == ("Sum", ["z", "y"], ["U"])
    assert list(c.Proto().external_input) == ["X", "w"]
    assert c.BlobIsDefined("U") and not c.BlobIsDefined("u")


def test_update_external_list_recomputes_inputs_and_outputs_from_the_kept_ops():
    c = _net().Clone("c2", op_id_mask=[1, 2, 3], update_external_list=True, blob_remap={"y": "Y", "u": "U"})
    assert _ops(c) == [("Sum", ["Y", "w"], ["z"]), ("Sum", ["z"], ["z"]), ("Sum", ["z", "Y"], ["U"])]
    # read before written: Y and w (Caffe2 lists Y twice; dslc's external inputs are a set)
    assert list(c.Proto().external_input) == ["Y", "w"]
    assert list(c.Proto().external_output) == ["U"]  # z is read after it is written


def test_keep_schema_rebinds_the_records_to_the_renamed_blobs():
    n = core.Net("rec")
    n.set_input_record(schema.Struct(("a", schema.Scalar(np.float32, core.BlobReference("in_a"))),
                                     ("b", schema.Scalar(np.int32, core.BlobReference("in_b")))))
    n.Copy(["in_a"], ["out"])
    c = n.Clone("rec2", blob_remap={"in_a": "A"})
    assert [str(b) for b in c.input_record().field_blobs()] == ["A", "in_b"]
    assert c.input_record().field_blobs()[0].Net() is c
    assert [str(b) for b in n.input_record().field_blobs()] == ["in_a", "in_b"]  # the original is kept
    assert _net().Clone("plain", keep_schema=False).input_record() is None


def test_clone_partial_keeps_the_path_and_prefixes_what_it_makes():
    n = _net()
    p, (u,) = n.ClonePartial("p", ["y"], ["u"])
    assert _ops(p) == [("Sum", ["y", "w"], ["p/z"]), ("Sum", ["p/z"], ["p/z"]), ("Sum", ["p/z", "y"], ["p/u"])]
    assert list(p.Proto().external_input) == ["y", "w"] and list(p.Proto().external_output) == ["p/u"]
    assert str(u) == "p/u" and u.Net() is p


def test_clone_partial_renames_the_given_inputs():
    n = _net()
    q, (z,) = n.ClonePartial("q", {core.BlobReference("x"): "xx"}, ["z"])
    assert _ops(q) == [("Relu", ["xx"], ["q/y"]), ("Sum", ["q/y", "w"], ["q/z"]), ("Sum", ["q/z"], ["q/z"])]
    assert list(q.Proto().external_input) == ["xx", "w"] and str(z) == "q/z"
    r, refs = n.ClonePartial("", [("y", "yy")], ["u", "v"])  # pairs; no name: no prefix
    assert [str(b) for b in refs] == ["u", "v"]
    assert _ops(r)[-1] == ("Sum", ["yy"], ["v"]) and list(r.Proto().external_input) == ["yy", "w"]


def test_clone_partial_skips_gradient_ops_and_the_clone_runs(session):
    n = core.Net("g")
    a, b = n.AddExternalInput("a", "b")
    j, _sizes = n.Concat([a, b], ["j", "sizes"], axis=0)
    s = n.SumElements([j], ["s"])
    n.AddGradientOperators([s])
    part, (out,) = n.ClonePartial("part", {a: "a2", b: "b2"}, [s])
    assert [op.type for op in part.Proto().op] == ["Concat", "SumElements"]
    workspace.FeedBlob("a2", np.array([1.0, 2.0], np.float32))
    workspace.FeedBlob("b2", np.array([4.0], np.float32))
    session.run(part)
    assert workspace.FetchBlob(str(out)) == pytest.approx(7.0)


def test_clone_partial_refuses_inputs_the_path_computes():
    with pytest.raises(AssertionError) as e:  # Relu (op 0) is needed for u and also makes z
        _net().ClonePartial("bad", ["x", "z"], ["u"])
    assert isinstance(e.value, DSLError) and _located_here(e.value) and "Relu" in str(e.value)


def test_clone_partial_refuses_an_undefined_output():
    with pytest.raises(AssertionError) as e:
        _net().ClonePartial("bad", ["x"], ["nope"])
    assert isinstance(e.value, DSLError) and _located_here(e.value) and "'nope'" in str(e.value)


def test_bad_mask_and_remap_funcs_are_located_errors():
    with pytest.raises(IndexError) as e:
        _net().Clone("bad", op_id_mask=[7])
    assert isinstance(e.value, DSLError) and _located_here(e.value)
    with pytest.raises(DSLError) as e:
        _net().Clone("bad", remap_funcs={"If": lambda op, prefix, remap: None})
    assert _located_here(e.value) and "blob_remap" in str(e.value)


def _xyz_net():
    n = core.Net("train")
    x = n.AddExternalInput("x")
    y = n.Scale([x], ["y"], scale=3.0)
    n.Sum([y, x], ["z"])
    n.AddExternalOutput("z")
    return n


@pytest.mark.parametrize("copy_of", [lambda p: p, copy.deepcopy, copy.copy])
def test_a_net_built_from_a_netdef_runs_its_ops(copy_of):
    # issue 24: core.Net(net.Proto()) used to give an empty net, so RunNetOnce did nothing
    src = _xyz_net()
    n = core.Net(copy_of(src.Proto()))
    # real Caffe2 (run.sh) names the copy train_1 and keeps the ops and external output
    assert n.Name() != src.Name() and n.Name().startswith("train")
    assert [t for t, _, _ in _ops(n)] == ["Scale", "Sum"]
    assert list(n.Proto().external_output) == ["z"]
    workspace.FeedBlob("x", np.array([1.0, 2.0], np.float32))
    workspace.RunNetOnce(n)
    np.testing.assert_allclose(workspace.FetchBlob("z"), [4.0, 8.0])  # 3x + x


def test_a_net_from_something_that_is_not_a_name_is_a_located_error():
    with pytest.raises(DSLError) as e:
        core.Net(3)
    assert _located_here(e.value)


# ----------------------------------------------------------------------------- rerouting, device copies
# Caffe2's answers for these nets (run through /tmp/caffe2-venv with the imports turned back):
# the same op lists, inputs and counts, except where noted.

def _types_and_inputs(net):
    return [(op.type, list(op.input)) for op in net.Proto().op]


def test_reroute_tensor_puts_the_new_producer_after_the_tensors_maker():
    net = core.Net("reroute")
    net.Conv(["input", "w", "b"], "conv1")
    net.Relu(["conv1"], "conv1_relu")
    bn = core.CreateOperator("SpatialBN", ["conv1", "scale", "bias", "mean", "var"],
                             ["conv1_bn", "mean", "var", "saved_mean", "saved_var"])
    assert net.reroute_tensor("conv1", bn, [net.Proto().op[1]]) == 1
    assert net.Proto().op[1] == bn
    assert _types_and_inputs(net) == [("Conv", ["input", "w", "b"]), ("SpatialBN", ["conv1", "scale", "bias", "mean", "var"]),
                                      ("Relu", ["conv1_bn"])]
    assert [op.type for op in net.ops()] == ["Conv", "SpatialBN", "Relu"]  # (what runs: the records follow)


def test_reroute_tensor_of_an_external_input_and_only_the_ops_allowed():
    net = core.Net("reroute_x")
    net.AddExternalInput("x")
    net.Relu("x", "y")
    net.Sigmoid("x", "z")
    assert net.reroute_tensor("x", core.CreateOperator("Abs", ["x"], ["xa"]), [net.Proto().op[1]]) == 1
    assert _types_and_inputs(net) == [("Abs", ["x"]), ("Relu", ["x"]), ("Sigmoid", ["xa"])]


def test_reroute_tensor_without_a_list_reroutes_every_later_reader():
    # Caffe2 reroutes none here (0, the ops unchanged) though its docstring promises the
    # consumers: a bug dslc does not keep (docs/differences.md)
    net = core.Net("reroute_all")
    net.Relu("x", "y")
    net.Sigmoid("y", "z")
    net.Tanh("y", "t")
    net.Abs("z", "u")
    assert net.reroute_tensor("y", core.CreateOperator("Abs", ["y"], ["ya"])) == 2
    assert _types_and_inputs(net) == [("Relu", ["x"]), ("Abs", ["y"]), ("Sigmoid", ["ya"]), ("Tanh", ["ya"]),
                                      ("Abs", ["z"])]
    with pytest.raises(DSLError, match="makes 'nope'"):
        net.reroute_tensor("nope", core.CreateOperator("Abs", ["nope"], ["n2"]))


def test_inject_cross_device_copies_adds_none_on_the_cpu():
    init = core.Net("init")
    with core.DeviceScope(0, node_name="node:0"):
        init.XavierFill([], "w", shape=[4, 3])
    train = core.Net("train")
    with core.DeviceScope(0, node_name="node:1"):
        train.FC(["data", "w", "b"], "y")
    init2, where = core.InjectCrossDeviceCopies(init)
    train2, where = core.InjectCrossDeviceCopies(train, where)
    assert train2.Name() == "train_cross_device" and _types_and_inputs(train2) == [("FC", ["data", "w", "b"])]
    assert train2.Proto().op[0].device_option.node_name == "node:1"
    # each blob on its maker's device; one read first, on the net's (Caffe2's answer: '')
    assert {b: o.node_name for b, o in where.items()} == {"w": "node:0", "data": "", "b": "", "y": "node:1"}


def test_clone_renames_blobs_inside_control_ops_branches():
    # Caffe2's core_test.test_control_op_remap net; Caffe2 gives the same inputs and the
    # branch name a_1_remapped (the copy of "a" is a_1, as here), and leaves the original alone
    n = core.Net("original")
    then_net, else_net = core.Net("a"), core.Net("b")
    then_net.FC(["inputA"], "fc_a")
    else_net.FC(["inputB"], "fc_b")
    n.If(inputs=[], outputs=[], then_net=then_net.Proto(), else_net=else_net.Proto())
    if_op = n.Clone("copied", blob_remap={"inputA": "inputX"}).Proto().op[0]
    assert list(if_op.arg[0].n.op[0].input) == ["inputX"] and list(if_op.arg[1].n.op[0].input) == ["inputB"]
    assert if_op.arg[0].n.name == "a_1_remapped"
    assert list(n.Proto().op[0].arg[0].n.op[0].input) == ["inputA"]


def test_a_net_made_in_place_from_a_netdef_is_that_netdef():
    n = core.Net("original")
    n.Relu(n.AddExternalInput("x"), "y")
    proto = n.Proto()
    copied, moved = core.Net(proto), core.Net(proto, inplace=True)
    assert moved.Proto() is proto and copied.Proto() is not proto and moved.Name() == "original"
    proto.external_input.extend(["foo"])
    assert len(moved.Proto().external_input) == 2 and len(copied.Proto().external_input) == 1
    proto.op[0].type = "Sigmoid"  # (what the net runs: the message's ops)
    moved.Tanh("y", "z")  # (and a recorded op goes into the message)
    assert [op.type for op in proto.op] == ["Sigmoid", "Tanh"]
    workspace.FeedBlob("x", np.array([0.0], np.float32))
    workspace.RunNetOnce(moved)
    np.testing.assert_allclose(workspace.FetchBlob("z"), [np.tanh(0.5)], rtol=1e-6)


def test_run_all_on_gpu_marks_the_recurrent_step_net_too():
    step = core.Net("step")
    step.Relu(["input_1"], "input_1")
    net = core.Net("on_gpu")
    net.RecurrentNetwork(["input_1"], ["input_1"], step_net=step.Proto())
    net.RunAllOnGPU(gpu_id=3, use_cudnn=True)
    proto = net.Proto()
    assert (proto.device_option.device_type, proto.device_option.device_id) == (caffe2_pb2.CUDA, 3)
    assert proto.op[0].arg[0].n.device_option.device_id == 3 and proto.op[0].engine == "CUDNN"
