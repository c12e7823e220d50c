"""Caffe2's raw key-value database API (``workspace.C.create_db``, ``C.Mode``): records of
bytes put through transactions and read back with a cursor, in a ``minidb`` file (Caffe2's
format, runtime/blobdb/dbminidb.py) or an ``lmdb`` environment.

    db = workspace.C.create_db("minidb", path, workspace.C.Mode.write)
    t = db.new_transaction(); t.put(b"k", b"v"); t.commit()
    db.close()
    cursor = workspace.C.create_db("minidb", path, workspace.C.Mode.read).new_cursor()
    while cursor.valid(): cursor.key(), cursor.value(); cursor.next()

A transaction commits when it is committed, deleted or its db closed, as Caffe2's do, and
a committed minidb record is in the file at once. A db holds its open transactions weakly
(each transaction holds its db), so ``del transaction; del db`` commits and closes right
there, not whenever the garbage collector runs. Values are bytes, never unpickled.
"""
from __future__ import annotations

import enum
import os
import weakref

from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class Mode(enum.IntEnum):
    read = 0
    write = 1
    new = 2


class DBApiError(DSLError, RuntimeError):
    """A db type this API does not open, or a db used in a mode that does not allow it."""


def create_db(db_type: str, path: str, mode) -> "_DB":
    mode = Mode(int(mode))
    kind = {"minidb": _MiniDB, "lmdb": _LmdbDB}.get(str(db_type))
    if kind is None:
        raise DBApiError(f"create_db: dslc opens minidb and lmdb databases, not {db_type!r}", user_location(),
                         "use db_type='minidb' or 'lmdb'")
    return kind(str(path), mode)


class _DB:
    def __init__(self, path, mode):
        self.path, self.mode = path, mode
        # (weakly: a transaction the user drops commits then, in its __del__; a list would
        # keep it, and through it this db, alive until a garbage collection)
        self._open_transactions = weakref.WeakSet()

    def new_transaction(self) -> "_Transaction":
        if self.mode == Mode.read:
            raise DBApiError(f"db {self.path} was opened to read: it has no transactions", user_location(),
                             "open it with Mode.write or Mode.new")
        t = _Transaction(self)
        self._open_transactions.add(t)
        return t

    def new_cursor(self):
        if self.mode != Mode.read:
            raise DBApiError(f"db {self.path} was opened to write: read it with a cursor after opening it with "
                             "Mode.read", user_location())
        return _Cursor(self._read_all())

    def close(self) -> None:
        for t in list(self._open_transactions):
            t.commit()
        self._close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # (at interpreter exit, nothing more can be done)
            pass


class _Transaction:
    def __init__(self, db):
        self.db, self._pending = db, []

    def put(self, key, value) -> None:
        self._pending.append((_bytes(key, "key"), _bytes(value, "value")))

    def commit(self) -> None:
        if self._pending:
            self.db._write(self._pending)
            self._pending = []
        self.db._open_transactions.discard(self)

    def __del__(self):
        try:
            self.commit()
        except Exception:
            pass


class _Cursor:
    def __init__(self, items):
        self._items, self._at = items, 0

    def valid(self) -> bool:
        return self._at < len(self._items)

    def key(self) -> bytes:
        return self._items[self._at][0]

    def value(self) -> bytes:
        return self._items[self._at][1]

    def next(self) -> None:
        self._at += 1

    def seek_to_first(self) -> None:
        self._at = 0

    def seek(self, key) -> None:
        key = _bytes(key, "key")
        self._at = next((i for i, (k, _) in enumerate(self._items) if k >= key), len(self._items))


class _MiniDB(_DB):
    """Records appended in put order (Caffe2's minidb: a file of length-prefixed records)."""

    def __init__(self, path, mode):
        super().__init__(path, mode)
        self._file = open(path, "wb") if mode != Mode.read else None

    def _write(self, pairs) -> None:
        from dslc.runtime.blobdb.dbminidb import HEADER
        for k, v in pairs:
            self._file.write(HEADER.pack(len(k), len(v)) + k + v)
        self._file.flush()  # (a commit is in the file, as Caffe2's minidb commit flushes)

    def _read_all(self) -> list:
        from dslc.runtime.blobdb import dbminidb
        out = []
        with open(self.path, "rb") as f:
            for key, offset, length in dbminidb.records(self.path):
                f.seek(offset)
                out.append((key, f.read(length)))
        return out

    def _close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


class _LmdbDB(_DB):
    """An lmdb environment (keys sorted, as lmdb keeps them)."""

    def __init__(self, path, mode):
        super().__init__(path, mode)
        self._env = self._db = None
        if mode == Mode.read:  # (read by pread with every page checked, not through lmdb's mapping)
            from dslc.runtime.blobdb.lmdbfile import LmdbFile
            self._db = _checked(LmdbFile, path)
        else:
            import lmdb
            from dslc.runtime.blobdb.lmdbfile import check_existing
            _checked(check_existing, path)  # (the library would fault on a damaged file it writes to)
            self._env = lmdb.open(path, map_size=1 << 40, subdir=True, create=True)

    def _write(self, pairs) -> None:
        with self._env.begin(write=True) as txn:
            for k, v in pairs:
                txn.put(k, v)

    def _read_all(self) -> list:
        return _checked(lambda: [(k, self._db.read(v)) for k, v in self._db.records()])

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._db is not None:
            self._db.close()
            self._db = None


def _checked(fn, *args):
    """``fn(*args)``, a database's error as this API's, located at the user's line."""
    from dslc.runtime.blobdb import DBError
    try:
        return fn(*args)
    except DBError as e:
        raise DBApiError(e.message, user_location(), e.hint) from None


def _bytes(x, what) -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise DBApiError(f"a db {what} must be bytes or str, got {type(x).__name__}", user_location())
