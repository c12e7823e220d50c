"""``leveldb``: a checkpoint as a LevelDB database (a directory), Caffe2's ``db_type="leveldb"``.

Through plyvel (the optional extra ``dslc[leveldb]``; its wheels bundle LevelDB). Each
Save is one write batch, written with sync: it deletes every key there, puts each
blob under ``blob/<name>`` and the manifest (names, kinds, dtypes, shapes, lengths,
CRC-32s) under ``manifest``. LevelDB applies a batch as one log record, and drops a
record cut short by a crash when the database is next opened, so a writer that dies
mid-save leaves the previous checkpoint, or, for a new one, a database without a
manifest, which Load reports as incomplete. LevelDB checksums its own blocks
(checked on every read here) and the per-blob CRC-32 checks each payload.
"""
from __future__ import annotations

import json
import os
import threading
import zlib

import numpy as np
import plyvel

from . import blobdb
from .blobcodec import BlobEncodingError, decode
from .blobdb import CorruptDBError, KeyValueDB, DBError, DBTypeError, IncompleteDBError, MissingBlobError, MissingDBError

MANIFEST = b"manifest"
PREFIX = b"blob/"
FORMAT_VERSION = 1
_HINT = "the checkpoint was changed or damaged after it was saved; load an earlier epoch's checkpoint"

def _why(e) -> str:
    """plyvel's message (LevelDB's status, as bytes) as text."""
    msg = e.args[0] if e.args else e
    return msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg)


# LevelDB lets one handle at a time open a database; ops of concurrent tasks take turns.
_lock = threading.Lock()


class LevelDB(KeyValueDB):
    name = "leveldb"

    def write(self, path: str, entries) -> None:
        with _lock:
            try:
                db = plyvel.DB(path, create_if_missing=True, paranoid_checks=True)
            except plyvel.Error as e:
                raise DBError(f"cannot open the leveldb checkpoint {path} for writing: {_why(e)}",
                              hint="check that its parent directory exists and is writable, and that no "
                                   "other process has it open") from None
            try:
                self._commit(db, entries)
            except plyvel.Error as e:
                raise DBError(f"writing the leveldb checkpoint {path} failed: {_why(e)}",
                              hint="check the disk space; the previous checkpoint there is unchanged") from None
            finally:
                db.close()

    def _commit(self, db, entries) -> None:
        index = []
        batch = db.write_batch(transaction=True, sync=True)
        for key in db.iterator(include_value=False):
            batch.delete(key)
        for name, enc in entries:
            self._put(batch, name, enc, index)
        batch.put(MANIFEST, json.dumps({"format": FORMAT_VERSION, "blobs": index}).encode("utf-8"))
        batch.write()

    def _put(self, batch, name: str, enc, index: list) -> None:
        data = enc.data  # (1-D bytes: plyvel takes a bytes copy)
        batch.put(PREFIX + name.encode("utf-8"), bytes(data))
        index.append({"name": name, "kind": enc.kind, "dtype": enc.dtype, "shape": list(enc.shape),
                      "length": enc.nbytes, "crc32": zlib.crc32(data)})

    def read(self, path: str, names=None, values: bool = True):
        _check_path(path)
        with _lock:
            try:
                db = plyvel.DB(path, create_if_missing=False, paranoid_checks=True)
            except plyvel.Error as e:
                raise CorruptDBError(f"{path} cannot be opened as a leveldb checkpoint: {_why(e)}", hint=_HINT) from None
            try:
                with db.snapshot() as snap:
                    return _read(snap, path, names, values)
            except plyvel.Error as e:
                raise CorruptDBError(f"the leveldb checkpoint {path} is damaged: {_why(e)}", hint=_HINT) from None
            finally:
                db.close()


def _check_path(path: str) -> None:
    if not os.path.exists(path):
        raise MissingDBError(f"there is no checkpoint at {path}",
                             hint="check the db name and epoch (DBExists tells whether a checkpoint is there)")
    if not os.path.isdir(path):
        raise DBTypeError(f"{path} is a file, not a leveldb checkpoint directory (a dslcdb checkpoint is "
                          "one file: pass db_type='dslcdb')",
                          hint="give the db_type the checkpoint was saved with")
    if os.path.exists(os.path.join(path, "data.mdb")):
        raise DBTypeError(f"{path} is an lmdb checkpoint; pass db_type='lmdb'",
                          hint="give the db_type the checkpoint was saved with")
    if not os.path.exists(os.path.join(path, "CURRENT")):
        raise IncompleteDBError(f"the leveldb checkpoint {path} has no CURRENT file: its save did not finish",
                                hint="load an earlier epoch's checkpoint")


def _read(snap, path: str, names, values: bool):
    raw = snap.get(MANIFEST, verify_checksums=True)
    if raw is None:
        raise IncompleteDBError(f"the leveldb checkpoint {path} has no manifest: its save did not finish",
                                hint="load an earlier epoch's checkpoint")
    try:
        by_name = {str(b["name"]): b for b in json.loads(raw)["blobs"]}
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptDBError(f"the manifest of the leveldb checkpoint {path} is not valid: {e}", hint=_HINT) from None
    if not values:
        return list(by_name)
    wanted = list(by_name) if names is None else list(names)
    missing = [n for n in wanted if n not in by_name]
    if missing:
        shown = ", ".join(repr(k) for k in sorted(by_name)[:8])
        raise MissingBlobError(f"the checkpoint {path} has no blob {missing[0]!r}",
                               hint=f"pass allow_incomplete=True to skip blobs it lacks; it holds "
                                    f"{len(by_name)} blobs: {shown}")
    out = {}
    for n in wanted:
        b = by_name[n]
        data = snap.get(PREFIX + n.encode("utf-8"), verify_checksums=True)
        if data is None or len(data) != int(b["length"]) or zlib.crc32(data) != int(b["crc32"]):
            raise CorruptDBError(f"blob {n!r} in the leveldb checkpoint {path} is damaged: it is missing or "
                                 "its length or checksum does not match", hint=_HINT)
        try:
            out[n] = decode(n, b.get("kind", ""), b.get("dtype", ""), b.get("shape", ()),
                            np.frombuffer(bytearray(data), dtype=np.uint8))
        except BlobEncodingError as e:
            raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None
    return out


blobdb.register(LevelDB.name, LevelDB())
