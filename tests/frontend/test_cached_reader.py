"""CachedReader (both APIs) and DBFileReader: the cache is built once, read back through pipe()
on every backend, and bad caches fail at the user's line.

Expected values are computed here with numpy or plain Python, never read back from dslc.
Error tests find the offending line by its ``# @tag`` marker in this file's text.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from dslc import core, workspace
from dslc.runtime import blobdb
from dslc.cached_reader import CachedReader
from dslc.dataset import Dataset
from dslc.db_file_reader import DBFileReader
from dslc.ir.diagnostics import ExecutionError, TraceError
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import Struct, from_column_list
from dslc.task import Task, TaskGroup, WorkspaceType
from dbtypes import leveldb
from markers import Markers

GLOBAL = WorkspaceType.GLOBAL
# "" is the default type (dslcdb, one file); lmdb keeps a directory
DB_TYPES = ["", "lmdb", leveldb("LevelDB")]  # (Caffe2's spelling of leveldb)

@pytest.fixture(params=DB_TYPES, ids=["dslcdb", "lmdb", "leveldb"])
def db_type(request):
    return request.param


MARKERS = Markers(__file__)
line_of, assert_error_at = MARKERS.line_of, MARKERS.assert_error_at


def delete_path(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def source_reader(size, batch_size=1):
    """A reader of ``size`` records ``label = 0 .. size-1`` (fed into the workspace now)."""
    blob = core.BlobReference("src/label")
    workspace.FeedBlob(str(blob), np.arange(size))
    return Dataset(from_column_list(["label"], col_blobs=[blob]), name="src").reader(batch_size=batch_size)


def read_all(session, reader, threads=8):
    """Every record ``reader`` gives, piped into a new dataset: {column name: values}."""
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope("dst"):
        dst = Dataset(reader.schema().clone_schema(), name="dst")
        dst.init_empty(ops)
    session.run(init)
    with TaskGroup() as tg:
        pipe(reader, dst.writer(), num_runtime_threads=threads)
    session.run(tg)
    content = dst.content()
    return {n: workspace.FetchBlob(str(b)) for n, b in zip(content.field_names(), content.field_blobs())}


def labels(session, reader):
    return sorted(read_all(session, reader)["label"].tolist())


# ----------------------------------------------------------------------------- the spec's scenarios


def test_cached_reader_builds_once_then_reads_the_cache(session, db_type, tmp_path):
    path = str(tmp_path / "cache.db")
    first = CachedReader(source_reader(100), path, db_type=db_type, loop_over=False)
    session.run(first.build_cache_step())
    assert blobdb.get(db_type).exists(path)
    assert labels(session, first) == list(range(100))

    # the cache is there: the build step is empty and the 200-row source is never read
    second = CachedReader(source_reader(200), path, db_type=db_type)
    step = second.build_cache_step()
    assert step.Name() == "build_step" and step.is_empty()
    session.run(step)
    assert labels(session, second) == list(range(100))

    delete_path(path)
    third = CachedReader(source_reader(300), path, db_type=db_type)
    session.run(third.build_cache_step())
    assert labels(session, third) == list(range(300))


def test_cached_reader_2018_api(session, db_type, tmp_path):
    path = str(tmp_path / "cache.db")
    first = CachedReader(source_reader(100), db_type=db_type)
    assert first.name == "cached_reader"
    session.run(first.build_cache(path))
    assert labels(session, first) == list(range(100))

    second = CachedReader(source_reader(200), db_type=db_type)
    session.run(second.build_cache(path))
    assert labels(session, second) == list(range(100))

    delete_path(path)
    third = CachedReader(source_reader(300), db_type=db_type)
    session.run(third.build_cache(path))
    assert labels(session, third) == list(range(300))


def test_db_file_reader_reads_a_cache(session, db_type, tmp_path):
    path = str(tmp_path / "sample.db")
    session.run(CachedReader(source_reader(100), path, db_type=db_type).build_cache_step())
    reader = DBFileReader(path, db_type)
    assert reader.name == "sample_db_file_reader"
    assert reader.schema().field_names() == ["label"]
    assert labels(session, reader) == list(range(100))


def test_a_build_step_made_before_the_cache_existed_skips_at_run_time(tmp_path):
    from dslc.session import LocalSession
    path = str(tmp_path / "cache.db")
    early = CachedReader(source_reader(50), path).build_cache_step()  # no cache yet: a real build
    with LocalSession() as session:
        session.run(CachedReader(source_reader(10), path).build_cache_step())
        session.run(early)  # DBExists finds the 10-row cache, so the 50 rows are not written
        assert labels(session, DBFileReader(path)) == list(range(10))
        session.run(CachedReader(source_reader(20), path).build_cache_step(overwrite=True))
        assert labels(session, DBFileReader(path)) == list(range(20))


def test_a_reader_without_the_cache_built_says_so(tmp_path):
    reader = CachedReader(source_reader(5))
    with TaskGroup(), pytest.raises(TraceError) as info:
        pipe(reader, processor=lambda rec: None)  # @no_build
    assert_error_at(info.value, "no_build", "before its cache was built")


def test_each_run_of_the_reading_task_reads_the_cache_once(session, tmp_path):
    path = str(tmp_path / "cache.db")
    reader = CachedReader(source_reader(30), path, batch_size=7)
    session.run(reader.build_cache_step())
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope("dst"):
        dst = Dataset(Struct(("label", np.int64)), name="dst")
        dst.init_empty(ops)
    session.run(init)
    with TaskGroup() as tg:
        pipe(reader, dst.writer(), num_runtime_threads=4)
    session.run(tg)
    session.run(tg)  # the task's init loads the cache and makes its cursor again
    assert sorted(workspace.FetchBlob(str(dst.content().label())).tolist()) == sorted(list(range(30)) * 2)


def test_loop_over_reads_the_cache_again_and_again(session, tmp_path):
    from collections import Counter

    from dslc.dataio import ReaderWithLimit
    path = str(tmp_path / "cache.db")
    session.run(CachedReader(source_reader(10), path).build_cache_step())
    reader = ReaderWithLimit(DBFileReader(path, batch_size=4, loop_over=True), num_iter=5)
    counts = Counter(read_all(session, reader, threads=1)["label"].tolist())
    # batches of 4, 4, 2 (the end of one pass), then 4 and 4 of the next pass
    assert sum(counts.values()) == 18 and set(counts) == set(range(10))
    assert sorted(counts.values()) == [1, 1] + [2] * 8


def test_string_fields_and_an_empty_source(session, db_type, tmp_path):
    names = ["a", "bé", "", "d\x00e"]
    cols = {"name": np.array(names, dtype=object), "n": np.arange(4)}
    blobs = [core.BlobReference(f"s/{k}") for k in cols]
    for b, v in zip(blobs, cols.values()):
        workspace.FeedBlob(str(b), v)
    src = Dataset(from_column_list(list(cols), col_blobs=blobs), name="s")
    path = str(tmp_path / "s.db")
    session.run(CachedReader(src.reader(), path, db_type=db_type).build_cache_step())
    got = read_all(session, DBFileReader(path, db_type))
    # (strings fetch as bytes, as in Caffe2)
    assert sorted(zip(got["n"].tolist(), got["name"].tolist())) == [(k, n.encode()) for k, n in enumerate(names)]

    empty = str(tmp_path / "empty.db")
    session.run(CachedReader(source_reader(0), empty, db_type=db_type).build_cache_step())
    assert labels(session, DBFileReader(empty, db_type)) == []


# ----------------------------------------------------------------------------- realistic sizes


@pytest.mark.slow
def test_a_cache_of_100k_records_with_lists(session, tmp_path):
    rng = np.random.default_rng(7)
    n = 100_000
    cols = {"label": np.arange(n, dtype=np.int64),
            "value": rng.random(n).astype(np.float32),
            "items:lengths": rng.integers(0, 4, n).astype(np.int32)}
    cols["items:values"] = rng.integers(0, 1000, int(cols["items:lengths"].sum()))
    blobs = [core.BlobReference(f"big/{k.replace(':', '_')}") for k in cols]
    for b, v in zip(blobs, cols.values()):
        workspace.FeedBlob(str(b), v)
    src = Dataset(from_column_list(list(cols), col_blobs=blobs), name="big")
    path = str(tmp_path / "big.db")

    cached = CachedReader(src.reader(batch_size=1000), path, batch_size=1000)
    session.run(cached.build_cache_step())
    for reader in (cached, DBFileReader(path, batch_size=777)):
        got = read_all(session, reader)
        assert list(got) == list(cols)
        assert len(got["label"]) == n and sorted(got["label"].tolist()) == list(range(n))
        assert got["label"].sum() == cols["label"].sum()
        assert np.isclose(got["value"].astype(np.float64).sum(), cols["value"].astype(np.float64).sum())
        assert got["items:values"].sum() == cols["items:values"].sum()
        # each record keeps its own value and list, whatever order the threads wrote them in
        order = np.argsort(got["label"])
        assert np.array_equal(got["value"][order], cols["value"])
        assert np.array_equal(got["items:lengths"][order], cols["items:lengths"])
        starts = np.concatenate([[0], np.cumsum(got["items:lengths"])])
        want_starts = np.concatenate([[0], np.cumsum(cols["items:lengths"])])
        for r in rng.choice(n, 200, replace=False):
            k = order[r]
            assert got["items:values"][starts[k]:starts[k + 1]].tolist() == \
                cols["items:values"][want_starts[r]:want_starts[r + 1]].tolist()


def test_db_file_reader_field_names_and_batches(tmp_path):
    from dslc.session import LocalSession
    path = str(tmp_path / "two.db")
    with Task() as save:
        ops.Save([ops.Const(np.arange(10) * 2), ops.Const(np.arange(10) + 0.5)], [], db=path,
                 absolute_path=True, blob_name_overrides=["b", "a"])
    with LocalSession() as session:
        session.run(save)
        stored = DBFileReader(path, batch_size=3)
        assert stored.schema().field_names() == ["b", "a"]  # in stored order
        got = read_all(session, stored, threads=1)
        order = np.argsort(got["b"])
        assert got["b"][order].tolist() == list(range(0, 20, 2))
        assert got["a"][order].tolist() == [k + 0.5 for k in range(10)]
        named = DBFileReader(path, field_names=["a", "b"])
        assert named.schema().field_names() == ["a", "b"]
        assert sorted(read_all(session, named)["a"].tolist()) == [k + 0.5 for k in range(10)]


def test_batches_are_batch_size_records(tmp_path):
    from dslc.session import LocalSession
    path = str(tmp_path / "b.db")
    sizes = []

    def count(rec):
        ops.Python(lambda inputs, outputs: sizes.append(len(inputs[0].data)))([rec.label()], [])

    with LocalSession() as session:
        session.run(CachedReader(source_reader(10), path).build_cache_step())
        with TaskGroup() as tg:
            pipe(DBFileReader(path, batch_size=4), processor=count)
        session.run(tg)
    assert sizes == [4, 4, 2]


# ----------------------------------------------------------------------------- errors


def test_db_file_reader_without_a_cache_file(tmp_path):
    with pytest.raises(blobdb.MissingDBError) as info:
        DBFileReader(str(tmp_path / "nothing.db"))  # @missing
    assert_error_at(info.value, "missing", "no cache database", "nothing.db")
    assert "build_cache_step" in info.value.hint


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_db_file_reader_of_a_damaged_file(tmp_path, damage):
    from dslc.session import LocalSession
    path = str(tmp_path / "c.db")
    with LocalSession() as session:
        session.run(CachedReader(source_reader(100), path).build_cache_step())
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(b"not a database at all" if damage == "garbage" else raw[:len(raw) // 2])
    with pytest.raises(blobdb.DBError) as info:
        DBFileReader(path)  # @damaged
    assert_error_at(info.value, "damaged", "c.db")


def test_a_cache_damaged_inside_a_column_fails_when_loaded(tmp_path):
    from dslc.session import LocalSession
    path = str(tmp_path / "c.db")
    with LocalSession() as session:
        session.run(CachedReader(source_reader(100), path).build_cache_step())
        raw = bytearray(open(path, "rb").read())
        at = raw.index(np.arange(100).astype("<i8").tobytes()[8:16])  # inside label's payload
        raw[at] ^= 0xFF
        with open(path, "wb") as f:
            f.write(raw)
        reader = DBFileReader(path)  # the manifest is intact, so this works
        with TaskGroup() as tg:
            pipe(reader, processor=lambda rec: None)  # @corrupt_payload
        with pytest.raises(ExecutionError) as info:
            session.run(tg)
    assert_error_at(info.value, "corrupt_payload", "label", "damaged")


def test_wrong_db_types(tmp_path):
    path = str(tmp_path / "c.db")
    with pytest.raises(blobdb.DBTypeError) as info:
        CachedReader(source_reader(3), path, db_type="rocksdb")  # @unknown_cached
    assert_error_at(info.value, "unknown_cached", "rocksdb")
    assert "lmdb" in info.value.hint
    with pytest.raises(blobdb.DBTypeError) as info:
        DBFileReader(path, "rocksdb")  # @unknown_type
    assert_error_at(info.value, "unknown_type", "rocksdb")


def test_a_cache_of_another_db_type(tmp_path):
    from dslc.session import LocalSession
    path = str(tmp_path / "c.lmdb")
    with LocalSession() as session:
        session.run(CachedReader(source_reader(10), path, db_type="lmdb").build_cache_step())
    with pytest.raises(blobdb.DBTypeError) as info:
        DBFileReader(path)  # @other_type
    assert_error_at(info.value, "other_type", "lmdb")
    with pytest.raises(blobdb.DBTypeError) as info:
        CachedReader(source_reader(10), path).build_cache_step()  # @other_type_build
    assert_error_at(info.value, "other_type_build", "lmdb")


def test_bad_arguments(tmp_path):
    with pytest.raises(TraceError) as info:
        CachedReader(Struct(("label", np.int64)), str(tmp_path / "x.db"))  # @not_reader
    assert_error_at(info.value, "not_reader", "Reader")
    with pytest.raises(TraceError) as info:
        DBFileReader(None)  # @no_path
    assert_error_at(info.value, "no_path", "db_path")
    with pytest.raises(TraceError) as info:
        CachedReader(source_reader(3), str(tmp_path / "x.db"), batch_size=0)  # @batch
    assert_error_at(info.value, "batch", "batch_size")
