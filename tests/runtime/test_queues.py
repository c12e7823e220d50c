"""Queue operators and the runtime queue: FIFO order, capacity, close and drain, blocking
producers and consumers on threads, timeouts, and cancellation of blocked waits."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dslc.runtime.cancel import Cancelled, swap_token, wait_for
from dslc.runtime.queues import TIMED_OUT, BlobsQueue
from dslc.ir.diagnostics import DSLTypeError, ExecutionError
from dslc.net_builder import ops
from dslc.queue_util import Queue, close_queue, dequeue, enqueue
from dslc.schema import Struct
from dslc.task import Task, TaskGroup, final_output


class Token:
    """The cancel-token protocol of the runtime (flag, lock, waiters)."""

    def __init__(self):
        self.flag, self.lock, self.waiters = False, threading.Lock(), []

    def cancel(self):
        self.flag = True
        with self.lock:
            waiters = list(self.waiters)
        for w in waiters:
            w()


# ----------------------------------------------------------------------------- runtime


def test_runtime_queue_fifo_close_and_drain():
    q = BlobsQueue(2, 1)
    assert q.put((1,)) and q.put((2,))
    q.close()
    assert not q.put((3,))          # closed and full: fails
    assert q.get() == (1,)
    assert q.put((4,))              # closed but not full: still goes in
    assert [q.get(), q.get(), q.get()] == [(2,), (4,), None]  # drained, then None


def test_runtime_queue_blocks_producer_until_room():
    q, got = BlobsQueue(1, 1), []
    q.put((0,))
    t = threading.Thread(target=lambda: got.append(q.put((1,))))
    t.start()
    time.sleep(0.05)
    assert t.is_alive() and not got  # waiting for room
    assert q.get() == (0,)
    t.join(2)
    assert got == [True] and q.get() == (1,)


def test_runtime_get_times_out():
    q = BlobsQueue(1, 1)
    start = time.monotonic()
    assert q.get(timeout=0.05) is TIMED_OUT
    assert time.monotonic() - start >= 0.04


def test_blocked_wait_ends_with_cancelled_when_its_token_is_cancelled():
    q, token, seen = BlobsQueue(1, 1), Token(), []

    def reader():
        swap_token(token)
        try:
            q.get()
        except Cancelled:
            seen.append("cancelled")

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.05)
    token.cancel()
    t.join(2)
    assert not t.is_alive() and seen == ["cancelled"] and token.waiters == []


def test_wait_for_sees_a_cancel_that_came_first():
    token, cond = Token(), threading.Condition()
    token.flag = True
    with cond, pytest.raises(Cancelled):
        wait_for(cond, lambda: False, token=token)


# ----------------------------------------------------------------------------- ops in a task


def test_enqueue_dequeue_close_semantics_in_one_task(session):
    with Task() as task:
        q = ops.CreateBlobsQueue([], ["q"], capacity=2, num_blobs=1)
        s1 = ops.SafeEnqueueBlobs([q, ops.Const(10)], ["a", "s1"])[-1]
        s2 = ops.SafeEnqueueBlobs([q, ops.Const(20)], ["b", "s2"])[-1]
        ops.CloseBlobsQueue([q], [])
        s3 = ops.SafeEnqueueBlobs([q, ops.Const(30)], ["c", "s3"])[-1]  # closed and full
        x1, d1 = ops.SafeDequeueBlobs([q], ["x1", "d1"])
        s4 = ops.SafeEnqueueBlobs([q, ops.Const(40)], ["d", "s4"])[-1]  # closed, room: accepted
        x2, d2 = ops.SafeDequeueBlobs([q], ["x2", "d2"])
        x3, d3 = ops.SafeDequeueBlobs([q], ["x3", "d3"])
        _, d4 = ops.SafeDequeueBlobs([q], ["x4", "d4"])                 # drained
        outs = [final_output(b) for b in (s1, s2, s3, s4, x1, x2, x3, d1, d2, d3, d4)]
    session.run(task)
    got = [o.fetch().item() for o in outs]
    assert got == [False, False, True, False, 10, 20, 40, False, False, False, True]


def test_dequeue_many_concatenates_records(session):
    with Task() as task:
        q = ops.CreateBlobsQueue([], ["q"], capacity=5, num_blobs=2)
        for i in range(5):
            ops.EnqueueBlobs([q, ops.Const([i]), ops.Const([10.0 * i])], [f"a{i}", f"b{i}"])
        ops.CloseBlobsQueue([q], [])
        a, b, s = ops.SafeDequeueBlobs([q], ["a", "b", "s"], num_records=3)
        a2, b2, s2 = ops.SafeDequeueBlobs([q], ["a2", "b2", "s2"], num_records=3)  # only 2 left
        outs = [final_output(x) for x in (a, b, s, a2, s2)]
    session.run(task)
    a, b, s, a2, s2 = (o.fetch() for o in outs)
    assert a.tolist() == [0, 1, 2] and b.tolist() == [0.0, 10.0, 20.0] and not s
    assert a2.tolist() == [3, 4] and not s2


def test_unsafe_ops_fail_with_the_line(session):
    with Task() as task:
        q = ops.CreateBlobsQueue([], ["q"], capacity=1)
        ops.CloseBlobsQueue([q], [])
        ops.DequeueBlobs([q], ["x"]); line = _line()  # noqa: E702
    with pytest.raises(ExecutionError, match="closed queue with nothing left") as e:
        session.run(task)
    assert e.value.loc.line == line and "SafeDequeueBlobs" in e.value.hint


def test_enqueue_into_closed_full_queue_fails(session):
    with Task() as task:
        q = ops.CreateBlobsQueue([], ["q"], capacity=1)
        ops.EnqueueBlobs([q, ops.Const(1)], ["x"])
        ops.CloseBlobsQueue([q], [])
        ops.EnqueueBlobs([q, ops.Const(2)], ["y"])
    with pytest.raises(ExecutionError, match="closed queue that is full"):
        session.run(task)


def test_dequeue_timeout(session):
    with Task() as task:
        q = ops.CreateBlobsQueue([], ["q"], capacity=1)
        ops.DequeueBlobs([q], ["x"], timeout_secs=0.05)
    with pytest.raises(ExecutionError, match="timed out after 0.05 s"):
        session.run(task)


def test_producer_and_consumer_tasks_through_a_small_queue(session):
    n = 200
    with TaskGroup(workspace_type="global") as init:
        with Task():
            ops.CreateBlobsQueue([], ["shared_q"], capacity=2)
    with TaskGroup() as tg:
        with Task():
            with ops.loop(n) as loop:
                ops.EnqueueBlobs(["shared_q", loop.iter()], ["item"])
            ops.CloseBlobsQueue(["shared_q"], [])
        with Task():
            total = ops.Const(0)
            count = ops.Const(0)
            with ops.loop():
                x, done = ops.SafeDequeueBlobs(["shared_q"], ["x", "done"])
                ops.stop_if(done)
                ops.Add([total, x], [total])
                ops.Add([count, ops.Const(1)], [count])
            out_total, out_count = final_output(total), final_output(count)
    session.run(init)
    session.run(tg)
    assert out_total.fetch() == sum(range(n)) and out_count.fetch() == n


def test_a_failing_sibling_wakes_a_blocked_consumer(session):
    with TaskGroup(workspace_type="global") as init:
        with Task():
            ops.CreateBlobsQueue([], ["never_fed"], capacity=1)

    def boom(inputs, outputs):
        time.sleep(0.05)  # let the consumer block first
        raise RuntimeError("producer broke")

    with TaskGroup() as tg:
        with Task(name="consumer"):
            ops.DequeueBlobs(["never_fed"], ["x"])   # blocks: nobody enqueues or closes
        with Task(name="producer"):
            ops.Python(boom)([], []); line = _line()  # noqa: E702
    session.run(init)
    before = threading.active_count()
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="producer broke") as e:
        session.run(tg)
    assert time.monotonic() - start < 5
    assert e.value.loc.line == line and e.value.task == "local/producer"
    assert threading.active_count() == before  # the blocked thread ended too


def test_handle_types_are_checked():
    from dslc.session import LocalSession
    with Task() as task:
        ops.EnqueueBlobs([ops.Const(1), ops.Const(2)], ["x"]); line = _line()  # noqa: E702
    with pytest.raises(DSLTypeError, match="must be a queue") as e:
        LocalSession().run(task)
    assert e.value.loc.line == line and "CreateBlobsQueue" in e.value.hint


def test_queue_util_helpers_name_blobs_as_caffe2():
    from dslc import core
    q = Queue(capacity=4, schema=Struct(("a", np.int64), ("b", np.int64)))
    assert str(q.queue()) == "queue/handler"
    assert str(Queue(capacity=1).queue()) == "queue_1/handler"
    net = core.Net("n")
    status = enqueue(net, q.queue(), ["a", "a"])  # a blob enqueued twice is copied first
    assert [op.type for op in net.ops()] == ["Copy", "SafeEnqueueBlobs"] and str(status) == "n/status"
    fields, st = dequeue(net, q.queue(), 2, field_names=["a", "b"])
    assert [str(f) for f in fields] == ["n/a", "n/b"] and str(st) == "n/status_2"  # n/status is taken
    step = close_queue(core.execution_step("s", core.Net("work")), q.queue())
    assert len(step.Substeps()) == 2


def _line() -> int:
    import sys
    return sys._getframe(1).f_lineno
