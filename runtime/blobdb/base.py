"""The base of the blob databases: the interface a db type implements, its errors, and the
registry each type registers itself into when its module is imported (the package's
``__init__`` imports them all; this module imports none of them).

A database type is an object with three methods (paths are used as given):

    write(path, entries)           store [(name, Encoded)] as one checkpoint, atomically:
                                   afterwards the checkpoint at ``path`` is the new one,
                                   and if the writer dies first it is the old one (or none)
    read(path, names)              {name: value} for ``names`` (None: every blob), each
                                   checksum verified before anything is returned
    exists(path)                   whether a complete checkpoint is at ``path``
    keys(path)                     the blob names stored at ``path`` (its manifest)

Every failure is a ``DBError`` naming the file (and the blob, when one blob is at fault)
with a hint.
"""
from __future__ import annotations

from dslc.ir.diagnostics import DSLError

DEFAULT_DB_TYPE = "dslcdb"


class DBError(DSLError):
    """A blob database cannot be used for this Save, Load or DBExists."""


class MissingDBError(DBError):
    """There is no checkpoint at the path."""


class IncompleteDBError(DBError):
    """A checkpoint whose save did not finish (a writer died before committing)."""


class CorruptDBError(DBError):
    """A checkpoint whose bytes are not what was written: truncated or changed."""


class MissingBlobError(DBError):
    """The checkpoint has no blob of a name Load asked for."""


class DBTypeError(DBError):
    """An unknown ``db_type``, or a path holding another type of database."""


_TYPES: dict[str, object] = {}
_ALIASES = {"LevelDB": "leveldb"}


def register(name: str, db) -> None:
    """Make ``db`` the type ``get(name)`` gives (each format's module calls this on import)."""
    _TYPES[name] = db


def names() -> list[str]:
    """The db types ``get`` accepts (aliases included), those whose package is installed."""
    usable = [n for n, db in _TYPES.items() if not isinstance(db, Unavailable)]
    return sorted(usable + [a for a, n in _ALIASES.items() if n in usable])


def get(db_type: str):
    """The database type called ``db_type`` (empty: the default)."""
    name = _ALIASES.get(db_type or DEFAULT_DB_TYPE, db_type or DEFAULT_DB_TYPE)
    db = _TYPES.get(name)
    if db is None:
        known = ", ".join(repr(k) for k in sorted(set(_TYPES) | set(_ALIASES)))
        raise DBTypeError(f"unknown db_type {db_type!r}", hint=f"use one of: {known}")
    return db


class KeyValueDB:
    """``exists`` and ``keys`` for a db type whose ``read(path, names, values)`` does the work
    (the key-value stores: one read of the manifest answers both)."""

    def exists(self, path: str) -> bool:
        try:
            return self.read(path, names=[]) == {}
        except DBError:
            return False

    def keys(self, path: str) -> list[str]:
        return self.read(path, names=None, values=False)


def what_file(path: str) -> str:
    """What the one-file checkpoint at ``path`` is, for a db type that wanted a directory:
    dslcdb's file starts with its magic, anything else is taken for a minidb."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"DSLCDB"):
        return "a dslcdb checkpoint file; pass db_type='dslcdb'"
    return "a file, not a checkpoint directory (a minidb file? pass db_type='minidb')"


class Unavailable:
    """A db type whose package is not installed: every use says how to install it."""

    def __init__(self, name, how):
        self.name, self.how = name, how

    def _fail(self, *args, **kwargs):
        raise DBTypeError(f"db_type {self.name!r} needs a package that is not installed", hint=self.how)

    write = read = exists = keys = _fail
