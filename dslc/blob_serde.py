"""Caffe2's BlobProto form of a blob (``workspace.SerializeBlob``, ``Blob.serialize``):
a tensor as a TensorProto of its dims and typed data, a string as content bytes.

Reading one parses protobuf and fills a numpy array of a plain dtype, its size checked
against its dims and the memory bound first: nothing named by the bytes runs.
"""
from __future__ import annotations

import numpy as np

from dslc.ir.diagnostics import DSLError
from dslc.ir.ops.numeric import check_size
from dslc.proto import caffe2_pb2

T = caffe2_pb2.TensorProto
# numpy dtype -> (TensorProto field, data type code); narrow ints and bools travel as int32
# values, float16 as the int32 of its bits (Caffe2's forms)
_FIELDS = {
    np.dtype(np.float32): ("float_data", T.FLOAT), np.dtype(np.float64): ("double_data", T.DOUBLE),
    np.dtype(np.int64): ("int64_data", T.INT64), np.dtype(np.int32): ("int32_data", T.INT32),
    np.dtype(np.int16): ("int32_data", T.INT16), np.dtype(np.uint16): ("int32_data", T.UINT16),
    np.dtype(np.int8): ("int32_data", T.INT8), np.dtype(np.uint8): ("int32_data", T.UINT8),
    np.dtype(np.bool_): ("int32_data", T.BOOL), np.dtype(np.float16): ("int32_data", T.FLOAT16),
}
_BY_CODE = {code: (field, dtype) for dtype, (field, code) in _FIELDS.items()}


class BlobSerdeError(DSLError, RuntimeError):
    """A value with no BlobProto form, or bytes that are not one dslc can read."""


def serialize(name: str, value) -> bytes:
    """The BlobProto bytes of ``value`` named ``name``."""
    proto = caffe2_pb2.BlobProto(name=name)
    if isinstance(value, (bytes, str)):
        proto.type = "std::string"
        proto.content = value.encode("utf-8") if isinstance(value, str) else value
        return proto.SerializeToString()
    arr = np.asarray(value)
    proto.type = "Tensor"
    t = proto.tensor
    t.dims.extend(arr.shape)
    t.name = name  # (the fields Caffe2's serializer sets, in its order: the bytes come out as its)
    t.device_detail.device_type = caffe2_pb2.CPU
    t.segment.begin, t.segment.end = 0, arr.size
    if arr.dtype == np.float32:  # (Caffe2 names the format of float32 data only)
        t.data_format = T.FMT_PROTOBUF
    if arr.dtype.kind in "OSU":
        t.data_type = T.STRING
        t.string_data.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in arr.reshape(-1))
        return proto.SerializeToString()
    got = _FIELDS.get(arr.dtype)
    if got is None:
        raise BlobSerdeError(f"blob {name!r} holds {arr.dtype} values, which have no TensorProto form",
                             hint="cast it to a float or integer dtype first")
    field, code = got
    t.data_type = code
    flat = arr.reshape(-1)
    if arr.dtype == np.float16:
        flat = flat.view(np.uint16)
    getattr(t, field).extend((flat.astype(np.int64) if field.startswith("int") else flat).tolist())
    return proto.SerializeToString()


def deserialize(data: bytes):
    """(name, value) of BlobProto bytes."""
    proto = caffe2_pb2.BlobProto()
    try:
        proto.ParseFromString(bytes(data))
    except Exception as e:
        raise BlobSerdeError(f"not a serialized BlobProto: {e}", hint="pass what SerializeBlob gave") from None
    if proto.type == "std::string" or (not proto.HasField("tensor") and proto.HasField("content")):
        return proto.name, proto.content
    t = proto.tensor
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise BlobSerdeError(f"blob {proto.name!r} has negative dims {list(dims)}")
    if t.data_type == T.STRING:
        values = np.array([s.decode("utf-8", "surrogateescape") for s in t.string_data], dtype=object)
        dtype = np.dtype(object)
    else:
        got = _BY_CODE.get(t.data_type)
        if got is None:
            raise BlobSerdeError(f"blob {proto.name!r} has TensorProto data type {t.data_type}, which dslc "
                                 "does not read")
        field, dtype = got
        check_size("DeserializeBlob", dims, dtype)
        raw = getattr(t, field)
        values = np.asarray(raw, dtype=np.uint16).view(np.float16) if dtype == np.float16 else \
            np.asarray(raw, dtype=dtype)
    if values.size != int(np.prod(dims, dtype=np.int64)):
        raise BlobSerdeError(f"blob {proto.name!r} has dims {list(dims)} but {values.size} values")
    return proto.name, values.reshape(dims)
