"""Read-only proto views (issue 15): ``net.Proto()``, ``core.CreateOperator``, device options.

Each expected field is written out by hand from the calls that made the net.
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


def test_proto_views_cannot_be_changed():
    p = _net().Proto()
    with pytest.raises(DSLError) as e:
        p.op[0].type = "Sub"
    assert "read-only" in str(e.value) and _located_here(e.value)
    with pytest.raises(DSLError) as e:
        p.external_input.extend(["more"])
    assert _located_here(e.value)


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
