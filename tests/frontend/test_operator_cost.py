"""workspace.GetOperatorCost (ir/cost.py rules declared on Conv, FC, Concat, Split) and the
EstimateAllBlobSizes operator (runtime/blobproto.estimate_size).

Figures read off the real Caffe2 (torch 1.10.2's caffe2.python, caffe2-ref run.sh) running the
same calls on the same blobs; hand checks in the comments.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace

f32 = np.float32



def _feed(**blobs):
    for name, value in blobs.items():
        workspace.FeedBlob(name, value)


def test_conv_and_fc_costs_are_caffe2s():
    rs = np.random.RandomState(0)
    _feed(X=rs.rand(2, 6, 7, 5).astype(f32), W=rs.rand(4, 3, 3, 2).astype(f32), b=rs.rand(4).astype(f32))
    conv = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernel_h=3, kernel_w=2, stride=2, pad=1, group=2)
    # Y [2, 4, 4, 3]: 2 * 24 positions * 4 filters * (3 * 3 * 2) * 2 = 3456 flops; 384 = 96 * 4 bytes
    # written; (420 + 72 + 4) * 4 = 1984 read
    assert workspace.GetOperatorCost(conv, ["X", "W", "b"]) == (3456, 384, 1984)
    assert workspace.GetOperatorCost(conv.SerializeToString(), ["X", "W", "b"]) == (3456, 384, 1984)
    _feed(X=rs.rand(2, 7, 5, 6).astype(f32), W=rs.rand(4, 3, 2, 3).astype(f32))
    nhwc = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernel_h=3, kernel_w=2, stride=2, pad=1, group=2,
                               order="NHWC")
    assert workspace.GetOperatorCost(nhwc, ["X", "W", "b"]) == (3456, 384, 1984)
    _feed(A=rs.rand(5, 12).astype(f32), B=rs.rand(3, 12).astype(f32), c=rs.rand(3).astype(f32))
    # 2 M N K + M N = 360 + 15 (the bias adds); (60 + 36 + 3) * 4 read
    assert workspace.GetOperatorCost(core.CreateOperator("FC", ["A", "B", "c"], ["Z"]), ["A", "B", "c"]) == (375, 60, 396)


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float16, np.int8])
def test_concat_and_split_move_their_bytes(dtype):
    """Caffe2's concat/split cost tests: no flops, every input read, the outputs (Concat's
    split_info too) written; Split writes all of its data whatever the parts."""
    _feed(a=np.array([[1, 2, 3], [4, 5, 6]], dtype), b=np.array([[7], [8]], dtype))
    concat = core.CreateOperator("Concat", ["a", "b"], ["out", "split_info"], axis=1)
    item = np.dtype(dtype).itemsize
    assert workspace.GetOperatorCost(concat, ["a", "b"]) == (0, 8 * item + 2 * 4, 8 * item)
    _feed(x=np.arange(6, dtype=np.int32).reshape(2, 3), split=np.array([1, 2], np.int32))
    split = core.CreateOperator("Split", ["x", "split"], ["p", "q"], axis=1)
    assert workspace.GetOperatorCost(split, ["x", "split"]) == (0, 24, 32)


def test_an_op_with_no_cost_model_is_a_located_error():
    _feed(x=np.ones(3, f32))
    with pytest.raises(RuntimeError, match="no cost model for Relu") as e:
        workspace.GetOperatorCost(core.CreateOperator("Relu", ["x"], ["y"]), ["x"])
    assert "test_operator_cost.py" in str(e.value)


def test_estimate_all_blob_sizes_is_caffe2s(backend):
    rs = np.random.RandomState(0)
    _feed(float1=rs.random_sample(4000).astype(f32), float2=rs.random_sample(4000).astype(f32),
          i8=np.arange(10, dtype=np.int8), ui16=np.arange(1024, dtype=np.uint16), d=np.zeros((3, 2)),
          empty=np.zeros((0, 3), f32), b=np.zeros(7, bool), s=np.array([b"ab", b"c"], dtype=object))
    opts = core.caffe2_pb2.SerializationOptions(options=[
        core.caffe2_pb2.BlobSerializationOptions(blob_name_regex="float1", chunk_size=500),
        core.caffe2_pb2.BlobSerializationOptions(blob_name_regex="d", chunk_size=-1)])
    net = core.Net("estimate")
    net.Proto().op.extend([core.CreateOperator("EstimateAllBlobSizes", [], ["blob_names", "blob_sizes"], options=opts)])
    workspace.current().run(net, backend=backend)
    names = [n.decode() for n in workspace.FetchBlob("blob_names")]  # (bytes, as Caffe2 fetches strings)
    got = dict(zip(names, workspace.FetchBlob("blob_sizes").tolist()))
    # each chunk: name + 50 bytes; float 4 per element, int8 2, uint16 3, bool 1, string 50;
    # float1 in 8 chunks of 500; the two outputs as they end up (10 names, 10 sizes)
    assert got == {"b": 58, "blob_names": 560, "blob_sizes": 140, "d": 99, "empty": 0, "float1": 16448,
                   "float2": 16056, "i8": 72, "s": 151, "ui16": 3126}
    assert got["float1"] == 8 * (6 + 50) + 4000 * 4 and got["ui16"] == 4 + 50 + 1024 * 3
