"""Caffe2's BlobProto form of a blob (``workspace.SerializeBlob``, ``Blob.serialize``, and
each record of a ``minidb``): a tensor as a TensorProto of its dims and typed data, a
string as content bytes. A big tensor may be cut into chunks, each a TensorProto whose
``segment`` is its [begin, end) range of the flattened elements.

Reading parses protobuf and fills a numpy array of a plain dtype, its size checked
against its dims and the memory bound first: nothing named by the bytes runs.
"""
from __future__ import annotations

import math
import re

import numpy as np
from google.protobuf import text_format

from dslc.ir.diagnostics import DSLError
from dslc.ir.budget import check_size
from dslc.ir.escape import brief
from .datasets import Mutex
from .packed import ObjectMap, PackedRecords
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


# Caffe2's type names of the ReservoirSampling layer's state (its parameters, which a
# model's checkpoint serializes): a mutex, the id -> slot map, the reservoir of packed records
_MUTEX, _MAP, _RECORDS = ("std::unique_ptr<std::mutex>", "(std::unordered_map<int64_t, int32_t>)",
                          "std::shared_ptr<std::vector<TensorCPU>>")


def serialize(name: str, value) -> bytes:
    """The BlobProto bytes of ``value`` named ``name`` (one chunk)."""
    if isinstance(value, (Mutex, ObjectMap, PackedRecords)):
        return _state_bytes(name, value)
    return next(chunks(name, value, 0))[1]


def _state_bytes(name: str, value) -> bytes:
    """Caffe2's forms: a mutex is its type alone; a map two tensors (ids int64, slots int32);
    packed records a tensor of one typed-but-empty BlobProto per record (Caffe2 writes no
    record's data, so the reservoir reads back empty: ReservoirSampling then starts afresh)."""
    if isinstance(value, Mutex):
        return caffe2_pb2.BlobProto(name=name, type=_MUTEX, content=b"").SerializeToString()
    if isinstance(value, ObjectMap):
        keys = np.fromiter(value.keys(), np.int64, len(value))
        slots = np.fromiter(value.values(), np.int32, len(value))
        pair = caffe2_pb2.TensorProtos()
        for arr in (keys, slots):
            pair.protos.add().ParseFromString(_tensor_bytes_of(arr))
        return caffe2_pb2.BlobProto(name=name, type=_MAP, content=pair.SerializeToString()).SerializeToString()
    proto = caffe2_pb2.BlobProto(name=name, type="Tensor")
    t = proto.tensor
    t.dims.append(len(value))
    t.data_type = T.UNDEFINED
    t.string_data.extend([caffe2_pb2.BlobProto(name="", type=_RECORDS, content=b"").SerializeToString()] * len(value))
    t.name = name
    t.device_detail.device_type = caffe2_pb2.CPU
    t.segment.begin, t.segment.end = 0, len(value)
    return proto.SerializeToString()


def _tensor_bytes_of(arr: np.ndarray) -> bytes:
    """The TensorProto bytes of a whole 1-D tensor (no name)."""
    proto = caffe2_pb2.BlobProto()
    proto.ParseFromString(_tensor_bytes("", arr, arr, 0, arr.size))
    proto.tensor.ClearField("name")
    return proto.tensor.SerializeToString()


def _state_value(name: str, proto):
    """The value of a BlobProto of one of ``_state_bytes``' forms."""
    if proto.type == _MUTEX:
        return Mutex()
    pair = caffe2_pb2.TensorProtos()
    try:
        pair.ParseFromString(proto.content)
    except Exception as e:
        raise BlobSerdeError(f"blob {name!r}: not a serialized map: {e}") from None
    if len(pair.protos) != 2:
        raise BlobSerdeError(f"blob {name!r}: a serialized map holds ids and slots, got {len(pair.protos)} tensors")
    keys, slots = (assemble(name, [caffe2_pb2.BlobProto(type="Tensor", tensor=t)]) for t in pair.protos)
    if keys.shape != slots.shape or keys.ndim != 1:
        raise BlobSerdeError(f"blob {name!r}: a serialized map has {keys.size} ids for {slots.size} slots")
    return ObjectMap(zip(keys.tolist(), slots.tolist()))


def chunks(name: str, value, chunk_size: int = DEFAULT_CHUNK, bfloat16: bool = False):
    """(chunk id, BlobProto bytes) of ``value``: a tensor in chunks of ``chunk_size`` elements
    (0 or less: one), anything else in one. ``bfloat16``: float32 data is written as
    bfloat16 (Caffe2's FLOAT_BFLOAT16 option: raw_data of the rounded top halves)."""
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
        yield k, _tensor_bytes(name, arr, flat, begin, min(begin + step, size), bfloat16)


def to_bfloat16(x) -> np.ndarray:
    """The bfloat16 bits (uint16) of float32 ``x``, rounded to nearest, ties away from zero
    (Caffe2's fbgemm conversion: the bits + 0x8000, cut); a NaN stays a NaN."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x8000) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def from_bfloat16(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _tensor_bytes(name, arr, flat, begin, end, bfloat16=False) -> bytes:
    proto = caffe2_pb2.BlobProto(name=name, type="Tensor")
    t = proto.tensor
    t.dims.extend(arr.shape)
    t.name = name  # (the fields Caffe2's serializer sets, in its order: the bytes come out as its)
    t.device_detail.device_type = caffe2_pb2.CPU
    t.segment.begin, t.segment.end = begin, end
    if arr.dtype == np.float32:  # (Caffe2 names the format of float32 data only)
        t.data_format = T.FMT_PROTOBUF
    part = flat[begin:end]
    if bfloat16 and arr.dtype == np.float32:
        t.data_type, t.data_format = T.FLOAT, T.FMT_BFLOAT16
        t.raw_data = to_bfloat16(part).astype("<u2").tobytes()
        return proto.SerializeToString()
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
    if first.type in (_MUTEX, _MAP):
        return _state_value(name, first)
    if first.type == "std::string" or (not first.HasField("tensor") and first.HasField("content")):
        return first.content
    t = first.tensor
    if t.data_type == T.UNDEFINED and t.string_data and _records(t):
        return PackedRecords([])  # (Caffe2 writes no record's data: an empty reservoir, as it reads one)
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
    bf16 = t.data_type == T.FLOAT and t.data_format == T.FMT_BFLOAT16
    if bf16:
        field = "raw_data"
    size = math.prod(dims)
    spans = _spans(name, protos, field, dims, t.data_type, size)
    try:
        check_size("Load", dims, np.dtype(np.float64) if dtype.kind == "O" else dtype)
    except DSLError as e:
        raise BlobSerdeError(f"blob {name!r}: {e.message}", hint=e.hint) from None
    out = np.empty(size, dtype=dtype)
    for p, (begin, end) in zip(protos, spans):
        raw = getattr(p.tensor, field)
        if bf16:
            out[begin:end] = from_bfloat16(np.frombuffer(raw, "<u2"))
        elif dtype.kind == "O":
            out[begin:end] = [s.decode("utf-8", "surrogateescape") for s in raw]
        elif dtype == np.float16:
            out[begin:end] = np.asarray(raw, dtype=np.uint16).view(np.float16)
        else:
            out[begin:end] = np.asarray(raw, dtype=dtype)
    return out.reshape(dims)


def _records(t) -> bool:
    """Whether every entry of an UNDEFINED tensor is Caffe2's typed-but-empty packed record."""
    inner = caffe2_pb2.BlobProto()
    for raw in t.string_data:
        try:
            inner.ParseFromString(raw)
        except Exception:
            return False
        if inner.type != _RECORDS:
            return False
    return True


def _spans(name: str, protos: list, field: str, dims: tuple, data_type: int, size: int) -> list:
    """The [begin, end) element range of each chunk, after checking that the chunks agree
    on the dims and the data type and hold each of the ``size`` elements exactly once."""
    spans = []
    for p in protos:
        c = p.tensor
        if tuple(c.dims) != dims or c.data_type != data_type or (field == "raw_data") != (c.data_format == T.FMT_BFLOAT16):
            raise BlobSerdeError(f"the chunks of blob {name!r} disagree on its dims or data type")
        if field == "raw_data" and len(c.raw_data) % 2:
            raise BlobSerdeError(f"a chunk of blob {name!r} holds bfloat16 data of an odd {len(c.raw_data)} bytes")
        held = len(c.raw_data) // 2 if field == "raw_data" else len(getattr(c, field))
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


def estimate_size(name: str, value, chunk_size: int = 0, bfloat16: bool = False) -> int:
    """Caffe2's estimate of the bytes ``value`` takes serialized under ``name`` (Save's
    ``chunk_size``: 0 the default 1,000,000 elements, -1 one chunk; ``bfloat16``: float32
    written as bfloat16, 2 bytes each); 0 for a value with no BlobProto form (a queue, a mutex)."""
    if isinstance(value, (bytes, str)):
        return len(name) + len(value.encode("utf-8") if isinstance(value, str) else value) + 20
    if not isinstance(value, np.ndarray):
        return 0
    n = value.size
    step = DEFAULT_CHUNK if chunk_size == 0 else n + 1 if chunk_size < 0 else int(chunk_size)
    per = 50 if value.dtype == object else _ESTIMATE_PER_ELEMENT.get(value.dtype.kind, {}).get(value.dtype.itemsize,
                                                                                                value.dtype.itemsize)
    if bfloat16 and value.dtype == np.float32:
        per = 2
    return -(-n // step) * (len(name) + _CHUNK_OVERHEAD) + n * per


# SerializationOptions' float formats: FLOAT_DEFAULT, FLOAT_PROTOBUF (the same), FLOAT_BFLOAT16
_FLOAT_FORMATS = {0: False, 1: False, 2: True}


def save_rules(options) -> list:
    """[(compiled blob_name_regex, chunk_size or None, float32 as bfloat16)] of a
    SerializationOptions argument, in order; ValueError if it is not one, names a float
    format dslc does not write, or holds a bad regex."""
    rules = []
    for opt in serialization_options(options):
        if opt.float_format not in _FLOAT_FORMATS:
            raise ValueError(f"the option for {opt.blob_name_regex!r} asks for float format {opt.float_format}, "
                             "which dslc does not write (FLOAT_DEFAULT, FLOAT_PROTOBUF, FLOAT_BFLOAT16)")
        try:
            regex = re.compile(opt.blob_name_regex)
        except re.error as e:
            raise ValueError(f"blob_name_regex {opt.blob_name_regex!r} is not a regex: {e}") from None
        rules.append((regex, opt.chunk_size if opt.HasField("chunk_size") else None, _FLOAT_FORMATS[opt.float_format]))
    return rules


def rule_for(name: str, rules: list):
    """The first rule whose regex matches all of ``name`` (std::regex_match, as Caffe2 picks), or None."""
    return next((r for r in rules if r[0].fullmatch(name)), None)


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
