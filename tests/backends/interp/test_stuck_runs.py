"""A run whose threads all wait on queues that no thread can feed, drain or close ends with
a located error naming the queue, instead of hanging; slow but live runs are left alone."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from dslc.runtime import cancel
from dslc.ir.diagnostics import ExecutionError
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, final_output


@pytest.fixture(autouse=True)
def short_stall(monkeypatch):
    monkeypatch.setattr(cancel, "STALL_SECONDS", 0.3)


def _line() -> int:
    return sys._getframe(1).f_lineno


def _make_queue(name, capacity=1):
    with TaskGroup(workspace_type="global") as init:
        with Task():
            ops.CreateBlobsQueue([], [name], capacity=capacity)
    return init


def _stuck(session, group, queue, line, task):
    before = threading.active_count()
    start = time.monotonic()
    with pytest.raises(ExecutionError, match=f"waiting forever on queue '{queue}'") as e:
        session.run(group)
    assert time.monotonic() - start < 10
    assert e.value.loc.line == line and e.value.task == task
    assert "CloseBlobsQueue" in e.value.hint
    assert threading.active_count() == before  # no thread left behind


def test_a_dequeue_nothing_feeds_is_an_error_not_a_hang(session):
    session.run(_make_queue("never_fed"))
    with Task(name="alone") as task:
        ops.DequeueBlobs(["never_fed"], ["x"]); line = _line()  # noqa: E702
    _stuck(session, task, "never_fed", line, "local/alone")


def test_a_producer_that_ends_without_closing_leaves_the_consumer_stuck(session):
    session.run(_make_queue("half_fed", capacity=4))
    with TaskGroup() as tg:
        with Task(name="producer"):
            ops.EnqueueBlobs(["half_fed", ops.Const(7)], ["item"])  # one record, then no close
        with Task(name="consumer"):
            with ops.loop(2):
                ops.DequeueBlobs(["half_fed"], ["x"]); line = _line()  # noqa: E702
    _stuck(session, tg, "half_fed", line, "local/consumer")


def test_a_full_queue_nobody_drains_is_an_error(session):
    session.run(_make_queue("full_q", capacity=1))
    with Task(name="writer") as task:
        with ops.loop(3) as loop:
            ops.EnqueueBlobs(["full_q", loop.iter()], ["item"]); line = _line()  # noqa: E702
    _stuck(session, task, "full_q", line, "local/writer")


def test_a_slow_producer_is_not_mistaken_for_a_stuck_one(session):
    """The producer sleeps longer than the stall time between records: it is running, so
    the waiting consumer is not stuck."""
    session.run(_make_queue("slow_q", capacity=1))

    def slow(inputs, outputs):
        time.sleep(0.5)

    with TaskGroup() as tg:
        with Task(name="producer"):
            with ops.loop(3) as loop:
                ops.Python(slow)([], [])
                ops.EnqueueBlobs(["slow_q", loop.iter()], ["item"])
            ops.CloseBlobsQueue(["slow_q"], [])
        with Task(name="consumer"):
            total = ops.Const(0)
            with ops.loop():
                x, done = ops.SafeDequeueBlobs(["slow_q"], ["x", "done"])
                ops.stop_if(done)
                ops.Add([total, x], [total])
            out = final_output(total)
    session.run(tg)
    assert out.fetch() == 0 + 1 + 2
