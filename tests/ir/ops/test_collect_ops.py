"""Sampling streams of tensors (tensor vectors, CollectTensor, LastNWindowCollector) and
TrimDataset. Expected windows are worked out by hand from the ring-buffer rule."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.dataset import Dataset
from dslc.ir.diagnostics import DSLError
from dslc.schema import FetchRecord, List, Struct, from_blob_list

ROWS = np.arange(1, 7, dtype=np.float32).reshape(3, 2)  # rows r0=[1,2], r1=[3,4], r2=[5,6]


def _window_plan(iters):
    net = core.Net("collect")
    data = net.Const(ROWS)
    net.LastNWindowCollector(["window", "next", data], ["window", "next"], num_to_collect=7)
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("s", [net], num_iter=iters))
    return plan


def test_last_n_window_is_a_ring_buffer_kept_across_runs(session):
    workspace.FeedBlob("window", np.zeros((0, 2), np.float32))
    workspace.FeedBlob("next", np.array(0, np.int32))
    session.run(_window_plan(1))
    assert workspace.FetchBlob("window").tolist() == ROWS.tolist() and workspace.FetchBlob("next") == 3
    # two more batches of 3 into 7 slots: slots 3..5 take r0..r2, then slot 6 takes r0 and
    # the ring wraps: slots 0, 1 take r1, r2; next is (6 + 3) mod 7 = 2
    session.run(_window_plan(2))
    assert workspace.FetchBlob("window").tolist() == ROWS[[1, 2, 2, 0, 1, 2, 0]].tolist()
    assert workspace.FetchBlob("next") == 2
    # three more: slots 2, 3, 4 / 5, 6, 0 / 1, 2, 3; next = (2 + 9) mod 7 = 4
    session.run(_window_plan(3))
    assert workspace.FetchBlob("window").tolist() == ROWS[[2, 0, 1, 2, 2, 0, 1]].tolist()
    assert workspace.FetchBlob("next") == 4


def test_a_batch_longer_than_the_window_keeps_its_last_rows(session):
    workspace.FeedBlob("next", np.array(1, np.int32))
    net = core.Net("long")
    win = net.Const(np.zeros((0,), np.int64))
    w, nxt, seen = net.LastNWindowCollector([win, "next", net.Const(np.arange(10)), net.CreateMutex([]),
                                             net.Const(np.array([0], np.int64))], 3, num_to_collect=4)
    session.run(net)
    assert workspace.FetchBlob(w).tolist() == [6, 7, 8, 9] and workspace.FetchBlob(nxt) == 0
    assert workspace.FetchBlob(seen).tolist() == [10]


def test_collect_tensor_keeps_a_uniform_sample_of_whole_records(session):
    init = core.Net("init")
    va, vb = init.CreateTensorVector([], 1), init.CreateTensorVector([], 1)
    init.ConstantFill([], "i", shape=[1], value=0, dtype=core.DataType.INT64)
    step = core.Net("step")
    step.Add(["i", step.Const(np.array([1]))], ["i"])
    neg = step.Negative(["i"])
    step.CollectTensor([va, vb, "i", neg], [va, vb], num_to_collect=200)
    done = core.Net("done")
    size = done.TensorVectorSize([va])
    a, b = done.ConcatTensorVector([va]), done.ConcatTensorVector([vb])
    plan = core.Plan("collect")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("loop", step, num_iter=4000))
    plan.AddStep(core.execution_step("done", done))
    session.run(plan)
    got_a, got_b = workspace.FetchBlob(a), workspace.FetchBlob(b)
    assert workspace.FetchBlob(size) == 200 and got_a.shape == (200,)
    assert (got_b == -got_a).all()  # a record is kept whole, at one index in both vectors
    assert len(set(got_a.tolist())) == 200 and got_a.min() >= 1 and got_a.max() <= 4000
    # each of 4000 records is kept with chance 1/20: every tenth of the stream should hold
    # about 20 of them (the chance that one holds fewer than 5 is below 1e-5)
    counts = np.histogram(got_a, bins=10, range=(1, 4001))[0]
    assert counts.min() >= 5, counts


def test_concat_of_an_empty_vector_is_an_error(session):
    net = core.Net("empty")
    net.ConcatTensorVector([net.CreateTensorVector([], 1)])
    with pytest.raises(DSLError, match="empty tensor vector"):
        session.run(net)


def test_trim_keeps_whole_rows_up_to_a_multiple(session):
    schema = Struct(("x", np.int64), ("l", List(np.int32)))
    # rows (1, [7, 8]), (2, []), (3, [9]); trimmed to 2 rows: (1, [7, 8]), (2, [])
    contents = [np.array([1, 2, 3]), np.array([2, 0, 1], np.int32), np.array([7, 8, 9], np.int32)]
    init = core.Net("init")
    ds = Dataset(from_blob_list(schema, [init.Const(c) for c in contents]), name="t")
    session.run(init)
    trim = core.Net("trim")
    ds.trim(trim, multiple_of=2)
    session.run(trim)
    got = FetchRecord(ds.content())
    assert [a.tolist() for a in got.field_blobs()] == [[1, 2], [2, 0], [7, 8]]
    again = core.Net("again")
    ds.trim(again, multiple_of=2)  # already a multiple: unchanged
    session.run(again)
    assert [a.tolist() for a in FetchRecord(ds.content()).field_blobs()] == [[1, 2], [2, 0], [7, 8]]


# ----------------------------------------------------------------------------- an empty (created) window

def test_a_window_created_empty_starts_the_ring(session):
    workspace.CreateBlob("window")  # Caffe2's idiom: the blob exists but holds nothing yet
    workspace.FeedBlob("next", np.array(0, np.int32))
    # two batches of 3 into 7 empty slots: slots 0..2, then 3..5; next is 6
    session.run(_window_plan(2))
    assert workspace.FetchBlob("window").tolist() == ROWS[[0, 1, 2, 0, 1, 2]].tolist()
    assert workspace.FetchBlob("next") == 6


def test_an_empty_window_as_caffe2_fills_it(backend):
    # Read off the real Caffe2 (torch 1.10.2, /work/shared/tools/caffe2-ref/run.sh): after
    # CreateBlob("w") and two RunNetOnce of a 4-row window over ROWS, w is
    # [[3, 4], [5, 6], [5, 6], [1, 2]] and next is 2.
    workspace.CreateBlob("w")
    workspace.FeedBlob("next", np.array(0, np.int32))
    net = core.Net("collect")
    net.LastNWindowCollector(["w", "next", net.Const(ROWS)], ["w", "next"], num_to_collect=4)
    ws = workspace.current()
    ws.run(net, backend=backend)
    assert workspace.FetchBlob("w").tolist() == ROWS.tolist()
    ws.run(net, backend=backend)
    assert workspace.FetchBlob("w").tolist() == [[3, 4], [5, 6], [5, 6], [1, 2]]
    assert workspace.FetchBlob("next") == 2


def test_a_window_blob_that_does_not_exist_is_a_located_error(session):
    workspace.FeedBlob("next", np.array(0, np.int32))  # no CreateBlob("window"): a typo, say
    plan = _window_plan(1)
    with pytest.raises(DSLError) as e:
        session.run(plan)
    assert "'window'" in str(e.value) and "read before anything wrote it" in str(e.value)
    assert "test_collect_ops.py:" in str(e.value)


def test_only_ops_declaring_it_take_an_empty_blob(session):
    workspace.CreateBlob("x")
    net = core.Net("n")
    net.Add(["x", "x"], "y")  # Caffe2 fails here too ("Blob contains nullptr (uninitialized)")
    with pytest.raises(DSLError) as e:
        session.run(net)
    assert "'x'" in str(e.value) and "read before anything wrote it" in str(e.value)


def test_creating_the_window_after_a_failed_run_makes_the_same_net_run(session):
    workspace.FeedBlob("next", np.array(0, np.int32))
    net = core.Net("collect")
    net.LastNWindowCollector(["w", "next", net.Const(ROWS)], ["w", "next"], num_to_collect=4)
    with pytest.raises(DSLError, match="read before anything wrote it"):
        session.run(net)  # no blob 'w' yet (compiled with a plain load)
    workspace.CreateBlob("w")
    session.run(net)  # the session compiles it again: 'w' is now an empty blob, an empty ring
    assert workspace.FetchBlob("w").tolist() == ROWS.tolist() and workspace.FetchBlob("next") == 3
