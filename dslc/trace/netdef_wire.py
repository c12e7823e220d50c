"""A serialized NetDef whose fills hold large tensors, read at the speed of its bytes.

Protobuf's Python messages hold a fill's values as a repeated field: turning 144M floats
into a message and then into an array takes twice their memory and seconds per 100M.
Here a serialized NetDef is cut at its large ``Argument``s of numbers (a GivenTensorFill's
``values``): each becomes a numpy array read straight off the bytes (a view of the
5-byte records ``tag, float32`` copied once into a contiguous array; varints decoded
with whole-array operations), and the rest, now small, is parsed by protobuf as usual.

    msg, bulk = split(data, loc)     # bulk: {(op index, arg name): ndarray}
    NetDef{op {type: "GivenTensorFill" arg {name: "values" floats: 0.5 floats: ...}}}
    -> msg: NetDef{op {type: "GivenTensorFill"}}, bulk: {(0, "values"): array([0.5, ...])}

Every length read from the input is checked against the bytes present before it is
used, and each array is no larger than the bytes it comes from (so within what the
input already takes; the budget of ir/budget.py is checked too). Bytes that are not a
NetDef are a ProtoError, as protobuf's own parse would report them.
"""
from __future__ import annotations

import numpy as np

from dslc.ir import budget
from dslc.ir.diagnostics import Location
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.netdef import ProtoError, varint_bytes

# an argument of at least this many bytes is read here; smaller ones are left to protobuf
BULK_BYTES = 1 << 16

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_NET_OP = caffe2_pb2.NetDef.DESCRIPTOR.fields_by_name["op"].number
_OP_ARG = caffe2_pb2.OperatorDef.DESCRIPTOR.fields_by_name["arg"].number
_ARG = {f.name: f.number for f in caffe2_pb2.Argument.DESCRIPTOR.fields}
_FLOATS, _INTS, _NAME = _ARG["floats"], _ARG["ints"], _ARG["name"]
_FLOAT_TAG = _FLOATS << 3 | _I32  # one unpacked float: this byte, then 4 bytes little-endian
_INT_TAG = _INTS << 3 | _VARINT  # one unpacked int: this byte, then a varint


class _Bad(Exception):
    """Bytes that are not protobuf's wire form (reported as a ProtoError by ``split``)."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Bad("a varint runs past its message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf, pos: int, end: int):
    """(number, wire type, key, start, stop) of each field of the message in ``buf[pos:end]``:
    ``key`` where the field begins; for a LEN field start:stop is its payload, for the
    others its value's bytes."""
    while pos < end:
        at = pos
        key, pos = _varint(buf, pos, end)
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            _, stop = _varint(buf, pos, end)
        elif kind == _LEN:
            n, pos = _varint(buf, pos, end)
            stop = pos + n
        elif kind == _I32:
            stop = pos + 4
        elif kind == _I64:
            stop = pos + 8
        else:
            raise _Bad(f"wire type {kind} of field {number}")
        if stop > end:
            raise _Bad(f"field {number} claims more bytes than its message holds")
        yield number, kind, at, pos, stop
        pos = stop


def _run_length(ok) -> int:
    """How many leading elements of the boolean array ``ok`` are true."""
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if bad.size else ok.size


def _float_run(raw: np.ndarray, pos: int, end: int) -> int:
    """How many unpacked floats follow one another from ``pos`` (the first is one).
    The window doubles while it is all floats: a run of n costs O(n), however runs mix."""
    n, window = 0, 64
    while True:
        count = min(window, (end - pos) // 5 - n)
        if count <= 0:
            return n
        tags = raw[pos + 5 * n: pos + 5 * (n + count): 5]
        k = _run_length(tags == _FLOAT_TAG)
        n += k
        if k < count:
            return n
        window *= 2


def _int_run(raw: np.ndarray, pos: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, stops) of the varints of the unpacked ints that follow one another from
    ``pos`` (each a tag byte, then its varint), window doubling as in ``_float_run``."""
    starts, stops, window = [], [], 256
    while pos < end:
        chunk = raw[pos: min(end, pos + window)]
        last = np.flatnonzero(chunk < 0x80)  # the last byte of each tag and varint
        pairs = last.size // 2
        tag_at, value_end = last[0: 2 * pairs: 2], last[1: 2 * pairs: 2]
        prev_end = np.concatenate(([-1], value_end[:-1]))
        ok = (tag_at == prev_end + 1) & (chunk[tag_at] == _INT_TAG) & (value_end - tag_at <= 10)
        k = _run_length(ok)
        if k:
            starts.append(pos + tag_at[:k] + 1)
            stops.append(pos + value_end[:k] + 1)
        if k < pairs or k == 0:
            break
        pos += int(value_end[k - 1]) + 1
        window *= 2
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(stops)


def _decode_varints(raw: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The int64 values of the varints at ``raw[starts[i]:stops[i]]`` (at most 10 bytes each)."""
    out = np.zeros(starts.size, np.uint64)
    lengths = stops - starts
    if lengths.size and (lengths.min() < 1 or lengths.max() > 10):
        raise _Bad("a varint longer than 10 bytes")
    for j in range(int(lengths.max()) if lengths.size else 0):
        has = lengths > j
        byte = raw[starts[has] + j].astype(np.uint64) & np.uint64(0x7F)
        out[has] |= byte << np.uint64(7 * j)
    return out.view(np.int64)


def _packed_varints(raw: np.ndarray, start: int, stop: int) -> np.ndarray:
    last = np.flatnonzero(raw[start:stop] < 0x80)
    if stop > start and (last.size == 0 or last[-1] != stop - start - 1):
        raise _Bad("a packed varint runs past its field")
    starts = np.concatenate(([0], last[:-1] + 1)) + start if last.size else last
    return _decode_varints(raw, starts, last + start + 1)


def _numbers(buf, raw: np.ndarray, start: int, stop: int, name: str):
    """The argument message at ``buf[start:stop]``: (its name, its numbers as one array) when
    it holds only a name and floats or ints (unpacked or packed), else None."""
    arg_name, spans, kind = None, [], None  # spans: (how, start(s), count or stop(s)) in order; kind: floats|ints
    pos = start
    while pos < stop:
        key, body = _varint(buf, pos, stop)
        number, wire = key >> 3, key & 7
        if number == _FLOATS and wire == _I32:
            n = _float_run(raw, pos, stop)
            spans.append(("floats", pos, n))
            pos += 5 * n
        elif number == _INTS and wire == _VARINT:
            starts, stops = _int_run(raw, pos, stop)
            if not starts.size:
                raise _Bad("an int field with no value")
            spans.append(("ints", starts, stops))
            pos = int(stops[-1])
        elif wire == _LEN:
            n, body = _varint(buf, body, stop)
            if body + n > stop:
                raise _Bad(f"field {number} of argument claims more bytes than it holds")
            if number == _NAME:
                try:
                    arg_name = bytes(buf[body: body + n]).decode()
                except UnicodeDecodeError:
                    return None
            elif number == _FLOATS and n % 4 == 0:
                spans.append(("packed floats", body, n // 4))
            elif number == _INTS:
                spans.append(("packed ints", body, body + n))
            else:
                return None
            pos = body + n
        else:
            return None
        if spans and kind != spans[-1][0].split()[-1]:
            if kind is not None:
                return None  # (floats and ints in one argument: protobuf's parse says what it is)
            kind = spans[-1][0].split()[-1]
    if arg_name is None or kind is None:
        return None
    if kind == "floats":
        total = sum(s[2] for s in spans)
        budget.check_size(name, (total,), np.float32, error=ProtoError)
        out = np.empty(total, np.float32)
        at = 0
        for how, first, n in spans:
            if how == "floats":  # (records of 5 bytes: the float is at 1..5 of each)
                view = np.ndarray((n,), "<f4", buffer=raw, offset=first + 1, strides=(5,))
            else:
                view = np.frombuffer(raw, "<f4", n, first)
            out[at: at + n] = view
            at += n
        return arg_name, out
    parts = [_decode_varints(raw, a, b) if how == "ints" else _packed_varints(raw, a, b) for how, a, b in spans]
    return arg_name, parts[0] if len(parts) == 1 else np.concatenate(parts)


def _op_without_bulk(buf, raw, start: int, stop: int, name: str):
    """The op at ``buf[start:stop]`` with its large number arguments taken out: (its bytes,
    {arg name: array}), or None when it has none."""
    kept, bulk, at = [], {}, start
    for number, kind, key_start, body, end in _fields(buf, start, stop):
        if number == _OP_ARG and kind == _LEN and end - body >= BULK_BYTES:
            got = _numbers(buf, raw, body, end, name)
            if got is not None:
                kept.append(bytes(buf[at:key_start]))
                at = end
                bulk[got[0]] = got[1]
    if not bulk:
        return None
    kept.append(bytes(buf[at:stop]))
    return b"".join(kept), bulk


def split(data, loc: Location | None, what: str = "the net"):
    """(the NetDef of ``data`` without its large number arguments, {(op index, arg name):
    their arrays}). Small inputs are parsed by protobuf whole (an empty dict)."""
    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    if len(buf) < BULK_BYTES:
        return caffe2_pb2.NetDef.FromString(bytes(buf)), {}
    raw = np.frombuffer(buf, np.uint8)
    parts, bulk, at, index = [], {}, 0, 0
    try:
        for number, kind, key_start, body, end in _fields(buf, 0, len(buf)):
            if number != _NET_OP or kind != _LEN:
                continue
            if end - body >= BULK_BYTES:
                got = _op_without_bulk(buf, raw, body, end, what)
                if got is not None:
                    parts.append(bytes(buf[at:key_start]))
                    op_bytes, arrays = got
                    parts.append(varint_bytes(_NET_OP << 3 | _LEN) + varint_bytes(len(op_bytes)) + op_bytes)
                    at = end
                    bulk.update({(index, k): v for k, v in arrays.items()})
            index += 1
    except _Bad as e:
        raise ProtoError(f"{what} is not a serialized NetDef: {e}", loc,
                         "pass a NetDef (or what its SerializeToString() gave)") from None
    parts.append(bytes(buf[at:]))
    rest = b"".join(parts) if bulk else bytes(buf)
    try:
        return caffe2_pb2.NetDef.FromString(rest), bulk
    except Exception as e:  # (protobuf's DecodeError: the rest is not a NetDef)
        raise ProtoError(f"{what} is not a serialized NetDef: {e}", loc,
                         "pass a NetDef (or what its SerializeToString() gave)") from None
