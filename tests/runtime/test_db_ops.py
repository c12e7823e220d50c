"""Save, Load and DBExists run through LocalSession, for each blob database type.

Expected values are built here with numpy, never read back from dslc. Error tests
find the offending line by its ``# @tag`` marker in this file's text.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dslc.runtime import blobdb
from dslc.ir import parse, print_module
from dslc.ir.diagnostics import DSLTypeError, ExecutionError
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, final_output
from dbtypes import leveldb
from markers import Markers

DB_TYPES = ["dslcdb", "minidb", "lmdb", leveldb()]

@pytest.fixture(params=DB_TYPES)
def db_type(request):
    return request.param


MARKERS = Markers(__file__)
line_of, assert_error_at = MARKERS.line_of, MARKERS.assert_error_at


@pytest.fixture(params=["none", "default"])
def session(backend, request):
    with LocalSession(backend=backend, passes=request.param) as s:
        yield s


def run(session, build):
    """Run ``build()`` in a Task; the fetched value of each blob it returns."""
    with Task() as task:
        blobs = build()
        blobs = list(blobs) if isinstance(blobs, (list, tuple)) else [blobs]
        outs = [final_output(b) for b in blobs]
    session.run(task)
    return [o.fetch() for o in outs]


VALUES = {
    "f": np.arange(12, dtype=np.float32).reshape(3, 4) / 4,
    "i": np.array([[-7, 2**40]], dtype=np.int64),
    "b": np.array([True, False, True]),
    "s": np.array(["", "héllo", "a\x00b"], dtype=object),
}


def save_values(path, db_type, **extra):
    def build():
        blobs = [ops.Const(v, blob_out=name) for name, v in VALUES.items()]
        ops.Save(blobs, [], db=path, db_type=db_type, absolute_path=True, **extra)
        return []
    return build


def test_save_then_load_gives_back_every_dtype_and_shape(session, db_type, tmp_path):
    path = str(tmp_path / "ck")
    run(session, save_values(path, db_type))
    got = run(session, lambda: ops.Load([], ["f2", "i2", "b2", "s2"], db=path, db_type=db_type,
                                        absolute_path=True, source_blob_names=list(VALUES)))
    for want, have in zip(VALUES.values(), got):
        assert have.dtype == want.dtype and have.shape == want.shape
        if want.dtype == object:  # (strings fetch as bytes, as in Caffe2)
            want = np.array([v.encode() for v in want.reshape(-1)], dtype=object).reshape(want.shape)
        assert have.tolist() == want.tolist()


def test_load_into_the_saved_names_overwrites_them(session, db_type, tmp_path):
    path = str(tmp_path / "ck")
    run(session, lambda: [ops.Save([ops.Const(np.int64(41), blob_out="x")], [], db=path, db_type=db_type,
                                   absolute_path=True)] and [])
    got = run(session, lambda: [ops.Const(np.int64(0), blob_out="x"),
                                ops.Load([], ["x"], db=path, db_type=db_type, absolute_path=True)][1:])
    assert got[0] == 41 and got[0].dtype == np.int64


def test_scalars_strings_and_counters_round_trip(session, db_type, tmp_path):
    path = str(tmp_path / "ck")

    def save():
        c = ops.CreateCounter([], ["c"], init_count=5)
        ops.CountUp(c)
        ops.CountUp(c)   # count 7, init 5
        ops.Save([c, ops.Const("word", blob_out="w"), ops.Const(2.5, blob_out="x")], [], db=path,
                 db_type=db_type, absolute_path=True)
        return []

    def load():
        c, w, x = ops.Load([], ["c", "w", "x"], db=path, db_type=db_type, absolute_path=True)
        prev = ops.CountUp(c)            # the loaded counter goes on counting from 7
        return [prev, ops.RetrieveCount(c), w, x]

    run(session, save)
    prev, now, w, x = run(session, load)
    assert (prev, now) == (7, 8)
    assert w == b"word"  # (bytes, as Caffe2 fetches strings)
    assert x == np.float32(2.5) and np.asarray(x).shape == ()


def test_db_exists(session, db_type, tmp_path):
    path = str(tmp_path / "ck")

    def exists():
        e = ops.Const(False)
        ops.DBExists([], [e], db_name=path, db_type=db_type, absolute_path=True)
        return [e]

    assert run(session, exists) == [False]
    run(session, save_values(path, db_type))
    assert run(session, exists) == [True]


def test_relative_db_names_are_under_the_working_directory(session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(session, lambda: [ops.Save([ops.Const(np.int32(3), blob_out="x")], [], db="sub.ck")] and [])
    assert os.path.isfile(tmp_path / "sub.ck")
    assert run(session, lambda: ops.Load([], ["x"], db="sub.ck")) == [3]


def test_key_renaming_strip_add_prefix_and_overrides(session, tmp_path):
    path, other = str(tmp_path / "ck"), str(tmp_path / "ck2")

    def save():
        a = ops.Const(np.int64(1), blob_out="scope/a")
        b = ops.Const(np.int64(2), blob_out="scope/b")
        ops.Save([a, b], [], db=path, absolute_path=True, strip_prefix="scope/")
        ops.Save([a, b], [], db=other, absolute_path=True, blob_name_overrides=["one", "two"])
        return []

    run(session, save)
    assert sorted(blobdb.get("dslcdb").keys(path)) == ["a", "b"]
    assert sorted(blobdb.get("dslcdb").keys(other)) == ["one", "two"]
    got = run(session, lambda: ops.Load([], ["new/a", "new/b"], db=path, absolute_path=True, add_prefix="new/"))
    assert got == [1, 2]
    got = run(session, lambda: ops.Load([], ["t"], db=other, absolute_path=True, source_blob_names=["two"]))
    assert got == [2]


def test_load_all_and_several_dbs(session, tmp_path):
    p1, p2 = str(tmp_path / "a"), str(tmp_path / "b")
    run(session, lambda: [ops.Save([ops.Const(np.int64(10), blob_out="u")], [], db=p1, absolute_path=True),
                          ops.Save([ops.Const(np.int64(20), blob_out="v")], [], db=p2, absolute_path=True)] and [])
    ws = session.workspace
    ws.reset()
    run(session, lambda: [ops.Load([], [], dbs=[p1, p2], absolute_path=True, load_all=1)] and [])
    assert ws.fetch("u") == 10 and ws.fetch("v") == 20
    assert run(session, lambda: ops.Load([], ["v", "u"], dbs=[p1, p2], absolute_path=True)) == [20, 10]


def test_allow_incomplete_keeps_what_the_checkpoint_lacks(session, db_type, tmp_path):
    path = str(tmp_path / "ck")
    run(session, lambda: [ops.Save([ops.Const(np.int64(5), blob_out="have")], [], db=path, db_type=db_type,
                                   absolute_path=True)] and [])

    def load():
        ops.Const(np.int64(-1), blob_out="have")
        ops.Const(np.int64(99), blob_out="lack")
        return list(ops.Load([], ["have", "lack"], db=path, db_type=db_type, absolute_path=True,
                             allow_incomplete=True))

    assert run(session, load) == [5, 99]


def test_a_missing_blob_without_allow_incomplete_is_located(session, db_type, tmp_path):
    path = str(tmp_path / "ck")
    run(session, save_values(path, db_type))
    with pytest.raises(ExecutionError) as info:
        run(session, lambda: ops.Load([], ["f", "nope"], db=path, db_type=db_type, absolute_path=True))  # @lack
    assert_error_at(info.value, "lack", "nope", path)
    assert isinstance(info.value.__cause__, blobdb.MissingBlobError)
    assert "allow_incomplete" in info.value.hint


def test_loading_a_missing_checkpoint_names_the_path(session, db_type, tmp_path):
    path = str(tmp_path / "never-saved")
    with pytest.raises(ExecutionError) as info:
        run(session, lambda: ops.Load([], ["x"], db=path, db_type=db_type, absolute_path=True))  # @missing
    assert_error_at(info.value, "missing", "no checkpoint", path)
    assert isinstance(info.value.__cause__, blobdb.MissingDBError)


def test_unknown_db_type_lists_the_known_ones(session, tmp_path):
    with pytest.raises(ExecutionError) as info:
        run(session, save_values(str(tmp_path / "ck"), "rocksdb"))  # (located at the Save in save_values)
    assert "rocksdb" in info.value.message
    for known in ("dslcdb", "minidb", "lmdb"):
        assert known in info.value.hint


@pytest.mark.parametrize("saved, asked", [("dslcdb", "lmdb"), ("lmdb", "minidb"), leveldb("dslcdb", "leveldb"),
                                          leveldb("lmdb", "leveldb")])
def test_loading_with_the_wrong_db_type_says_which_type_it_is(session, tmp_path, saved, asked):
    path = str(tmp_path / "ck")
    run(session, save_values(path, saved))
    with pytest.raises(ExecutionError) as info:
        run(session, lambda: ops.Load([], ["f"], db=path, db_type=asked, absolute_path=True))  # @wrongtype
    assert_error_at(info.value, "wrongtype", path)
    assert isinstance(info.value.__cause__, blobdb.DBTypeError)
    shown = {"dslcdb": "dslcdb", "lmdb": "lmdb"}[saved]
    assert f"db_type='{shown}'" in info.value.message


def test_saving_a_timer_is_refused_with_a_hint(session, tmp_path):
    def build():
        t = ops.TimerBegin([], ["t"])
        ops.Save([t], [], db=str(tmp_path / "ck"), absolute_path=True)  # @timer
        ops.TimerEnd(t, [])
        return []

    with pytest.raises(ExecutionError) as info:
        run(session, build)
    assert_error_at(info.value, "timer", "'t'", "Timer")
    assert not os.path.exists(tmp_path / "ck")
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_save_into_a_missing_directory_fails_with_a_hint(session, tmp_path):
    path = str(tmp_path / "no" / "such" / "dir" / "ck")
    with pytest.raises(ExecutionError) as info:
        run(session, lambda: [ops.Save([ops.Const(1)], [], db=path, absolute_path=True)] and [])  # @nodir
    assert_error_at(info.value, "nodir", path)
    assert "directory" in info.value.hint


def test_override_count_must_match_the_inputs(session, tmp_path):
    with pytest.raises(DSLTypeError) as info:
        run(session, lambda: [ops.Save([ops.Const(1), ops.Const(2)], [], db=str(tmp_path / "x"),  # @overrides
                                       blob_name_overrides=["only_one"])] and [])
    assert_error_at(info.value, "overrides", "blob_name_overrides")


def test_ir_text_of_save_and_load_round_trips(tmp_path):
    path = str(tmp_path / "ck")
    with Task() as task:
        x = ops.Const(np.float32(1.5), blob_out="x")
        ops.Save([x], [], db=path, db_type="lmdb", absolute_path=True, strip_prefix="p/")
        (y,) = [ops.Load([], ["y"], db=path, db_type="lmdb", absolute_path=True, source_blob_names=["x"])]
        final_output(y)
    with LocalSession(passes="none") as s:
        text = print_module(s.compile(task).module)
    assert 'input_names = ["x"]' in text and 'output_names = ["y"]' in text
    assert print_module(parse(text)) == text


def test_save_then_load_in_one_task_keeps_their_order(session, db_type, tmp_path):
    path = str(tmp_path / "ck")

    def build():
        x = ops.Const(np.int64(8), blob_out="x")
        ops.Save([x], [], db=path, db_type=db_type, absolute_path=True)
        ops.Const(np.int64(0), blob_out="x")
        return ops.Load([], ["x"], db=path, db_type=db_type, absolute_path=True)

    assert run(session, build) == [8]


def test_two_blobs_under_one_key_is_refused(session, tmp_path):
    def build():
        a = ops.Const(np.int64(1), blob_out="p/x")
        b = ops.Const(np.int64(2), blob_out="q/x")
        ops.Save([a, b], [], db=str(tmp_path / "ck"), absolute_path=True, strip_prefix="/")  # @dupkey
        return []

    with pytest.raises(DSLTypeError) as info:
        run(session, build)
    assert_error_at(info.value, "dupkey", "'x'")


def test_strip_prefix_with_overrides_is_refused(session, tmp_path):
    def build():
        a = ops.Const(np.int64(1), blob_out="p/x")
        ops.Save([a], [], db=str(tmp_path / "ck"), absolute_path=True, strip_prefix="p/",  # @both
                 blob_name_overrides=["y"])
        return []

    with pytest.raises(DSLTypeError) as info:
        run(session, build)
    assert_error_at(info.value, "both", "not both")


def test_loading_one_name_twice_is_refused(session, tmp_path):
    path = str(tmp_path / "ck")

    def build():
        ops.Save([ops.Const(np.int64(1), blob_out="x")], [], db=path, absolute_path=True)
        return ops.Load([], ["x", "x"], db=path, absolute_path=True)  # @twice

    with pytest.raises(DSLTypeError) as info:
        run(session, build)
    assert_error_at(info.value, "twice", "'x' twice")
