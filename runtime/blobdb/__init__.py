"""Blob databases: where Save writes and Load reads, behind one small interface (base.py).

``get(db_type)`` finds one by name: ``dslcdb`` (the default, one file of our own format:
dbfile.py), ``minidb`` (Caffe2's one-file format, for moving checkpoints and models between
the two: dbminidb.py), ``lmdb`` (dblmdb.py), and ``leveldb`` (also spelled ``LevelDB``, as
Caffe2 code does; it needs the optional extra ``dslc[leveldb]``: dbleveldb.py). Values go
through ``blobcodec``, so nothing is ever unpickled.

Importing this package registers the formats: each module registers its type into the base's
registry when imported, and the base never imports them. A format whose package is missing
registers a stand-in that says how to install it.
"""
from __future__ import annotations

from .base import (DEFAULT_DB_TYPE, CorruptDBError, DBError, DBTypeError, IncompleteDBError,  # noqa: F401
                   KeyValueDB, MissingBlobError, MissingDBError, Unavailable, get, names, register,
                   what_file)
from . import dbfile, dbminidb  # noqa: F401,E402  (each registers its type)

try:
    from . import dblmdb  # noqa: F401
except ImportError:  # a declared dependency; say so if it is missing anyway
    register("lmdb", Unavailable("lmdb", "pip install lmdb"))
try:
    from . import dbleveldb  # noqa: F401
except ImportError:  # an optional extra (plyvel)
    register("leveldb", Unavailable("leveldb", "install the leveldb extra: pip install 'dslc[leveldb]' "
                                               "(or use db_type='lmdb')"))
