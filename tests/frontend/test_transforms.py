"""workspace.ApplyTransform / ApplyTransformIfFaster: the named rewrites Caffe2 programs ask for."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, workspace
from dslc.model_helper import ModelHelper


def _conv_model():
    m = ModelHelper(name="convs")
    c = brew.conv(m, "data", "conv", dim_in=2, dim_out=3, kernel=3,
                  weight_init=("GivenTensorFill", {"values": np.linspace(-0.5, 0.5, 54).tolist()}))
    m.net.Relu(c, "out")
    return m


def test_conv_to_nnpack_sets_the_engine_and_leaves_the_net_alone():
    m = _conv_model()
    out = workspace.ApplyTransform("ConvToNNPack", m.net.Proto())
    assert [op.engine for op in out.op] == ["NNPACK", ""]
    assert m.net.Proto().op[0].engine != "NNPACK"  # (a new NetDef; the net keeps its own)


def test_an_unknown_transform_is_a_located_runtime_error():
    with pytest.raises(RuntimeError, match="ConvToNNPack") as err:
        workspace.ApplyTransform("no_such_transform", _conv_model().net.Proto())
    assert "test_transforms.py" in str(err.value)


def test_apply_if_faster_gives_a_net_that_runs_with_the_same_values():
    workspace.ResetWorkspace()
    m = _conv_model()
    init = core.Net("feed")
    init.GivenTensorFill([], "data", shape=[1, 2, 4, 4], values=np.linspace(-1, 1, 32).tolist())
    init.AppendNet(m.param_init_net)
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(m.net)
    want = workspace.FetchBlob("out")
    proto = workspace.ApplyTransformIfFaster("ConvToNNPack", m.net.Proto(), init.Proto(), warmup_runs=1,
                                             main_runs=2, improvement_threshold=2.0)
    assert [op.type for op in proto.op] == ["Conv", "Relu"]
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(proto)
    np.testing.assert_array_equal(workspace.FetchBlob("out"), want)
