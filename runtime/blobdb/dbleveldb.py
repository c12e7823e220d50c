"""``leveldb``: a checkpoint as a LevelDB database (a directory), Caffe2's ``db_type="leveldb"``.

Through plyvel (the optional extra ``dslc[leveldb]``; its wheels bundle LevelDB). Each
Save is one write batch, written with sync: it deletes every key there, puts each
blob under ``blob/<name>`` and the manifest (names, kinds, dtypes, shapes, lengths,
checksums: format 2, XXH3-64 in chunks as dslcdb's format 2; format 1, still read,
zlib's CRC-32) under ``manifest``. LevelDB applies a batch as one log record, and drops a
record cut short by a crash when the database is next opened, so a writer that dies
mid-save leaves the previous checkpoint, or, for a new one, a database without a
manifest, which Load reports as incomplete. LevelDB checksums its own blocks
(checked on every read here) and the per-blob checksum checks each payload.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import plyvel

from . import base, dbio, manifest
from ..blobcodec import BlobEncodingError, allocate, from_buffer
from .base import CorruptDBError, KeyValueDB, DBError, DBTypeError, IncompleteDBError, MissingDBError
from .manifest import Index, rows_text

MANIFEST = b"manifest"
PREFIX = b"blob/"
FORMAT_VERSION = 2
# the payload checksum of each format (the manifest says which): 2 as dslcdb's format 2
_CHECKSUMS = {1: dbio.CRC32, 2: dbio.XXH3}
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
        scheme = _CHECKSUMS[FORMAT_VERSION]
        names, encs, digests = [], [], []
        batch = db.write_batch(transaction=True, sync=True)
        for key in db.iterator(include_value=False):
            batch.delete(key)
        for name, enc in entries:
            self._put(batch, name, enc, names, encs)
            digests.append(dbio.digest_async(scheme, enc.data))
        batch.put(MANIFEST, rows_text({"format": FORMAT_VERSION, "chunk": scheme.chunk}, names, encs, [
            ("length", [e.data.nbytes for e in encs]),
            (scheme.field, [d.result() for d in digests])]).encode("utf-8"))
        batch.write()

    def _put(self, batch, name: str, enc, names: list, encs: list) -> None:
        batch.put(PREFIX + name.encode("utf-8"), bytes(enc.data))  # (plyvel takes bytes)
        names.append(name)
        encs.append(enc)

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
        raise DBTypeError(f"{path} is {base.what_file(path)}", hint="give the db_type the checkpoint was saved with")
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
        doc = manifest.parse(raw)
        rows = doc["blobs"]
        if not values:
            return list(dict.fromkeys(str(b["name"]) for b in rows))
        scheme = _CHECKSUMS.get(doc.get("format"))
        if scheme is None:
            raise DBTypeError(f"the leveldb checkpoint {path} has format {doc.get('format')!r}; this dslc "
                              f"reads formats {', '.join(map(str, _CHECKSUMS))}",
                              hint="load it with the dslc that wrote it")
        scheme = dbio.as_in_manifest(scheme, doc)
        index = Index(rows, scheme.field)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        raise CorruptDBError(f"the manifest of the leveldb checkpoint {path} is not valid: {e}", hint=_HINT) from None
    wanted, pick = index.select(f"the checkpoint {path}", names)
    out, of = {}, scheme.of
    for n, i in zip(wanted, pick.tolist()):
        # (the bytes first: the manifest's shape and length are only its word, checked
        # against what the database holds before anything is allocated for them)
        data = snap.get(PREFIX + n.encode("utf-8"), verify_checksums=True)
        if data is None or len(data) != int(index.length[i]) or of(memoryview(data)) != int(index.digest[i]):
            raise CorruptDBError(f"blob {n!r} in the leveldb checkpoint {path} is damaged: it is missing or "
                                 "its length or checksum does not match", hint=_HINT)
        kind = index.kinds[i]
        try:
            buf = allocate(n, kind, index.dtypes[i], index.shapes[i], len(data))
            buf.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
            del data
            out[n] = (buf if buf.ndim else buf[()]) if kind == "tensor" else \
                from_buffer(n, kind, index.dtypes[i], index.shapes[i], buf)
        except BlobEncodingError as e:
            raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None
    return out


base.register(LevelDB.name, LevelDB())
