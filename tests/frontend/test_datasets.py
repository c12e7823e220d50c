"""Datasets: cursors (flat and nested records), readers in order and shuffled, the appending
writer, and where a cursor lives (which decides whether later pipes continue or restart)."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.runtime.datasets import FieldTree, Mutex, TreeCursor
from dslc.runtime.workspace import Cell
from dslc.dataio import ReaderWithLimit
from dslc.dataset import Dataset
from dslc.ir.diagnostics import ExecutionError, TraceError
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import ConstRecord, List, Struct, from_column_list
from dslc.task import Task, TaskGroup, WorkspaceType, final_output

GLOBAL = WorkspaceType.GLOBAL


def fed_dataset(name, **columns):
    """A Dataset whose blobs are fed into the current workspace now (as Caffe2's tests do)."""
    with core.NameScope(name):
        blobs = [core.ScopedBlobReference(k) for k in columns]
    for b, v in zip(blobs, columns.values()):
        workspace.FeedBlob(str(b), np.asarray(v))
    return Dataset(from_column_list(list(columns), col_blobs=blobs), name=name)


def empty_dataset(name, schema):
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope(name):
        ds = Dataset(schema, name=name)
        ds.init_empty(ops)
    return ds, init


# ----------------------------------------------------------------------------- runtime cursor


def test_field_tree_domains():
    tree = FieldTree(["a", "b:lengths", "b:values:x", "b:values:c:lengths", "b:values:c:values"])
    assert tree.domain == [0, 0, 1, 1, 2] and tree.num_domains == 3
    with pytest.raises(ValueError, match="before its lengths"):
        FieldTree(["b:values", "b:lengths"])


def test_cursor_reads_nested_rows():
    # rows: (1, [10, 11]), (2, []), (3, [12])
    data = [np.array([1, 2, 3]), np.array([2, 0, 1], dtype=np.int32), np.array([10, 11, 12])]
    c = TreeCursor(["a", "b:lengths", "b:values"])
    first = c.read_batch(data, 2)
    assert [x.tolist() for x in first] == [[1, 2], [2, 0], [10, 11]]
    assert [x.tolist() for x in c.read_batch(data, 2)] == [[3], [1], [12]]
    assert [x.tolist() for x in c.read_batch(data, 2)] == [[], [], []]
    c.reset()
    assert c.read_batch(data, 1)[2].tolist() == [10, 11]


def test_mutex_append_grows_and_keeps_old_views():
    cell, m = Cell("x"), Mutex()
    cell.v = np.zeros(0, dtype=np.float32)
    m.append([cell], [np.array([1, 2])])           # an empty blob takes the batch's dtype
    first = cell.v
    for k in range(3, 40):
        m.append([cell], [np.array([k])])
    assert cell.v.tolist() == list(range(1, 40)) and first.tolist() == [1, 2]
    with pytest.raises(TypeError, match="float64 data to a int64"):
        m.append([cell], [np.array([0.5])])
    assert len(cell.v) == 39  # a refused append changes nothing


# ----------------------------------------------------------------------------- readers


def test_reader_batches_in_order(session):
    src = fed_dataset("src", label=np.arange(10) * 3)
    dst, init = empty_dataset("dst", Struct(("label", np.int64)))
    with TaskGroup() as tg:
        pipe(src.reader(batch_size=4), dst.writer())
    session.run(init)
    session.run(tg)
    assert workspace.FetchBlob(str(dst.content().label())).tolist() == [3 * i for i in range(10)]


def test_nested_records_through_a_pipe(session):
    src = fed_dataset("nsrc", a=[1, 2, 3], **{"b:lengths": np.array([2, 0, 1], dtype=np.int32)},
                      **{"b:values": [10, 11, 12]})
    assert src.field_names() == ["a", "b:lengths", "b:values"]
    dst, init = empty_dataset("ndst", Struct(("a", np.int64), ("b", List(np.int64))))
    with TaskGroup() as tg:
        pipe(src.reader(batch_size=2), dst.writer())
    session.run(init)
    session.run(tg)
    got = [workspace.FetchBlob(str(b)).tolist() for b in dst.content().field_blobs()]
    assert got == [[1, 2, 3], [2, 0, 1], [10, 11, 12]]


def _read_twice(session, init_net_for_cursor):
    with TaskGroup(workspace_type=GLOBAL) as init, Task():
        data = ConstRecord(ops, Struct(("v", np.arange(6))))
        ds = Dataset(data, name="pers")
        reader = ds.reader(ops) if init_net_for_cursor else ds.reader()
        total = ops.Const(np.array([0]))
    def add(rec):
        ops.Add([total, rec.v()], [total])

    with TaskGroup() as epoch:
        pipe(ReaderWithLimit(reader, num_iter=2), processor=add)
    fetch = Task(step=core.Net("fetch"), outputs=[total])
    session.run(init)
    seen = []
    for _ in range(2):
        session.run(epoch)
        session.run(fetch)
        seen.append(int(fetch.outputs()[0].fetch()[0]))
    return seen


def test_a_cursor_made_by_the_init_task_persists_across_runs(session):
    assert _read_twice(session, True) == [0 + 1, 0 + 1 + 2 + 3]


def test_a_cursor_made_by_the_pipe_restarts_each_run(session):
    assert _read_twice(session, False) == [0 + 1, 2 * (0 + 1)]


def test_random_reader_reads_every_row_once_in_sorted_pairs(session):
    keys = np.array([5, 3, 9, 1, 7, 0, 8, 2, 6, 4])
    src = fed_dataset("rsrc", key=keys, payload=keys * 10)
    dst, init = empty_dataset("rdst", Struct(("key", np.int64), ("payload", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as prep, Task():
        reader = src.random_reader(ops, batch_size=2)
        reader.computeoffset(ops.net())
        reader.sort_and_shuffle(ops.net(), sort_by_field="key", shuffle_size=1, batch_size=2)
    with TaskGroup() as tg:
        pipe(reader, dst.writer())
    session.run(init)
    session.run(prep)
    session.run(tg)
    got_keys = workspace.FetchBlob(str(dst.content().key())).tolist()
    got_payload = workspace.FetchBlob(str(dst.content().payload())).tolist()
    assert sorted(got_keys) == list(range(10))                 # each row exactly once
    assert got_payload == [10 * k for k in got_keys]           # rows stay whole
    pairs = {tuple(sorted(got_keys[i:i + 2])) for i in range(0, 10, 2)}
    assert pairs == {(2 * i, 2 * i + 1) for i in range(5)}     # batches of neighbours in key order


def test_random_reader_loop_over_wraps_around(session):
    src = fed_dataset("lsrc", v=[4, 5, 6])
    with TaskGroup(workspace_type=GLOBAL) as tg, Task():
        reader = src.random_reader(ops, indices=ops.Const(np.array([2, 0, 1])), loop_over=True, batch_size=2)
        reader.computeoffset(ops.net())
        batches = []
        for _ in range(3):  # one net per read: the batch blob is named after the net
            net = ops.net(core.Net("reads"))
            _, fields = reader.read(net)
            batches.append(final_output(fields[0]))
    session.run(tg)
    assert [b.fetch().tolist() for b in batches] == [[6, 4], [5], [6, 4]]


# ----------------------------------------------------------------------------- writer and errors


def test_writer_threads_append_each_record_once_and_adopt_the_dtype(session):
    src = fed_dataset("wsrc", label=np.arange(50, dtype=np.int32))
    dst, init = empty_dataset("wdst", Struct(("label", np.void)))  # untyped: starts as float32
    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), num_runtime_threads=4)
    session.run(init)
    assert workspace.FetchBlob(str(dst.content().label())).dtype == np.float32
    session.run(tg)
    out = workspace.FetchBlob(str(dst.content().label()))
    assert out.dtype == np.int32 and sorted(out.tolist()) == list(range(50))


def test_inconsistent_records_are_refused(session):
    dst, init = empty_dataset("cdst", Struct(("a", np.int64), ("b", List(np.int64))))
    with TaskGroup(workspace_type=GLOBAL) as tg, Task():
        writer = dst.writer(ops)
        bad = [ops.Const(np.array([1, 2])), ops.Const(np.array([1, 1], dtype=np.int32)),
               ops.Const(np.array([7]))]  # lengths add up to 2, one value given
        writer.write(ops.net(), bad)
    session.run(init)
    with pytest.raises(ExecutionError, match="'b:values' has 1 entries, its domain has 2") as e:
        session.run(tg)
    assert e.value.hint and e.value.loc.file.endswith("test_datasets.py")


def test_uninitialized_dataset_is_a_located_error():
    ds = Dataset(Struct(("a", np.int64)))
    with pytest.raises(TraceError, match="no blobs yet") as e:
        ds.reader()
    assert e.value.loc.file.endswith("test_datasets.py") and "init_empty" in e.value.hint


def test_a_dataset_of_arrays_needs_blobs_to_be_read():
    ds = Dataset(Struct(("a", np.arange(3))))  # arrays, not blobs yet
    with pytest.raises(TraceError, match="holds arrays, not blobs") as e:
        ds.writer()
    assert "ConstRecord" in e.value.hint
