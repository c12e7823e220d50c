"""``CachedReader``: a reader with a persistent cache of another reader's records in a db file.

    reader = CachedReader(src.reader(), db_path="/tmp/cache.db")
    session.run(reader.build_cache_step())     # reads src once, if there is no cache yet
    pipe(reader, dst.writer(), num_runtime_threads=8)   # reads the cache

``build_cache_step()`` is empty when a complete cache is at ``db_path`` when it is
called; otherwise it pipes every record of the original reader into a dataset and
saves the dataset's columns there (one blob per field, named after it; see
``db_file_reader``), unless the cache appeared by the time the step runs (it checks
with DBExists first). Reading then works as ``DBFileReader`` does; the original
reader is never read again.

The 2018 API works too: ``CachedReader(reader)`` without a path, then
``build_cache(path)`` gives the build step and sets the path.
"""
from __future__ import annotations

import os

from dslc import core
from dslc.runtime import blobdb
from dslc.dataio import Reader
from dslc.db_file_reader import DEFAULT_BATCH_SIZE, DBFileReader, check_db_path, located
from dslc.ir.diagnostics import TraceError
from dslc.pipeline import pipe
from dslc.schema import Struct
from dslc.task import Cluster, TaskGroup
from dslc.trace.tracing import user_location

BUILD_THREADS = 16  # the threads copying the original reader into the cache (as Caffe2)


class CachedReader(DBFileReader):
    """Reads ``original_reader``'s records from the cache at ``db_path`` (see the module docstring).

    The record is the original reader's; ``db_path`` may wait for ``build_cache(path)``
    (the older API, whose default name is ``cached_reader``).
    """

    default_name_suffix = "cached_reader"

    def __init__(self, original_reader, db_path=None, db_type=None, name=None, batch_size=DEFAULT_BATCH_SIZE,
                 loop_over=False):
        if not isinstance(original_reader, Reader):
            raise TraceError(f"CachedReader needs the Reader it caches, got {type(original_reader).__name__}",
                             user_location(), "pass a reader, e.g. CachedReader(dataset.reader(), db_path)")
        self.original_reader = original_reader
        super().__init__(db_path, db_type, name, batch_size, loop_over)

    def _init_path(self, db_path):
        return None if db_path is None else check_db_path(db_path, "CachedReader")

    def _default_name(self) -> str:
        return super()._default_name() if self.db_path else "cached_reader"

    def _init_reader_schema(self, field_names=None):
        """The original reader's record (the cache may not exist yet)."""
        schema = self.original_reader._schema
        if not isinstance(schema, Struct):
            what = "no schema" if schema is None else f"a {type(schema).__name__} schema, not a Struct"
            raise TraceError(f"CachedReader caches records, but its reader has {what}", user_location(),
                             "cache a reader of schema.Struct records (such as Dataset.reader())")
        return schema

    def has_cache(self) -> bool:
        """Whether a complete cache is at ``db_path`` now."""
        return bool(self.db_path) and self._db.exists(self.db_path)

    def build_cache_step(self, overwrite=False):
        """The step that fills the cache from the original reader (empty when a cache exists).

        With ``overwrite``, the cache is built again even when one is there.
        """
        if not self.db_path:
            raise TraceError("this CachedReader has no db_path to build its cache at", user_location(),
                             "pass db_path to CachedReader, or call build_cache(path)")
        if not overwrite and self._cache_is_there():
            return core.execution_step("build_step", [])
        check = core.Net("check_cache")
        with core.NameScope(self.name):
            exists = check.NextScopedBlob("cache_exists")
        if overwrite:
            check.ConstantFill([], [exists], shape=[], value=False, dtype=core.DataType.BOOL)
        else:
            check.DBExists([], [exists], db_name=self.db_path, db_type=self.db_type, absolute_path=True)
        init_net = core.Net("init")
        self._init_field_blobs_as_empty(init_net)
        with Cluster(), core.NameScope(self.name), TaskGroup() as copy_tg:
            pipe(self.original_reader, self.ds.writer(), num_threads=BUILD_THREADS)
        copy_step = copy_tg.tasks()[0].get_step()
        save_net = core.Net("save")
        self._save_field_blobs(save_net)
        # the stop blob is checked after each substep: a cache made meanwhile skips the rest
        return core.execution_step("build_cache", [check, init_net, copy_step, save_net],
                                   should_stop_blob=exists, only_once=True)

    def build_cache(self, cache_path, overwrite=False):
        """The 2018 API: set the cache path (unless this reader has a cache already) and
        return ``build_cache_step(overwrite)``."""
        if overwrite or not self.has_cache():
            self.db_path = check_db_path(cache_path, "build_cache")
        return self.build_cache_step(overwrite)

    def setup_ex(self, init_net, finish_net):
        if not self.db_path:
            raise TraceError("this CachedReader is read before its cache was built", user_location(),
                             "run reader.build_cache(path) (or pass db_path) before reading")
        super().setup_ex(init_net, finish_net)

    def _cache_is_there(self) -> bool:
        """Whether a complete cache is at the path; a database of another type there is an error,
        a damaged or unfinished one is built again."""
        if self._db.exists(self.db_path):
            return True
        if os.path.exists(self.db_path):
            try:
                self._db.keys(self.db_path)
            except blobdb.DBTypeError as e:
                raise located(e) from None
            except blobdb.DBError:
                pass
        return False

    def _save_field_blobs(self, net) -> None:
        net.Save(self.ds.get_blobs(), [], db=self.db_path, db_type=self.db_type, absolute_path=True,
                 blob_name_overrides=self.ds.field_names())


__all__ = ["CachedReader"]
