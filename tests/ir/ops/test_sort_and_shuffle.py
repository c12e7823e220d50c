"""SortAndShuffle gives Caffe2's order, which is the same on every run.

Caffe2 sorts with std::sort and shuffles each range with a fresh default-seeded
std::default_random_engine, so its "random" order is fixed. Every expected order
below was read off the real Caffe2 (the torch 1.10.2 wheel, run through
/work/shared/tools/caffe2-ref/run.sh): a net with CreateTreeCursor(fields=["x"]),
FeedBlob("x", keys as int32) and SortAndShuffle([cursor, "x"], ["idx"],
sort_by_field_idx=..., batch_size=b, shuffle_size=s), then FetchBlob("idx").
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.runtime import cxxorder
from dslc.dataset import Dataset
from dslc.ir.diagnostics import DSLError
from dslc.schema import FetchRecord, List, Struct, from_blob_list

# (keys or row count, sort_by_field_idx, batch_size, shuffle_size) -> Caffe2's indices
CAFFE2_ORDERS = [
    ((10, -1, 2, 2), [5, 4, 2, 3, 8, 9, 6, 7, 1, 0]),
    ((7, -1, 1, 4), [0, 2, 4, 6, 5, 3, 1]),
    ((33, -1, 3, 2), [10, 11, 6, 2, 3, 1, 14, 15, 13, 30, 31, 32, 16, 17, 12, 28, 29, 24, 26, 27, 25,
                      20, 21, 19, 8, 9, 7, 4, 5, 0, 22, 23, 18]),
    # keys (7 i) mod 5 for i < 20: ties on more than 16 rows, where std::sort is not stable
    ((((np.arange(20) * 7) % 5).tolist(), 0, 1, 1),
     [9, 8, 19, 13, 6, 0, 18, 16, 14, 7, 4, 12, 15, 3, 5, 2, 1, 17, 10, 11]),
    (([1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 0, 1], 0, 2, 5),
     [9, 2, 19, 11, 18, 5, 17, 4, 29, 28, 26, 24, 15, 21, 27, 23, 3, 30, 6, 0, 22, 25, 13, 16, 8, 10,
      14, 7, 20, 12, 1]),
]


def _keys(spec):
    keys = spec[0]
    return np.arange(keys, dtype=np.int32) if isinstance(keys, int) else np.array(keys, np.int32)


@pytest.mark.parametrize("spec, want", CAFFE2_ORDERS)
def test_the_op_gives_caffe2s_order_every_time(session, spec, want):
    _, sort_by, batch, chunk = spec
    workspace.FeedBlob("x", _keys(spec))
    net = core.Net("order")
    cursor = net.CreateTreeCursor([], ["c"], fields=["x"])
    idx = net.SortAndShuffle([cursor, "x"], ["idx"], sort_by_field_idx=sort_by, batch_size=batch,
                             shuffle_size=chunk)
    session.run(net)
    assert workspace.FetchBlob(idx).tolist() == want
    session.run(net)
    assert workspace.FetchBlob(idx).tolist() == want  # the same again: nothing is seeded by time


def test_a_random_reader_reads_in_caffe2s_order(session):
    # three rows sorted by their list lengths (2, 0, 1), shuffled in pairs: Caffe2 reads
    # rows 2, 1, 0 (the order its own dataset test expects)
    schema = Struct(("id", np.int64), ("l", List(np.int64)))
    contents = [np.array([100, 200, 300]), np.array([2, 0, 1], np.int32), np.array([7, 8, 9])]
    init = core.Net("init")
    blobs = from_blob_list(schema, [init.Const(c) for c in contents])
    ds = Dataset(blobs, name="ds")
    reader = ds.random_reader(init)
    reader.sort_and_shuffle(init, "l:lengths", 1, 2)
    reader.computeoffset(init)
    read = core.Net("read")
    _, batch = reader.read_record(read)
    session.run(init)
    got = []
    for _ in range(3):
        session.run(read)
        rec = FetchRecord(batch)
        got.append((rec.id.get().tolist(), rec.l.value.get().tolist()))
    assert got == [([300], [9]), ([200], []), ([100], [7, 8])]


def test_sorting_by_a_nested_field_is_an_error(session):
    workspace.FeedBlob("len", np.array([1, 1], np.int32))
    workspace.FeedBlob("val", np.array([5, 6]))
    net = core.Net("bad")
    cursor = net.CreateTreeCursor([], ["c"], fields=["a:lengths", "a:values"])
    net.SortAndShuffle([cursor, "len", "val"], ["idx"], sort_by_field_idx=1)
    with pytest.raises(DSLError, match="not a top-level field") as e:
        session.run(net)
    assert "test_sort_and_shuffle.py" in str(e.value)


def test_the_deep_recursion_fallback_still_sorts():
    # introsort falls back to heapsort past its depth limit; force it and check the order
    keys = [3, 1, 2, 3, 0, 1, 2, 0, 3, 3, 1, 0, 2, 2, 1, 0, 3, 1, 0, 2, 1]
    idx = list(range(len(keys)))
    cxxorder._heapsort(idx, keys, 0, len(idx))
    assert [keys[i] for i in idx] == sorted(keys) and sorted(idx) == list(range(len(keys)))


def test_distinct_keys_sort_like_numpy():
    keys = np.random.default_rng(3).permutation(1000)
    assert cxxorder.sort_indices(keys) == np.argsort(keys).tolist()
