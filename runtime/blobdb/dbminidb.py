"""``minidb``: Caffe2's one-file blob database, so that checkpoints and exported models
move between Caffe2 and dslc in both directions.

Layout (Caffe2's; int32 lengths in the machine's byte order, little-endian here):

    per record:  i32 key_len  i32 value_len  key  value

A key is ``<blob>#%<chunk id>``, its value the BlobProto of that chunk (blobproto.py):
a tensor is cut into chunks of ``chunk_size`` elements (Caffe2's default 1,000,000; 0 or
less: one chunk), and ``SerializationOptions`` may set another size per blob name
(the first option whose ``blob_name_regex`` matches).

Written as dslcdb is: to a temporary file, fsynced, renamed over ``path``, so a reader
sees the old file or the new one. Caffe2's format has no checksums: a file cut short is
found (a record runs past the end), a changed byte inside a value only where it breaks
the BlobProto; the default ``dslcdb`` checksums every byte. Reading parses protobuf into
plain numpy dtypes (nothing is unpickled or imported), every length checked against the
file's size before anything is allocated. Blobs Caffe2 has no form for (dslc's counters
and dataset cursors) are stored as BlobProtos of type ``dslc:<kind>`` with their codec's
bytes. A file in dslc's own format, which ``minidb`` named before, is read as dslcdb.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from dslc.ir.diagnostics import DSLError
from ..proto import caffe2 as caffe2_pb2

from .. import blobcodec, blobproto
from . import base, dbfile
from .base import CorruptDBError, DBTypeError, IncompleteDBError, MissingBlobError, MissingDBError

HEADER = struct.Struct("=ii")
SEPARATOR = "#%"
_OWN = "dslc:"  # (a BlobProto type naming one of dslc's registered blob kinds)
_CORRUPT_HINT = "the file is damaged or was not written by Save; restore it or save it again"


class MiniDB(base.KeyValueDB):
    name = "minidb"
    takes_save_options = True  # (Save passes chunk_size and SerializationOptions bytes)

    # --- writing
    def write(self, path: str, entries, chunk_size: int = -1, options="") -> None:
        rules = _rules(options)

        def fill(f):
            for name, enc in entries:
                rule = blobproto.rule_for(name, rules)
                for k, value in _records(name, enc, _chunk_size(rule, chunk_size), bool(rule and rule[2])):
                    key = f"{name}{SEPARATOR}{k}".encode("utf-8")
                    f.write(HEADER.pack(len(key), len(value)))
                    f.write(key)
                    f.write(value)

        dbfile.write_atomically(path, fill)

    # --- reading
    def read(self, path: str, names=None, values: bool = True):
        if _is_dslcdb(path):
            db = dbfile.FileDB()
            return db.read(path, names) if values else db.keys(path)
        records = _records_of(path)
        if not values:
            return list(records)
        wanted = list(records) if names is None else list(dict.fromkeys(names))
        missing = next((n for n in wanted if n not in records), None)
        if missing is not None:
            shown = sorted(records)
            listed = ", ".join(repr(n) for n in shown[:8]) + (" ..." if len(shown) > 8 else "")
            raise MissingBlobError(f"the checkpoint {path} has no blob {missing!r}",
                                   hint=f"pass allow_incomplete=True to skip blobs it lacks; it holds "
                                        f"{len(shown)} blobs: {listed}")
        out = {}
        with open(path, "rb") as f:
            for name in wanted:
                protos = []
                for offset, length in records[name]:
                    f.seek(offset)
                    try:
                        protos.append(blobproto.parse(f.read(length)))
                    except DSLError as e:
                        raise CorruptDBError(f"the minidb {path}, blob {name!r}: {e.message}",
                                             hint=_CORRUPT_HINT) from None
                out[name] = _value(path, name, protos)
        return out

    def exists(self, path: str) -> bool:
        if _is_dslcdb(path):
            return dbfile.FileDB().exists(path)
        try:
            _records_of(path)
            return True
        except base.DBError:
            return False


def _is_dslcdb(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(dbfile.MAGIC_SIZE) in dbfile.FORMATS
    except OSError:
        return False


def _records_of(path: str) -> dict:
    """{blob name: [(offset, length) of each chunk's value]} from the record headers."""
    out: dict = {}
    for key, offset, length in records(path):
        try:
            key = key.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptDBError(f"the minidb {path} has a key at byte {offset} that is not UTF-8",
                                 hint=_CORRUPT_HINT) from None
        name = key.rsplit(SEPARATOR, 1)[0] if SEPARATOR in key else key
        out.setdefault(name, []).append((offset, length))
    return out


def records(path: str):
    """(key bytes, value offset, value length) of each record of the minidb file at
    ``path``, in file order; every header checked against the file's size first."""
    if os.path.isdir(path):
        lmdb = os.path.exists(os.path.join(path, "data.mdb"))
        raise DBTypeError(f"{path} is " + ("an lmdb database; pass db_type='lmdb'" if lmdb else
                                           "a directory, not a minidb file"),
                          hint="give the db_type the checkpoint was saved with (lmdb and leveldb are directories)")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise MissingDBError(f"there is no checkpoint at {path}",
                             hint="check the db name and epoch (DBExists tells whether a checkpoint is there)") from None
    except OSError as e:
        raise base.DBError(f"cannot open the checkpoint {path}: {e.strerror}",
                             hint="check the file's permissions") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos < size:
            head = f.read(HEADER.size)
            if len(head) < HEADER.size:
                raise IncompleteDBError(f"the minidb {path} is cut short in a record header at byte {pos}",
                                        hint=_CORRUPT_HINT)
            key_len, value_len = HEADER.unpack(head)
            if key_len < 0 or value_len < 0 or pos + HEADER.size + key_len + value_len > size:
                what = "cut short" if key_len >= 0 and value_len >= 0 else "damaged"
                raise (IncompleteDBError if what == "cut short" else CorruptDBError)(
                    f"the minidb {path} is {what}: the record at byte {pos} runs past its end", hint=_CORRUPT_HINT)
            key = f.read(key_len)
            yield key, pos + HEADER.size + key_len, value_len
            pos += HEADER.size + key_len + value_len
            f.seek(pos)


def _value(path: str, name: str, protos: list):
    kind = protos[0].type
    if kind.startswith(_OWN):  # (one of dslc's own kinds: its registered codec reads it)
        return blobcodec.decode(name, kind[len(_OWN):], "", (), protos[0].content)
    try:
        value = blobproto.assemble(name, protos)
    except DSLError as e:  # (bytes that are no tensor, or dims beyond the memory bound)
        raise CorruptDBError(f"the minidb {path}: {e.message}", hint=e.hint or _CORRUPT_HINT) from None
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]  # (a scalar, as every db type gives rank 0 back)
    return value


def _records(name: str, enc, chunk_size: int, bfloat16: bool = False):
    """(chunk id, BlobProto bytes) of one encoded blob (float32 data as bfloat16: ``bfloat16``)."""
    if enc.kind not in ("tensor", "strings", "bytes"):
        proto = caffe2_pb2.BlobProto(name=name, type=_OWN + enc.kind, content=bytes(enc.data))
        yield 0, proto.SerializeToString()
        return
    value = blobcodec.decode(name, enc.kind, enc.dtype, enc.shape, enc.data)
    if enc.kind == "tensor" or (enc.kind == "strings" and not enc.shape):
        # (a rank-0 text as a 0-d string tensor, so it reads back as text: a Caffe2
        # std::string blob reads back as bytes)
        value = np.asarray(value, dtype=object if enc.kind == "strings" else None)
    yield from blobproto.chunks(name, value, chunk_size, bfloat16)


def _rules(options: bytes) -> list:
    """blobproto.save_rules of Save's options, a bad one a DBError."""
    try:
        return blobproto.save_rules(options)
    except ValueError as e:
        raise base.DBError(f"Save's options: {e}", hint="pass options=caffe2_pb2.SerializationOptions(...)") from None


def _chunk_size(rule, chunk_size: int) -> int:
    if rule is not None and rule[1] is not None:
        return int(rule[1])
    if chunk_size is None or chunk_size < 0:
        return blobproto.DEFAULT_CHUNK
    return int(chunk_size)


base.register("minidb", MiniDB())
