"""Pipes under load and under failure: many records through several threads and a small queue,
exact read limits with several threads, and failing processors that must stop every thread
(no thread left blocked on a queue) and leave the session usable."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dslc import core, workspace
from dslc.dataio import ReaderWithLimit
from dslc.dataset import Dataset
from dslc.ir.diagnostics import ExecutionError
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import NewRecord, Struct, from_column_list
from dslc.task import Task, TaskGroup, WorkspaceType, final_output

GLOBAL = WorkspaceType.GLOBAL


def source(name, values):
    blob = core.BlobReference(f"{name}/x")
    workspace.FeedBlob(str(blob), np.asarray(values))
    return Dataset(from_column_list(["x"], col_blobs=[blob]), name=name)


def destination(name):
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope(name):
        ds = Dataset(Struct(("x", np.int64)), name=name)
        ds.init_empty(ops)
    return ds, init


def affine(rec):
    """x -> 2x + 1, on the whole batch."""
    with core.NameScope("affine"):
        out = NewRecord(ops, rec)
    ops.Add([ops.Add([rec.x(), rec.x()]), ops.Const([1])], [out.x()])
    return out


@pytest.mark.slow
def test_100k_records_through_4_threads_and_a_queue_of_8(session):
    # one record per read: 100,000 records go through the queue of 8, one by one
    n = 100_000
    values = np.arange(n, dtype=np.int64)
    src = source("big", values)
    dst, init = destination("big_out")
    with TaskGroup() as tg:
        q = pipe(src.reader(), processor=affine, num_runtime_threads=4, capacity=8)
        pipe(q, dst.writer(), num_runtime_threads=4)
    session.run(init)
    session.run(tg)
    out = workspace.FetchBlob(str(dst.content().x()))
    expected = 2 * values + 1
    assert out.size == expected.size and int(out.sum()) == int(expected.sum())
    assert np.array_equal(np.sort(out), expected)  # every record exactly once


@pytest.mark.parametrize("threads, batch", [(4, 1), (3, 2)])
def test_reader_with_limit_reads_exactly_num_iter_batches_with_threads(session, threads, batch):
    src = source("lim", np.arange(100))
    dst, init = destination("lim_out")
    with TaskGroup(workspace_type=GLOBAL) as tg:
        reader = ReaderWithLimit(src.reader(batch_size=batch), num_iter=37)
        pipe(reader, dst.writer(), num_runtime_threads=threads)
    session.run(init)
    session.run(tg)
    got = sorted(workspace.FetchBlob(str(dst.content().x())).tolist())
    assert got == list(range(37 * batch))  # the cursor hands out rows in order: the first 37 batches
    assert not workspace.FetchBlob(str(reader.data_finished()))


def _failing_processor(bad_value, where):
    def check(inputs, outputs):
        if bad_value in inputs[0].data:
            raise ValueError(f"bad record {bad_value}")

    def validate(rec):
        ops.Python(check)([rec.x()], [])
        where.append(_line() - 1)
        return rec
    return validate


def _assert_clean_failure(session, tg, where, task_name, before):
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="Python op '.*check' raised ValueError: bad record") as e:
        session.run(tg)
    assert time.monotonic() - start < 10
    assert e.value.loc.file.endswith("test_pipeline_threads.py") and e.value.loc.line == where[0]
    assert e.value.task == task_name and e.value.hint
    deadline = time.monotonic() + 2
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before  # no pipe thread is left blocked
    with Task() as after:  # the session still runs other work
        out = final_output(ops.Add([ops.Const(20), ops.Const(22)]))
    session.run(after)
    assert out.fetch() == 42


def test_failing_producer_stops_consumers_blocked_on_an_empty_queue(session):
    src = source("fp", np.arange(1000))
    dst, init = destination("fp_out")
    where = []
    with TaskGroup() as tg:
        q = pipe(src.reader(), processor=_failing_processor(500, where), num_runtime_threads=4,
                 capacity=4, name="validate")
        pipe(q, dst.writer(), num_runtime_threads=3)
    session.run(init)
    _assert_clean_failure(session, tg, where, "local/validate", threading.active_count())


def test_failing_consumer_stops_producers_blocked_on_a_full_queue(session):
    src = source("fc", np.arange(1000))
    dst, init = destination("fc_out")
    where = []
    with TaskGroup() as tg:
        q = pipe(src.reader(), num_runtime_threads=4, capacity=2)  # fills fast, then blocks
        pipe(q, dst.writer(), processor=_failing_processor(3, where), num_runtime_threads=2, name="sink")
    session.run(init)
    _assert_clean_failure(session, tg, where, "local/sink", threading.active_count())


def test_a_consumer_that_stops_early_releases_producers_of_a_full_queue(session):
    src = source("early", np.arange(1000))
    dst, init = destination("early_out")
    with TaskGroup(workspace_type=GLOBAL) as tg:
        q = pipe(src.reader(), num_runtime_threads=2, capacity=3)
        pipe(ReaderWithLimit(q.reader(), num_iter=5), dst.writer())
    session.run(init)
    start = time.monotonic()
    session.run(tg)  # the consumer closes the queue when it ends: blocked producers fail and stop
    assert time.monotonic() - start < 10
    got = workspace.FetchBlob(str(dst.content().x())).tolist()
    assert len(got) == 5 and len(set(got)) == 5


def _line() -> int:
    import sys
    return sys._getframe(1).f_lineno
