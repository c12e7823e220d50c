"""workspace.SerializeBlob / DeserializeBlob and Blob.serialize: Caffe2's BlobProto bytes.
The expected bytes were read off the real Caffe2 (torch 1.10.2's caffe2): the same blobs fed
there and `workspace.SerializeBlob(name).hex()` printed."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import workspace
from dslc.ir.diagnostics import DSLError
from dslc.proto import caffe2_pb2

CAFFE2_BYTES = [
    ("x", np.array([[1.0, 2.0], [3.0, 4.5]], np.float32),
     "0a0178120654656e736f721a270802080210011a100000803f0000004000004040000090403a0178420208005a04080010047800"),
    ("b", np.array([True, False, True]),
     "0a0162120654656e736f721a160803100522030100013a0162420208005a0408001003"),
    ("h", np.array([1.5, -2.0], np.float16),
     "0a0168120654656e736f721a180802100c2205807c8080033a0168420208005a0408001002"),
    ("v", np.array([1, 2], np.float64),
     "0a0176120654656e736f721a230802100d3a0176420208004a10000000000000f03f00000000000000405a0408001002"),
    ("v", np.array([1, 2], np.int64),
     "0a0176120654656e736f721a150802100a3a017642020800520201025a0408001002"),
    ("v", np.array([1, 2], np.uint16),
     "0a0176120654656e736f721a1508021008220201023a0176420208005a0408001002"),
    ("w", np.array(["ab", "c"], dtype=object),
     "0a0177120654656e736f721a1808021004320261623201633a0177420208005a0408001002"),
    ("s", b"hi", "0a0173120b7374643a3a737472696e6722026869"),
]


@pytest.mark.parametrize("name, value, hexed", CAFFE2_BYTES, ids=[c[2][:0] + str(np.asarray(c[1]).dtype)
                                                                  for c in CAFFE2_BYTES])
def test_serialized_blobs_are_caffe2s_bytes_and_read_back(name, value, hexed):
    workspace.FeedBlob(name, value)
    assert workspace.SerializeBlob(name).hex() == hexed
    workspace.ResetWorkspace()
    workspace.DeserializeBlob("again", bytes.fromhex(hexed))
    got = workspace.FetchBlob("again")
    if isinstance(value, bytes):
        assert got == value
    elif value.dtype == object:  # (strings fetch as bytes, as in Caffe2)
        assert got.dtype == object and got.tolist() == [v.encode() if isinstance(v, str) else v for v in value.tolist()]
    else:
        assert got.dtype == value.dtype and got.tolist() == value.tolist()


def test_a_c_workspace_blob_serializes_and_its_tensor_is_writable():
    ws = workspace.C.Workspace()
    ws.create_blob("t").feed(np.array([1.5, 2.5], np.float32))
    data = ws.blobs["t"].serialize("t")
    ws.create_blob("u").deserialize(data)
    np.testing.assert_array_equal(ws.blobs["u"].fetch(), [1.5, 2.5])
    tensor = ws.blobs["u"].tensor()
    tensor.data[0] = 7.0
    np.testing.assert_array_equal(ws.blobs["u"].fetch(), [7.0, 2.5])


def test_damaged_or_oversized_blob_protos_are_errors_before_any_allocation():
    bad = caffe2_pb2.BlobProto(name="z", type="Tensor")
    bad.tensor.dims.extend([2, 3])
    bad.tensor.data_type = caffe2_pb2.TensorProto.FLOAT
    bad.tensor.float_data.extend([1.0, 2.0])  # 2 values for dims [2, 3]
    with pytest.raises(DSLError) as err:
        workspace.DeserializeBlob("z", bad.SerializeToString())
    assert "dims [2, 3] but 2 values" in str(err.value)
    huge = caffe2_pb2.BlobProto(name="z", type="Tensor")
    huge.tensor.dims.extend([1 << 40, 1 << 20])
    huge.tensor.data_type = caffe2_pb2.TensorProto.FLOAT
    with pytest.raises(DSLError):
        workspace.DeserializeBlob("z", huge.SerializeToString())
    with pytest.raises(DSLError):
        workspace.DeserializeBlob("z", b"\xff\xfe not a proto")
