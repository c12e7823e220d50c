"""A dequeue of a queue made earlier in the same thread of a run, which no op of the run
writes to or closes, is refused when the run is compiled, at the dequeue's line; queues
that something could feed are left alone (the run-time watchdog covers the rest)."""
from __future__ import annotations

import sys

import pytest

from dslc.runtime import cancel
from dslc.ir.diagnostics import ExecutionError, VerifyError
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, final_output


@pytest.fixture(autouse=True)
def short_stall(monkeypatch):
    monkeypatch.setattr(cancel, "STALL_SECONDS", 0.3)


def _line() -> int:
    return sys._getframe(1).f_lineno


def _refused(session, group, line, made):
    with pytest.raises(VerifyError, match=r"waits forever on queue 'q' \(made at .*:(\d+)\)") as e:
        session.run(group)
    assert e.value.loc.line == line and __file__.endswith(e.value.loc.file)
    assert f":{made})" in str(e.value) and "CloseBlobsQueue" in e.value.hint


def test_a_dequeue_after_the_queue_is_made_in_the_same_task(session):
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="alone"):
            ops.CreateBlobsQueue([], ["q"], capacity=4); made = _line()  # noqa: E702
            with ops.loop(3):
                ops.SafeDequeueBlobs(["q"], ["x", "done"]); line = _line()  # noqa: E702
    _refused(session, tg, line, made)


def test_a_queue_made_in_task_init_and_dequeued_in_the_body(session):
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="t"):
            with ops.task_init():
                ops.CreateBlobsQueue([], ["q"], capacity=4); made = _line()  # noqa: E702
            ops.DequeueBlobs(["q"], ["x"]); line = _line()  # noqa: E702
    _refused(session, tg, line, made)


def test_a_queue_another_task_feeds_and_closes_runs(session):
    """The consumer reads what the producer wrote: 0 + 1 + 2 = 3 (by hand)."""
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="producer"):
            with ops.task_init():
                ops.CreateBlobsQueue([], ["q"], capacity=4)
            with ops.loop(3) as loop:
                ops.EnqueueBlobs(["q", loop.iter()], ["item"])
            ops.CloseBlobsQueue(["q"], [])
        with Task(name="consumer"):
            total = ops.Const(0)
            with ops.loop():
                x, done = ops.SafeDequeueBlobs(["q"], ["x", "done"])
                ops.stop_if(done)
                ops.Add([total, x], [total])
            out = final_output(total)
    session.run(tg)
    assert int(out.fetch()) == 3


def test_a_queue_made_by_a_concurrent_task_is_left_to_the_watchdog(session):
    """Another task's create may run after this dequeue, which may then read a queue of an
    earlier run: not refused when compiled; the run still ends with the watchdog's error."""
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="maker"):
            ops.CreateBlobsQueue([], ["q"], capacity=4)
        with Task(name="taker"):
            ops.DequeueBlobs(["q"], ["x"])
    with pytest.raises(ExecutionError, match="waiting forever on queue 'q'"):
        session.run(tg)


@pytest.mark.parametrize("guard", ["timeout", "if", "conditional create"])
def test_dequeues_that_may_not_wait_forever_are_not_refused(session, guard):
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="t"):
            if guard == "conditional create":
                with ops.If(ops.Const(True)):
                    ops.CreateBlobsQueue([], ["q"], capacity=4)
            else:
                ops.CreateBlobsQueue([], ["q"], capacity=4)
            if guard == "timeout":
                ops.DequeueBlobs(["q"], ["x"], timeout_secs=0.05)
            elif guard == "if":
                with ops.If(ops.Const(False)):
                    ops.DequeueBlobs(["q"], ["x"])
            else:
                ops.DequeueBlobs(["q"], ["x"])
    if guard == "if":
        session.run(tg)  # the branch is not taken: nothing waits
        return
    with pytest.raises(ExecutionError, match="timed out|waiting forever"):
        session.run(tg)


def test_a_queue_made_in_the_node_init_and_dequeued_in_a_task(session):
    with TaskGroup(workspace_type="global") as tg:
        with Task(name="t"):
            with ops.local_init():
                ops.CreateBlobsQueue([], ["q"], capacity=4); made = _line()  # noqa: E702
            ops.DequeueBlobs(["q"], ["x"]); line = _line()  # noqa: E702
    _refused(session, tg, line, made)
