"""``lmdb``: a checkpoint as an LMDB environment (a directory holding data.mdb and lock.mdb).

Each Save is one write transaction: it empties the database, puts every blob under
``blob/<name>`` and the manifest (names, kinds, dtypes, shapes, lengths, checksums)
under ``manifest``, and commits. LMDB makes the commit atomic and durable, so a
writer that dies mid-save leaves the previous checkpoint, or, for a new one, an
environment without a manifest, which Load reports as incomplete.

LMDB checksums none of its pages; the per-blob checksum catches changed payloads
(format 2: XXH3-64 in chunks, as dslcdb's format 2; format 1, still read: CRC-32).
Reading goes through lmdbfile.py, not the lmdb library: every page is read with pread
and checked against the file first (the library maps the file, and a page it
believes is there and the file lacks kills the process with SIGBUS).
"""
from __future__ import annotations

import contextlib
import os
import threading

import lmdb
import numpy as np

from . import base, dbio, manifest
from ..blobcodec import BlobEncodingError, allocate_all, from_buffer
from .base import CorruptDBError, KeyValueDB, DBError, DBTypeError, IncompleteDBError, MissingDBError
from .lmdbfile import LmdbFile, check_existing
from .manifest import Index, rows_text

MANIFEST = b"manifest"
PREFIX = b"blob/"
FORMAT_VERSION = 2
# the payload checksum of each format (the manifest says which)
_CHECKSUMS = {1: dbio.CRC32, 2: dbio.XXH3}
_HINT = "the checkpoint was changed or cut short after it was saved; load an earlier epoch's checkpoint"

# LMDB forbids opening one environment twice in a process; ops of concurrent tasks take turns.
_lock = threading.Lock()


class LmdbDB(KeyValueDB):
    name = "lmdb"

    def write(self, path: str, entries) -> None:
        entries = list(entries)
        total = sum(enc.nbytes for _, enc in entries)
        data = os.path.join(path, "data.mdb")
        old = os.path.getsize(data) if os.path.exists(data) else 0
        # room for the old pages (freed only at commit) and the new ones, with slack for the tree
        map_size = old + 2 * total + (64 << 20)
        with _lock:
            try:
                check_existing(path)  # (the library would fault on a damaged file it writes to)
            except DBError as e:
                raise DBError(f"cannot save over the lmdb checkpoint {path}: {e.message}",
                              hint="remove the damaged checkpoint first, or save to another path") from None
            try:
                env = lmdb.open(path, map_size=map_size, subdir=True, max_dbs=0, readahead=False)
            except lmdb.Error as e:
                raise DBError(f"cannot create the lmdb checkpoint {path}: {e}",
                              hint="check that its parent directory exists and is writable") from None
            try:
                self._commit(env, entries)
            except lmdb.Error as e:
                raise DBError(f"writing the lmdb checkpoint {path} failed: {e}",
                              hint="check the disk space; the previous checkpoint there is unchanged") from None
            finally:
                env.close()

    def _commit(self, env, entries) -> None:
        scheme = _CHECKSUMS[FORMAT_VERSION]
        names, encs, digests = [], [], []
        with env.begin(write=True) as txn:
            txn.drop(env.open_db(), delete=False)
            for name, enc in entries:
                self._put(txn, name, enc, names, encs)
                digests.append(dbio.digest_async(scheme, enc.data))
            txn.put(MANIFEST, rows_text({"format": FORMAT_VERSION, "chunk": scheme.chunk}, names, encs, [
                ("length", [e.data.nbytes for e in encs]),
                (scheme.field, [d.result() for d in digests])]).encode("utf-8"))

    def _put(self, txn, name: str, enc, names: list, encs: list) -> None:
        txn.put(PREFIX + name.encode("utf-8"), enc.data)
        names.append(name)
        encs.append(enc)

    def read(self, path: str, names=None, values: bool = True):
        self._check_path(path)
        with _lock, _pinned(path), LmdbFile(path) as db:  # (read by pread, never through a mapping)
            return self._read(db, path, names, values)

    def _check_path(self, path: str) -> None:
        if not os.path.exists(path):
            raise MissingDBError(f"there is no checkpoint at {path}",
                                 hint="check the db name and epoch (DBExists tells whether a checkpoint is "
                                      "there)")
        if not os.path.isdir(path):
            raise DBTypeError(f"{path} is {base.what_file(path)}", hint="give the db_type the checkpoint was saved with")
        data = os.path.join(path, "data.mdb")
        if not os.path.exists(data):
            raise IncompleteDBError(f"the lmdb checkpoint {path} has no data.mdb: its save did not finish",
                                    hint="load an earlier epoch's checkpoint")
        if os.path.getsize(data) == 0:
            raise CorruptDBError(f"the lmdb checkpoint {path} is empty (its data.mdb has 0 bytes)", hint=_HINT)

    def _checksum(self, doc: dict, path: str) -> dbio.Checksum:
        """The payload checksum of the manifest ``doc``'s format."""
        scheme = _CHECKSUMS.get(doc.get("format"))
        if scheme is None:
            raise DBTypeError(f"the lmdb checkpoint {path} has format {doc.get('format')!r}; this dslc reads "
                              f"formats {', '.join(map(str, _CHECKSUMS))}", hint="load it with the dslc that wrote it")
        try:
            return dbio.as_in_manifest(scheme, doc)
        except ValueError as e:
            raise CorruptDBError(f"the manifest of the lmdb checkpoint {path} is not valid: {e}",
                                 hint=_HINT) from None

    def _read(self, db: LmdbFile, path: str, names, values: bool):
        found = db.get(MANIFEST)
        if found is None:
            raise IncompleteDBError(f"the lmdb checkpoint {path} has no manifest: its save did not finish",
                                    hint="load an earlier epoch's checkpoint")
        try:
            doc = manifest.parse(db.read(found))
            rows = doc["blobs"]
            if not values:
                return list(dict.fromkeys(str(b["name"]) for b in rows))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptDBError(f"the manifest of the lmdb checkpoint {path} is not valid: {e}",
                                 hint=_HINT) from None
        scheme = self._checksum(doc, path)
        try:
            index = Index(rows, scheme.field)
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise CorruptDBError(f"the manifest of the lmdb checkpoint {path} is not valid: {e}",
                                 hint=_HINT) from None
        wanted, pick = index.select(f"the checkpoint {path}", names)
        # where each blob lies, its length checked against the manifest's, before any buffer
        # is allocated for it (the manifest's shapes and lengths are only its word)
        keys = [PREFIX + n.encode("utf-8") for n in wanted]
        if len(keys) > 16:  # (one pass over the tree finds many faster than a search each)
            found = dict(db.records())
            places = [found.get(k) for k in keys]
        else:
            places = [db.get(k) for k in keys]
        for n, place, length in zip(wanted, places, index.length[pick].tolist()):
            if place is None or place.size != length:
                raise CorruptDBError(f"blob {n!r} in the lmdb checkpoint {path} is missing or has the wrong "
                                     "length", hint=_HINT)
        try:
            bufs = allocate_all(*index.take(pick))
        except BlobEncodingError as e:
            raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None
        of = scheme.of
        digests = [of(db.read(place, buf.reshape(-1).view(np.uint8))) for place, buf in zip(places, bufs)]
        bad = np.flatnonzero(np.array(digests, dtype=np.uint64) != index.digest[pick])
        if bad.size:
            raise CorruptDBError(f"blob {wanted[bad[0]]!r} in the lmdb checkpoint {path} is damaged: its checksum "
                                 "does not match", hint=_HINT)
        out = {}
        for n, i, buf in zip(wanted, pick.tolist(), bufs):
            kind = index.kinds[i]
            if kind == "tensor":  # (the buffer is the array)
                out[n] = buf if buf.ndim else buf[()]
                continue
            try:
                out[n] = from_buffer(n, kind, index.dtypes[i], index.shapes[i], buf)
            except BlobEncodingError as e:
                raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None
        return out


@contextlib.contextmanager
def _pinned(path: str):
    """A read transaction of the lmdb library held open: LMDB then reuses none of the pages
    of what is committed now, so a save to the checkpoint in another process, meanwhile,
    changes nothing this read sees. Opening one reads only the two meta pages (with
    pread, checked by the library) and maps the file; the pages are read by lmdbfile.
    A database the library will not open (a read-only directory, damaged meta pages) is
    read unpinned: lmdbfile says what is wrong with it."""
    try:
        env = lmdb.open(path, readonly=True, create=False, subdir=True, max_dbs=0, readahead=False)
    except lmdb.Error:
        yield
        return
    try:
        with env.begin():
            yield
    finally:
        env.close()


base.register(LmdbDB.name, LmdbDB())
