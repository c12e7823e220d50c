"""workspace.InferShapesAndTypes: blob shapes and Caffe2 dtype codes, without running.

Expected shapes are worked out by hand from each op's rule; the codes are Caffe2's
TensorProto codes. The whole of test_shapes_from_the_workspace was also run on the
real Caffe2 (torch 1.10.2, /work/shared/tools/caffe2-ref/run.sh), which gave the
same dicts.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.proto.caffe2_pb2 import TensorProto as TP


def _net():
    n = core.Net("shapes")
    n.ConstantFill([], "x", shape=[3, 2], value=1.0)               # f32 [3, 2]
    n.ConstantFill([], "i", shape=[4], value=1, dtype=core.DataType.INT32)
    n.Add(["x", "x"], "y")                                         # same shape
    n.Concat(["x", "x"], ["c", "c_split"], axis=0)                 # rows 3 + 3; split: i32 [2]
    n.Sum(["x", "fed"], "z")
    n.Cast(["i"], "f", to=core.DataType.FLOAT)
    n.MatMul(["x", "w"], "mm")                                     # [3, 2] @ [2, k] = [3, k]
    n.Reshape(["x"], ["r", "old"], shape=[-1, 3])                  # 6 values as [2, 3]; old: i64 [2]
    n.Copy(["unknown"], "copy")                                    # read, never fed: left out
    return n


def test_shapes_from_the_workspace():
    workspace.FeedBlob("fed", np.ones((3, 2), np.float32))
    workspace.FeedBlob("w", np.ones((2, 5), np.float32))
    workspace.FeedBlob("names", np.array(["a", "b"], dtype=object))  # not in the net: still listed
    workspace.CreateBlob("empty")                                   # holds nothing: left out
    shapes, types = workspace.InferShapesAndTypes([_net()])
    assert shapes == {"x": [3, 2], "i": [4], "y": [3, 2], "c": [6, 2], "c_split": [2], "z": [3, 2],
                      "f": [4], "mm": [3, 5], "r": [2, 3], "old": [2], "fed": [3, 2], "w": [2, 5],
                      "names": [2]}
    assert types == {"x": TP.FLOAT, "i": TP.INT32, "y": TP.FLOAT, "c": TP.FLOAT, "c_split": TP.INT32,
                     "z": TP.FLOAT, "f": TP.FLOAT, "mm": TP.FLOAT, "r": TP.FLOAT, "old": TP.INT64,
                     "fed": TP.FLOAT, "w": TP.FLOAT, "names": TP.STRING}
    assert not workspace.HasBlob("x")  # nothing ran


def test_shapes_from_given_dims_ignore_the_workspace():
    workspace.FeedBlob("w", np.ones((2, 5), np.float64))  # the map's dims and types win
    workspace.FeedBlob("other", np.ones(3, np.int64))
    dims = {"fed": [3, 2], "w": [2, 7]}
    shapes, types = workspace.InferShapesAndTypes([_net()], dims)
    assert shapes["mm"] == [3, 7] and shapes["w"] == [2, 7] and "other" not in shapes
    assert types["w"] == TP.FLOAT  # a blob given dims but no type is float
    shapes, types = workspace.InferShapesAndTypes([_net()], {**dims, "d": [1, 2]},
                                                  blob_types={"d": TP.DOUBLE, "w": TP.FLOAT})
    assert types["d"] == TP.DOUBLE and shapes["d"] == [1, 2] and types["mm"] == TP.FLOAT


def test_dtype_codes_of_fed_blobs():
    for name, arr, code in [("b", np.zeros(5, np.bool_), TP.BOOL), ("u8", np.zeros(5, np.uint8), TP.UINT8),
                            ("d", np.zeros(2, np.float64), TP.DOUBLE), ("h", np.zeros(1, np.int16), TP.INT16),
                            ("l", np.zeros(1, np.int64), TP.INT64), ("s", np.float32(2), TP.FLOAT)]:
        workspace.FeedBlob(name, arr)
        shapes, types = workspace.InferShapesAndTypes([core.Net("empty")])
        assert types[name] == code and shapes[name] == list(np.shape(arr)), name


def test_the_last_write_gives_the_shape_and_later_nets_see_earlier_ones():
    a, b = core.Net("a"), core.Net("b")
    a.ConstantFill([], "x", shape=[2], value=1.0)
    a.ConstantFill([], "x", shape=[3, 4], value=1, dtype=core.DataType.INT64)
    b.Flatten(["x"], "flat")  # [3, 4] stays [3, 4] (Flatten keeps the first dim)
    shapes, types = workspace.InferShapesAndTypes([a, b])
    assert shapes == {"x": [3, 4], "flat": [3, 4]} and types == {"x": TP.INT64, "flat": TP.INT64}
    shapes, _ = workspace.InferShapesAndTypes([b])  # alone, its input is unknown
    assert shapes == {}


@pytest.mark.parametrize("rows", [[3, 2], [3, 2, 4, 5]])
def test_a_last_n_window_reports_its_capacity(rows):
    # Caffe2's shape function says num_to_collect rows; the IR type says ? rows (a
    # first run holds 3), so the op declares num_to_collect as the dim's bound
    n = core.Net("collect")
    n.ConstantFill([], "data", shape=rows, value=1.0)
    workspace.CreateBlob("window")
    workspace.FeedBlob("next", np.array(0, np.int32))
    n.LastNWindowCollector(["window", "next", "data"], ["window", "next"], num_to_collect=7)
    shapes, types = workspace.InferShapesAndTypes([n])
    assert shapes["window"] == [7] + rows[1:] and types["window"] == TP.FLOAT
    assert shapes["next"] == [] and types["next"] == TP.INT32


def test_bad_calls_are_located_errors():
    with pytest.raises(DSLError) as e:
        workspace.InferShapesAndTypes([_net().Proto()], nets_proto=True)
    assert "test_infer_shapes.py:" in str(e.value) and "core.Net" in str(e.value)
    with pytest.raises(DSLError) as e:
        workspace.InferShapesAndTypes(["a net name"])
    assert "test_infer_shapes.py:" in str(e.value)
    with pytest.raises(DSLError) as e:
        workspace.InferShapesAndTypes([_net()], blob_types={"w": TP.FLOAT})
    assert "blob_dimensions" in str(e.value)
    n = core.Net("bad")
    n.ConstantFill([], "x", shape=[2], value=1.0)
    n.Add(["x", "i"], "y")
    workspace.FeedBlob("i", np.ones(2, np.int32))
    with pytest.raises(DSLError) as e:  # mixed operand types: the verifier's error, at the op's line
        workspace.InferShapesAndTypes([n])
    assert "test_infer_shapes.py:" in str(e.value)
