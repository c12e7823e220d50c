"""``DBFileReader``: reads the records stored in a blob database file, as a Reader.

A cache database holds one blob per record field, stored under the field's column
name (``label``, ``feats:lengths``, ``feats:values``...), each the column of every
record (as ``CachedReader`` writes it, or any Save of a dataset's blobs). The reader
loads those columns into a dataset once per task run (in the pipe's init net) and
reads them ``batch_size`` records at a time, in shuffled order, through a cursor every
thread shares: each record once (``loop_over=False``) or over and over (``True``).

Without ``field_names`` the record's fields are the database's blobs in the order
they were stored (Caffe2 sorts them by name instead; see docs/differences.md).
"""
from __future__ import annotations

import os

from dslc import core
from dslc.runtime import blobdb
from dslc.dataio import Reader
from dslc.dataset import Dataset
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.schema import Field, Struct, from_column_list
from dslc.trace.tracing import user_location

DEFAULT_BATCH_SIZE = 100


def located(err: blobdb.DBError, message: str | None = None, hint: str | None = None) -> blobdb.DBError:
    """``err`` (raised by a blob database, which knows no source line) at the user's line."""
    return type(err)(message or err.message, user_location(), hint or err.hint)


def db_of(db_type):
    """The blob database type called ``db_type`` (None: the default), or a DBError at the user's line."""
    try:
        return blobdb.get(db_type or "")
    except blobdb.DBError as e:
        raise located(e) from None


def check_db_path(db_path, what: str) -> str:
    if not isinstance(db_path, (str, os.PathLike)) or not str(db_path):
        raise TraceError(f"{what} needs db_path, the path of the cache database, got {db_path!r}",
                         user_location(), "pass db_path='/path/to/cache.db'")
    return os.path.expanduser(os.fspath(db_path))


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise TraceError(f"batch_size must be a positive int, got {batch_size!r}", user_location(),
                         f"pass batch_size={DEFAULT_BATCH_SIZE} (the records read per iteration)")
    return batch_size


def stored_fields(db, db_path: str) -> list[str]:
    """The column names stored at ``db_path`` (in stored order); a located DBError if it cannot say."""
    try:
        names = db.keys(db_path)
    except blobdb.MissingDBError as e:
        raise located(e, f"there is no cache database at {db_path}",
                      "build it first (CachedReader(reader, db_path).build_cache_step()), or check "
                      "db_path and db_type") from None
    except blobdb.DBError as e:
        raise located(e, hint=e.hint if isinstance(e, blobdb.DBTypeError) else
                      "the cache file was changed or cut short; delete it and build the cache again") from None
    if not names:
        raise blobdb.DBError(f"the cache database {db_path} holds no blobs, so its records have no fields",
                             user_location(), "build the cache from a reader of records with fields")
    return names


def _schema_of(names, db_path: str) -> Struct:
    try:
        schema = from_column_list(list(names))
    except DSLError as e:
        raise TraceError(f"the blobs of {db_path} do not form a record ({e.message})", user_location(),
                         "pass field_names=[...] naming the record's columns in order") from None
    if not isinstance(schema, Struct):
        schema = Struct(("field_0", schema))
    return schema


class DBFileReader(Reader):
    """Reads every record of the cache database ``db_path`` of ``db_type`` (see the module docstring).

    The blobs the cache holds are named when the reader is made (unless ``field_names``
    gives them), so a missing or damaged file is reported at that line.
    """

    default_name_suffix = "db_file_reader"

    def __init__(self, db_path, db_type=None, name=None, batch_size=DEFAULT_BATCH_SIZE, loop_over=False,
                 field_names=None):
        self.db_path = self._init_path(db_path)
        self.db_type = db_type or ""
        self._db = db_of(self.db_type)
        self.name = name or self._default_name()
        self.batch_size = _check_batch_size(batch_size)
        self.loop_over = bool(loop_over)
        super().__init__(self._init_reader_schema(field_names))
        self.ds = Dataset(self._schema.clone_schema(), f"{self.name}_dataset")
        self.ds_reader = None

    def _init_reader_schema(self, field_names=None) -> Field:
        """The record read: ``field_names`` as columns, else the blobs stored in the database."""
        if field_names:
            return _schema_of(field_names, self.db_path)
        return _schema_of(stored_fields(self._db, self.db_path), self.db_path)

    def _init_path(self, db_path) -> str:
        return check_db_path(db_path, type(self).__name__)

    def _default_name(self) -> str:
        return f"{self._db_name()}_{self.default_name_suffix}"

    def _db_name(self) -> str:
        """``/tmp/sample.db`` -> ``sample`` (the default name's prefix)."""
        return os.path.basename(self.db_path.rstrip(os.sep)).rsplit(".", 1)[0]

    def setup_ex(self, init_net, finish_net):
        """Record into ``init_net`` the load of the columns and the shared cursor, once per reader."""
        if self.ds_reader is not None:
            self.ds_reader.setup_ex(init_net, finish_net)
            return
        self._init_field_blobs_as_empty(init_net)
        self._load_field_blobs(init_net)
        reader = self.ds.random_reader(init_net, batch_size=self.batch_size, loop_over=self.loop_over)
        reader.sort_and_shuffle(init_net)  # no sort field: the records in shuffled order, as Caffe2
        reader.computeoffset(init_net)
        self.ds_reader = reader

    def read(self, read_net):
        if self.ds_reader is None:
            raise TraceError(f"{type(self).__name__} {self.name!r} reads before it was set up", user_location(),
                             "read it through pipe(), or call setup_ex(init_net, exit_net) first")
        return self.ds_reader.read(read_net)

    def _init_field_blobs_as_empty(self, init_net) -> None:
        with core.NameScope(self.name):
            self.ds.init_empty(init_net)

    def _load_field_blobs(self, init_net) -> None:
        init_net.Load([], self.ds.get_blobs(), db=self.db_path, db_type=self.db_type, absolute_path=True,
                      source_blob_names=self.ds.field_names())


__all__ = ["DBFileReader"]
