"""Caffe2's protobuf messages: ``net.Proto()``, ``core.CreateOperator``, device options.

Each expected field is written out by hand from the calls that made the net; the
serialized bytes were read off the real Caffe2 (torch 1.10.2's caffe2, the same calls,
``.SerializeToString().hex()``).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dslc import core
from dslc.ir.diagnostics import DSLError
from dslc.proto import caffe2_pb2

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


def _net():
    net = core.Net("viewed")
    net.ConstantFill([], ["c"], shape=[2, 3], value=0.5)
    net.Add(["c", "ext"], ["s"], broadcast=1)
    net.AddExternalOutput("s")
    return net


def test_net_proto_shows_name_ops_and_external_blobs():
    p = _net().Proto()
    assert p.name == "viewed"
    assert [op.type for op in p.op] == ["ConstantFill", "Add"]
    assert list(p.op[1].input) == ["c", "ext"] and list(p.op[1].output) == ["s"]
    assert list(p.external_input) == ["ext"] and p.external_output[-1] == "s"
    args = {a.name: a for a in p.op[0].arg}
    assert list(args["shape"].ints) == [2, 3] and args["value"].f == 0.5
    assert [(a.name, a.i) for a in p.op[1].arg] == [("broadcast", 1)]


def test_external_inputs_is_a_property_of_blob_references():
    net = _net()
    assert [str(b) for b in net.external_inputs] == ["ext"]
    assert [str(b) for b in net.external_outputs] == ["s"]


# The real Caffe2's bytes for _net().Proto() (with AddExternalOutput(BlobReference("s"))) and
# for the CreateOperator call of test_create_operator_serializes_as_caffe2s.
CAFFE2_NET_HEX = ("0a06766965776564122e1201631a00220c436f6e7374616e7446696c6c2a0b0a057368617065300230032a0c0a05"
                  "76616c7565150000003f12210a01630a036578741201731a0022034164642a0d0a0962726f61646361737418013a"
                  "03657874420173")
CAFFE2_OP_HEX = ("0a01781201791a0172220452656c752a080a04666c616718012a0c0a056c6162656c22036c626c2a0b0a0573697a"
                 "6573300430052a120a067363616c65732d0000003f2d000000402a0d0a05776f7264733a01613a0162")


def test_net_proto_serializes_as_caffe2s():
    p = _net().Proto()
    assert isinstance(p, caffe2_pb2.NetDef)
    assert p.SerializeToString().hex() == CAFFE2_NET_HEX
    back = caffe2_pb2.NetDef.FromString(bytes.fromhex(CAFFE2_NET_HEX))
    assert back.op[1].type == "Add" and list(back.external_output) == ["s"]


def test_create_operator_serializes_as_caffe2s():
    op = core.CreateOperator("Relu", ["x"], "y", name="r", flag=1, label="lbl", sizes=[4, 5],
                             scales=[0.5, 2.0], words=["a", "b"])
    assert op.SerializeToString().hex() == CAFFE2_OP_HEX


def test_proto_prints_in_text_format():
    text = str(_net().Proto())
    assert text.startswith('name: "viewed"\nop {\n') and 'type: "ConstantFill"' in text
    assert 'external_input: "ext"' in text


def _run(net, blob):
    from dslc import workspace
    workspace.ResetWorkspace()
    workspace.FeedBlob("ext", np.ones((2, 3), dtype=np.float32))
    workspace.RunNetOnce(net)
    return workspace.FetchBlob(blob)


def test_an_edit_to_the_proto_is_what_the_net_runs():
    net = _net()
    p = net.Proto()
    p.op[1].type = "Sub"                      # c - ext = 0.5 - 1
    np.testing.assert_array_equal(_run(net, "s"), np.full((2, 3), -0.5, np.float32))
    del p.op[1]
    extra = p.op.add()
    extra.CopyFrom(core.CreateOperator("Mul", ["c", "ext"], ["s"]))
    np.testing.assert_array_equal(_run(net, "s"), np.full((2, 3), 0.5, np.float32))
    assert [op.type for op in net.Proto().op] == ["ConstantFill", "Mul"] and net.Proto() is p


def test_ops_recorded_later_appear_in_the_same_message():
    net = _net()
    p = net.Proto()
    net.Relu(["s"], ["r"])
    assert [op.type for op in p.op] == ["ConstantFill", "Add", "Relu"]
    np.testing.assert_array_equal(_run(net, "r"), np.full((2, 3), 1.5, np.float32))


def test_a_copied_proto_makes_an_independent_net():
    import copy
    net = _net()
    copied = copy.deepcopy(net.Proto())
    copied.op[0].arg[1].f = 2.0              # the copy's fill value only
    other = core.Net(copied)
    assert other.Name() != net.Name() and len(other.Proto().op) == 2
    np.testing.assert_array_equal(_run(other, "s"), np.full((2, 3), 3.0, np.float32))
    np.testing.assert_array_equal(_run(net, "s"), np.full((2, 3), 1.5, np.float32))


def test_a_net_from_a_parsed_message_runs():
    other = core.Net(caffe2_pb2.NetDef.FromString(bytes.fromhex(CAFFE2_NET_HEX)))
    np.testing.assert_array_equal(_run(other, "s"), np.full((2, 3), 1.5, np.float32))


def test_a_python_op_token_from_elsewhere_is_refused():
    from dslc.trace.netdef import ProtoError
    msg = caffe2_pb2.NetDef(name="pyop")
    op = msg.op.add(type="Python", input=[], output=["o"])
    op.arg.add(name="func", s=b"dslc.object:1234")
    with pytest.raises(ProtoError) as e:
        core.Net(msg)
    assert "never registered" in str(e.value) and _located_here(e.value)


def test_create_operator_applies_the_name_scope_to_strings_only():
    ref = core.BlobReference("kept")
    with core.NameScope("outer"):
        op = core.CreateOperator("Relu", ["x", ref], "y", name="r", engine="", flag=1, label="lbl",
                                 sizes=[4, 5], scales=[0.5, 2.0], words=["a", "b"])
    assert (op.type, op.name) == ("Relu", "r")
    assert list(op.input) == ["outer/x", "kept"] and list(op.output) == ["outer/y"]
    args = {a.name: a for a in op.arg}
    assert args["flag"].i == 1 and args["label"].s == b"lbl"
    assert list(args["sizes"].ints) == [4, 5] and list(args["scales"].floats) == [0.5, 2.0]
    assert list(args["words"].strings) == [b"a", b"b"]
    assert not op.HasField("device_option")


def test_device_scope_is_recorded_on_created_operators():
    gpu = core.DeviceOption(caffe2_pb2.CUDA, 1)
    with core.DeviceScope(gpu):
        op = core.CreateOperator("Relu", "x", "y")
    assert op.HasField("device_option") and op.device_option.device_id == 1
    assert not core.CreateOperator("Relu", "x", "y").HasField("device_option")


def test_device_option_equal():
    cpu_a, cpu_b = core.DeviceOption(caffe2_pb2.CPU, 0), core.DeviceOption(caffe2_pb2.CPU, 7)
    assert core.device_option_equal(cpu_a, cpu_b)  # the id of a CPU option means nothing
    cpu_b.node_name = "n1"
    assert core.device_option_equal(cpu_a, cpu_b)
    assert not core.device_option_equal(cpu_a, cpu_b, ignore_node_name=False)
    gpu1, gpu2 = core.DeviceOption(caffe2_pb2.CUDA, 1), core.DeviceOption(caffe2_pb2.CUDA, 2)
    assert not core.device_option_equal(gpu1, gpu2) and not core.device_option_equal(cpu_a, gpu1)


def test_populate_proto_with_file_name_names_each_op_by_its_call():
    def build():
        net = core.Net("located")
        net.ConstantFill([], ["a"], shape=[1], value=1.0); line = build.__code__.co_firstlineno + 2  # noqa: E702
        return net, line

    net, line = build()
    assert net.Proto().op[0].name == ""
    net.PopulateProtoWithFileName()
    assert net.Proto().op[0].name == f"{os.path.abspath(__file__)}:{line}:build"


def test_proto_args_of_arrays_read_as_lists():
    net = core.Net("arr")
    net.GivenTensorFill([], ["g"], shape=[2], values=np.array([1.5, 2.5], dtype=np.float32))
    args = {a.name: a for a in net.Proto().op[0].arg}
    assert list(args["values"].floats) == [1.5, 2.5]
