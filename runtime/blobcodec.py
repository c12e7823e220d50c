"""Blob values to bytes and back, without pickle: every kind has an explicit encoding.

    numpy number/bool tensor  -> kind "tensor",  dtype "<f4", shape, the raw C-order bytes
    str tensor or str scalar  -> kind "strings", shape; u64 byte lengths, then UTF-8 text
    bytes tensor              -> kind "bytes",   shape; u64 lengths, then the bytes
    Counter                   -> kind "counter", i64 [count, init_count]
    TreeCursor (datasets)     -> kind "cursor", JSON {"fields": [...], "offsets": [...]}
    anything else             -> a kind registered with ``register`` (cursors, ...), or an error

Decoding only ever builds numpy arrays of plain dtypes, strings, and the objects of
registered kinds from their own bytes: no code named by a checkpoint file runs.
The database formats (``dbfile``, ``dblmdb``) store an ``Encoded``'s payload and
keep its kind, dtype and shape in their manifest.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dslc.ir import budget
from dslc.ir.diagnostics import DSLError
from dslc.ir.escape import brief

from .resources import Counter

# dtypes a tensor payload may claim: numbers and bools only (no objects, no records).
_PLAIN_KINDS = frozenset("biuf")


class BlobEncodingError(DSLError):
    """A blob whose value has no safe encoding (a timer, a queue...), or a payload that
    does not decode as its manifest says."""


class Encoded(NamedTuple):
    """One blob ready to store: its kind, dtype (tensors only), shape and payload bytes.
    (A tuple: a save makes one per blob, and a checkpoint may have thousands.)"""

    kind: str
    dtype: str
    shape: tuple
    data: memoryview  # 1-D, byte-sized items

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


@dataclass(frozen=True, slots=True)
class Codec:
    """How to store objects of one Python class: ``encode(obj) -> bytes``, ``decode(bytes) -> obj``."""

    kind: str
    cls: type
    encode: object
    decode: object


_BY_KIND: dict[str, Codec] = {}
_BY_CLASS: dict[type, Codec] = {}


def register(cls: type, kind: str, encode, decode) -> None:
    """Let blobs holding ``cls`` objects be saved: ``encode(obj)`` gives bytes, ``decode``
    takes them back. Runtime resources that are checkpointable (counters here, dataset
    cursors in their own module) register themselves this way."""
    if kind in ("tensor", "strings", "bytes") or (kind in _BY_KIND and _BY_KIND[kind].cls is not cls):
        raise ValueError(f"blob kind {kind!r} is already taken")
    codec = Codec(kind, cls, encode, decode)
    _BY_KIND[kind] = codec
    _BY_CLASS[cls] = codec


def _bytes_view(buf) -> memoryview:
    mv = memoryview(buf)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def encode(name: str, value) -> Encoded:
    """The encoding of blob ``name``'s value; BlobEncodingError if it has none."""
    if type(value) is np.ndarray and value.size and value.ndim and value.dtype.kind in _PLAIN_KINDS \
            and value.flags.c_contiguous:
        # the common case first, in few steps: a checkpoint may hold thousands of small tensors
        return Encoded("tensor", value.dtype.str, value.shape, memoryview(value).cast("B"))
    codec = _BY_CLASS.get(type(value))
    if codec is not None:
        return Encoded(codec.kind, "", (), _bytes_view(bytes(codec.encode(value))))
    if isinstance(value, (str, bytes)):
        value = np.array(value, dtype=object)
    elif isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, (np.ndarray, np.generic)):
        what = "nothing (it was never written)" if value is None else f"a {type(value).__name__}"
        raise BlobEncodingError(
            f"blob {name!r} holds {what}, which a checkpoint cannot store", hint=(
                "save tensors, strings and counters only: leave timers, queues and mutexes out of "
                "the Save's inputs" if value is not None else "write the blob before saving it"))
    arr = np.asarray(value)
    if arr.dtype.kind in "OUS":
        return _encode_texts(name, arr)
    if arr.dtype.kind not in _PLAIN_KINDS:
        raise BlobEncodingError(f"blob {name!r} has dtype {arr.dtype}, which a checkpoint cannot store",
                                hint="cast it to a number type first")
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-D)
        arr = arr.copy(order="C")
    return Encoded("tensor", arr.dtype.str, arr.shape, _bytes_view(arr.reshape(-1).view(np.uint8)))


def _encode_texts(name: str, arr: np.ndarray) -> Encoded:
    flat = arr.reshape(-1)
    if all(isinstance(x, bytes) for x in flat) and flat.size:
        kind, parts = "bytes", list(flat)
    elif all(isinstance(x, str) for x in flat):
        kind, parts = "strings", [x.encode("utf-8", "surrogatepass") for x in flat]
    else:
        odd = next(x for x in flat if not isinstance(x, str))
        raise BlobEncodingError(f"blob {name!r} is an object tensor holding a {type(odd).__name__}",
                                hint="object tensors can be saved when every element is a str "
                                     "(or every one is bytes)")
    lengths = np.array([len(p) for p in parts], dtype="<u8")
    payload = lengths.tobytes() + b"".join(parts)
    return Encoded(kind, "", arr.shape, _bytes_view(payload))


def decode(name: str, kind: str, dtype: str, shape, data) -> object:
    """The blob value stored as (kind, dtype, shape, data): a numpy value (a scalar for
    rank 0, a str for a rank-0 string), or an object of a registered kind."""
    shape = tuple(int(d) for d in shape)
    try:
        if kind == "tensor":
            return _decode_tensor(dtype, shape, data)
        if kind in ("strings", "bytes"):
            return _decode_texts(kind, shape, data)
        codec = _BY_KIND.get(kind)
        if codec is None:
            raise ValueError(f"unknown blob kind {kind!r}")
        return codec.decode(bytes(data))
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, OverflowError, RecursionError) as e:
        raise BlobEncodingError(f"blob {name!r} does not decode: {brief(e)}",
                                hint="the checkpoint was written by an incompatible program or is damaged") from None


def allocate(name: str, kind: str, dtype: str, shape, length: int) -> np.ndarray:
    """Where a stored payload of ``length`` bytes is read to: for a tensor, the array it
    becomes (so the read is its only copy), else a byte buffer for ``from_buffer``.
    ``length`` is what the file holds (its reader checked that first); no buffer is
    larger than one value may take (ir/budget.py)."""
    _check_budget(name, length)
    if kind != "tensor":
        return np.empty(length, dtype=np.uint8)
    try:
        dt, shape = _plain_dtype(dtype), tuple(int(d) for d in shape)
        # (checked before allocating: the shape is the file's word, the length the file's size)
        if min(shape, default=0) < 0 or math.prod(shape) * dt.itemsize != length:
            raise ValueError(f"{length} bytes for shape {brief(list(shape))} of {dt}")
        arr = np.empty(shape, dtype=dt)
    except (ValueError, TypeError, OverflowError) as e:
        raise BlobEncodingError(f"blob {name!r} does not decode: {e}",
                                hint="the checkpoint was written by an incompatible program or is damaged") from None
    return arr


def allocate_all(names: list, kinds: list, dtypes: list, shapes: list, lengths: list) -> list:
    """``allocate`` for many blobs at once (a checkpoint may hold thousands of small ones):
    the common case, a tensor whose shape is a list, in one step each."""
    out, empty, over = [], np.empty, budget.over
    for name, kind, dtype, shape, length in zip(names, kinds, dtypes, shapes, lengths):
        if kind == "tensor" and type(shape) is list and not over(length):
            try:
                dt = _plain_dtype(dtype)
                if all(type(d) is int and d >= 0 for d in shape) and math.prod(shape) * dt.itemsize == length:
                    out.append(empty(shape, dt))
                    continue
            except (ValueError, TypeError, OverflowError):
                pass
        out.append(allocate(name, kind, dtype, shape, length))  # (the others, and the errors)
    return out


def _check_budget(name: str, length: int) -> None:
    if budget.over(length):
        budget.check_bytes("", length, f"blob {name!r}", error=BlobEncodingError)


def from_buffer(name: str, kind: str, dtype: str, shape, buf: np.ndarray) -> object:
    """The blob value read into ``buf``, a buffer from ``allocate``."""
    if kind == "tensor":
        return buf[()] if buf.ndim == 0 else buf
    return decode(name, kind, dtype, shape, buf)


@functools.lru_cache(maxsize=256)  # (a checkpoint names the same few dtypes thousands of times)
def _plain_dtype(dtype: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.kind not in _PLAIN_KINDS or dt.hasobject or dt.fields is not None:
        raise ValueError(f"dtype {dtype!r} is not a plain number type")
    return dt


def _decode_tensor(dtype: str, shape: tuple, data) -> object:
    dt = _plain_dtype(dtype)
    buf = np.frombuffer(data, dtype=np.uint8)
    if min(shape, default=0) < 0 or math.prod(shape) * dt.itemsize != buf.size:  # (before any array)
        raise ValueError(f"{buf.size} bytes for shape {brief(list(shape))} of {dt}")
    arr = buf.view(dt).reshape(shape) if buf.size else np.zeros(shape, dt)
    return arr[()] if arr.ndim == 0 else arr


def _decode_texts(kind: str, shape: tuple, data) -> object:
    n = math.prod(int(d) for d in shape)  # (exact: a crafted shape must not wrap around)
    raw = bytes(data)
    if min(shape, default=0) < 0 or len(raw) < 8 * n:
        raise ValueError("the string lengths are cut off")
    lengths = np.frombuffer(raw, dtype="<u8", count=n)
    if sum(lengths.tolist()) != len(raw) - 8 * n:  # (Python ints: numpy's u64 sum wraps)
        raise ValueError("the string lengths do not add up to the payload")
    out, pos = np.empty(n, dtype=object), 8 * n
    for i, ln in enumerate(lengths.tolist()):
        piece = raw[pos:pos + ln]
        out[i] = piece if kind == "bytes" else piece.decode("utf-8", "surrogatepass")
        pos += ln
    return out[0] if shape == () else out.reshape(shape)


def _encode_counter(c: Counter) -> bytes:
    return np.array([c.count, c.init], dtype="<i8").tobytes()


def _decode_counter(raw: bytes) -> Counter:
    count, init = np.frombuffer(raw, dtype="<i8", count=2).tolist()
    c = Counter(init)
    c.count = count
    return c


register(Counter, "counter", _encode_counter, _decode_counter)


def _encode_cursor(c) -> bytes:
    return json.dumps({"fields": list(c.tree.fields), "offsets": [int(o) for o in c.offsets]}).encode("utf-8")


def _cursor_decoder(cls):
    def decode_cursor(raw: bytes):
        doc = json.loads(raw)
        c = cls([str(f) for f in doc["fields"]])
        offsets = [int(o) for o in doc["offsets"]]
        if len(offsets) != len(c.offsets) or min(offsets, default=0) < 0 or max(offsets, default=0) >= 1 << 62:
            raise ValueError(f"a cursor over {len(c.offsets)} domains cannot be at {offsets}")
        c.offsets = offsets
        return c
    return decode_cursor


try:  # dataset cursors are checkpointable (a checkpoint resumes reading where it stopped)
    from .datasets import TreeCursor
except ImportError:  # (the dataset runtime is optional to this module)
    TreeCursor = None
if TreeCursor is not None:
    register(TreeCursor, "cursor", _encode_cursor, _cursor_decoder(TreeCursor))
