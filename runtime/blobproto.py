"""Caffe2's BlobProto form of a blob (``workspace.SerializeBlob``, ``Blob.serialize``, and
each record of a ``minidb``): a tensor as a TensorProto of its dims and typed data, a
string as content bytes. A big tensor may be cut into chunks, each a TensorProto whose
``segment`` is its [begin, end) range of the flattened elements.

Reading parses protobuf and fills a numpy array of a plain dtype, its size checked
against its dims and the memory bound first: nothing named by the bytes runs.
"""
from __future__ import annotations

import math

import numpy as np
from google.protobuf import text_format

from dslc.ir.diagnostics import DSLError
from dslc.ir.budget import check_size
from dslc.ir.escape import brief
from .proto import caffe2 as caffe2_pb2

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
# (the fixed-width fields, written as raw little-endian bytes: a packed repeated field of
# floats or doubles is exactly those bytes, so a big tensor skips protobuf's per-element work)
_RAW = {np.dtype(np.float32): ("float_data", "<f4"), np.dtype(np.float64): ("double_data", "<f8")}
_TENSOR_FIELD = caffe2_pb2.BlobProto.DESCRIPTOR.fields_by_name["tensor"].number
DEFAULT_CHUNK = 1_000_000  # elements per chunk when Save is not told (Caffe2's default)


class BlobSerdeError(DSLError, RuntimeError):
    """A value with no BlobProto form, or bytes that are not one dslc can read."""


def serialize(name: str, value) -> bytes:
    """The BlobProto bytes of ``value`` named ``name`` (one chunk)."""
    return next(chunks(name, value, 0))[1]


def chunks(name: str, value, chunk_size: int = DEFAULT_CHUNK):
    """(chunk id, BlobProto bytes) of ``value``: a tensor in chunks of ``chunk_size`` elements
    (0 or less: one), anything else in one."""
    if isinstance(value, (bytes, str)) or (isinstance(value, np.ndarray) and value.dtype == object
                                           and value.ndim == 0 and isinstance(value[()], bytes)):
        proto = caffe2_pb2.BlobProto(name=name, type="std::string")
        v = value[()] if isinstance(value, np.ndarray) else value
        proto.content = v.encode("utf-8") if isinstance(v, str) else v
        yield 0, proto.SerializeToString()
        return
    arr = np.asarray(value)
    size = arr.size
    step = size if chunk_size <= 0 or chunk_size >= size else int(chunk_size)
    flat = arr.reshape(-1)
    for k, begin in enumerate(range(0, max(size, 1), max(step, 1))):
        yield k, _tensor_bytes(name, arr, flat, begin, min(begin + step, size))


def _tensor_bytes(name, arr, flat, begin, end) -> bytes:
    proto = caffe2_pb2.BlobProto(name=name, type="Tensor")
    t = proto.tensor
    t.dims.extend(arr.shape)
    t.name = name  # (the fields Caffe2's serializer sets, in its order: the bytes come out as its)
    t.device_detail.device_type = caffe2_pb2.CPU
    t.segment.begin, t.segment.end = begin, end
    if arr.dtype == np.float32:  # (Caffe2 names the format of float32 data only)
        t.data_format = T.FMT_PROTOBUF
    part = flat[begin:end]
    if arr.dtype.kind in "OSU":
        t.data_type = T.STRING
        t.string_data.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in part)
        return proto.SerializeToString()
    got = _FIELDS.get(arr.dtype)
    if got is None:
        raise BlobSerdeError(f"blob {name!r} holds {arr.dtype} values, which have no TensorProto form",
                             hint="cast it to a float or integer dtype first")
    field, code = got
    t.data_type = code
    raw = _RAW.get(arr.dtype)
    if raw is None or not part.size:
        if arr.dtype == np.float16:
            part = part.view(np.uint16)
        getattr(t, field).extend((part.astype(np.int64) if field.startswith("int") else part).tolist())
        return proto.SerializeToString()
    # the tensor's other fields by protobuf, its data spliced in as one packed field where
    # the field's number puts it (protobuf writes fields in number order, as Caffe2 does:
    # the bytes are the ones it writes)
    number = T.DESCRIPTOR.fields_by_name[raw[0]].number
    data = np.ascontiguousarray(part, dtype=raw[1]).tobytes()
    low, high = T(), T()
    low.CopyFrom(t)
    high.CopyFrom(t)
    for f in T.DESCRIPTOR.fields:
        if f.number > number:
            low.ClearField(f.name)
        elif f.number < number:
            high.ClearField(f.name)
    tensor = (low.SerializeToString() + _varint(number << 3 | 2) + _varint(len(data)) + data
              + high.SerializeToString())
    proto.ClearField("tensor")
    return proto.SerializeToString() + _varint(_TENSOR_FIELD << 3 | 2) + _varint(len(tensor)) + tensor


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def parse(data) -> caffe2_pb2.BlobProto:
    proto = caffe2_pb2.BlobProto()
    try:
        proto.ParseFromString(bytes(data))
    except Exception as e:
        raise BlobSerdeError(f"not a serialized BlobProto: {e}", hint="pass what SerializeBlob gave") from None
    return proto


def deserialize(data: bytes):
    """(name, value) of BlobProto bytes."""
    proto = parse(data)
    return proto.name, assemble(proto.name, [proto])


def assemble(name: str, protos: list):
    """The value stored as the chunks ``protos`` (BlobProtos of one blob, in any order):
    every element must be covered once. Every chunk is checked before anything is
    allocated: the dims are the file's word, the values it holds are what it has (a
    file of a few bytes may declare a tensor of any size)."""
    first = protos[0]
    if first.type == "std::string" or (not first.HasField("tensor") and first.HasField("content")):
        return first.content
    t = first.tensor
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise BlobSerdeError(f"blob {name!r} has negative dims {brief(list(dims))}")
    if t.data_type == T.STRING:
        field, dtype = "string_data", np.dtype(object)
    else:
        got = _BY_CODE.get(t.data_type)
        if got is None:
            raise BlobSerdeError(f"blob {name!r} has TensorProto data type {t.data_type}, which dslc "
                                 "does not read")
        field, dtype = got
    size = math.prod(dims)
    spans = _spans(name, protos, field, dims, t.data_type, size)
    try:
        check_size("Load", dims, np.dtype(np.float64) if dtype.kind == "O" else dtype)
    except DSLError as e:
        raise BlobSerdeError(f"blob {name!r}: {e.message}", hint=e.hint) from None
    out = np.empty(size, dtype=dtype)
    for p, (begin, end) in zip(protos, spans):
        raw = getattr(p.tensor, field)
        if dtype.kind == "O":
            out[begin:end] = [s.decode("utf-8", "surrogateescape") for s in raw]
        elif dtype == np.float16:
            out[begin:end] = np.asarray(raw, dtype=np.uint16).view(np.float16)
        else:
            out[begin:end] = np.asarray(raw, dtype=dtype)
    return out.reshape(dims)


def _spans(name: str, protos: list, field: str, dims: tuple, data_type: int, size: int) -> list:
    """The [begin, end) element range of each chunk, after checking that the chunks agree
    on the dims and the data type and hold each of the ``size`` elements exactly once."""
    spans = []
    for p in protos:
        c = p.tensor
        if tuple(c.dims) != dims or c.data_type != data_type:
            raise BlobSerdeError(f"the chunks of blob {name!r} disagree on its dims or data type")
        held = len(getattr(c, field))
        begin, end = (c.segment.begin, c.segment.end) if c.HasField("segment") else (0, held)
        if not 0 <= begin <= end <= size or end - begin != held:
            raise BlobSerdeError(f"a chunk of blob {name!r} holds {held} values for elements "
                                 f"[{begin}, {end}) of {size}")
        spans.append((begin, end))
    at = 0
    for begin, end in sorted(spans):  # (every element once: no gap, no overlap)
        if begin != at:
            break
        at = end
    if at != size or len(spans) > 1 and any(b == e for b, e in spans):
        held = sum(e - b for b, e in spans)
        raise BlobSerdeError(f"blob {name!r} has dims {brief(list(dims))} but {held} values (its chunks must "
                             "hold each element once)")
    return spans


# Bytes per element of a tensor's serialized data, as Caffe2 estimates them: varint-coded
# narrow ints take about 2 (8-bit) or 3 (16-bit) bytes; a string about 50 (its length is not
# looked at). Each chunk adds the blob name and ~50 bytes of fixed TensorProto fields.
_ESTIMATE_PER_ELEMENT = {"f": {2: 3, 4: 4, 8: 8}, "i": {1: 2, 2: 3, 4: 4, 8: 8}, "u": {1: 2, 2: 3, 4: 4, 8: 8},
                         "b": {1: 1}}
_CHUNK_OVERHEAD = 50


def estimate_size(name: str, value, chunk_size: int = 0) -> int:
    """Caffe2's estimate of the bytes ``value`` takes serialized under ``name`` (Save's
    ``chunk_size``: 0 the default 1,000,000 elements, -1 one chunk); 0 for a value with no
    BlobProto form (a queue, a mutex)."""
    if isinstance(value, (bytes, str)):
        return len(name) + len(value.encode("utf-8") if isinstance(value, str) else value) + 20
    if not isinstance(value, np.ndarray):
        return 0
    n = value.size
    step = DEFAULT_CHUNK if chunk_size == 0 else n + 1 if chunk_size < 0 else int(chunk_size)
    per = 50 if value.dtype == object else _ESTIMATE_PER_ELEMENT.get(value.dtype.kind, {}).get(value.dtype.itemsize,
                                                                                                value.dtype.itemsize)
    return -(-n // step) * (len(name) + _CHUNK_OVERHEAD) + n * per


def serialization_options(options) -> list:
    """The entries of a SerializationOptions argument (a message, its bytes, or the text form
    the IR keeps a message argument in), in order; [] for none. ValueError if it is not one."""
    if not options:
        return []
    if hasattr(options, "options"):
        return list(options.options)
    msg = caffe2_pb2.SerializationOptions()
    try:
        if isinstance(options, str):
            text_format.Parse(options, msg)
        else:
            msg.ParseFromString(bytes(options))
    except Exception as e:
        raise ValueError(f"not a SerializationOptions message: {e}") from None
    return list(msg.options)
