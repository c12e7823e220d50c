"""Every kind of bad program fails with a located, explained error.

Each test checks the error's type, that ``.loc`` names this file and the line marked
``# @<tag>`` (found by reading this file's text, not from dslc), and key words of the
message and hint.
"""
from __future__ import annotations

import threading

import pytest

from dslc.ir.diagnostics import (DSLError, DSLTypeError, ExecutionError, Location, TraceError,
                                 UnknownOperatorError, VerifyError)
from dslc.net_builder import NetBuilder, ops
from dslc.task import Task, final_output
from markers import Markers

MARKERS = Markers(__file__)
line_of = MARKERS.line_of


def assert_at(err: DSLError, tag: str) -> None:
    """``err`` is located in this file at the line marked ``tag``, and says so on one line."""
    MARKERS.assert_at(err, tag)
    text = err.one_line()
    assert "\n" not in text
    assert text.startswith(f"{err.loc.file}:{line_of(tag)}: ")


class Calls:
    """A Python-op function that counts its calls (to show that nothing ran)."""

    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self, inputs, outputs):
        with self.lock:
            self.n += 1


# ----------------------------------------------------------------------------- blobs nothing wrote


def test_blob_nothing_writes_is_caught_before_running(session):
    ran = Calls()
    with Task() as task:
        ops.Python(ran)([], [])
        ops.Add(["never_written", ops.Const(1)], ["out"])  # @static-read
    with pytest.raises(VerifyError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "static-read")
    assert "never_written" in err.message and "nothing writes it" in err.message
    assert "write it earlier" in err.hint
    assert ran.n == 0  # the check is static: the op before the bad read never ran


def test_blob_read_before_it_is_written_fails_at_run_time(session):
    with Task() as task:
        one = ops.Const(1)
        ops.Add([one, "written_later"], ["sum"])  # @dynamic-read
        ops.Copy([one], ["written_later"])
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "dynamic-read")
    assert "written_later" in err.message and "before anything wrote it" in err.message
    assert err.task == "local/task" and "in task 'local/task'" in err.message
    assert err.hint


# ----------------------------------------------------------------------------- ops and types


def test_wrong_number_of_inputs(session):
    with Task() as task:
        ops.Add([ops.Const(1)])  # @arity
    with pytest.raises(VerifyError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "arity")
    assert "Add takes 2 inputs, got 1" in err.message
    assert err.hint and "Add" in err.hint


def test_incompatible_input_types_are_caught_by_the_verifier(session):
    ran = Calls()
    with Task() as task:
        ops.Python(ran)([], [])
        ops.Add([ops.Const(1), ops.Const("text")])  # @types
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    err = info.value
    assert isinstance(err, VerifyError)
    assert_at(err, "types")
    assert "Add" in err.message and "i64" in err.message and "str" in err.message
    assert "Cast" in err.hint
    assert ran.n == 0


def test_unknown_operator_suggests_close_names():
    with Task():
        with pytest.raises(UnknownOperatorError) as info:
            ops.Addd([ops.Const(1), ops.Const(2)])  # @unknown-op
    err = info.value
    assert isinstance(err, AttributeError)  # getattr(ops, name, default) keeps working
    assert_at(err, "unknown-op")
    assert "unknown operator 'Addd'" in err.message
    assert "did you mean" in err.hint and "'Add'" in err.hint


def test_ops_outside_any_task_or_builder():
    with pytest.raises(TraceError) as info:
        ops.Const(1)  # @no-builder
    err = info.value
    assert isinstance(err, AttributeError)  # Caffe2 raises AttributeError here too
    assert_at(err, "no-builder")
    assert "no active NetBuilder" in err.message
    assert "with Task()" in err.hint


# ----------------------------------------------------------------------------- control flow


def test_elif_after_else():
    with Task():
        with ops.If(ops.Const(True)) as c:
            ops.Const(1)
        with c.Else() as c:
            ops.Const(2)
        with pytest.raises(TraceError) as info:
            c.Elif(ops.Const(False))  # @elif-after-else
    err = info.value
    assert_at(err, "elif-after-else")
    assert "Elif cannot follow Else" in err.message
    assert "ops.If" in err.hint


def test_non_bool_if_condition(session):
    with Task() as task:
        with ops.If(ops.Const(1)):  # @int-cond
            ops.Const(2)
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "int-cond")
    assert "bool" in err.message and "i64" in err.message
    assert "GE" in err.hint or "Cast" in err.hint


def test_negative_literal_loop_count_fails_at_trace_time():
    with Task():
        with pytest.raises(TraceError) as info:
            ops.loop(-3)  # @neg-literal
    err = info.value
    assert_at(err, "neg-literal")
    assert "-3" in err.message and ">= 0" in err.message
    assert "negative" in err.hint


def test_negative_loop_count_from_a_blob_fails_at_run_time(session):
    body = Calls()
    with Task(name="counting") as task:
        n = ops.Sub([ops.Const(2), ops.Const(5)])  # -3, known only when it runs
        with ops.loop(n):  # @neg-blob
            ops.Python(body)([], [])
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "neg-blob")
    assert "negative" in err.message and "-3" in err.message
    assert err.task == "local/counting"
    assert err.hint
    assert body.n == 0


def test_loop_without_count_or_stop_never_ends():
    with Task():
        with pytest.raises(TraceError) as info:
            with ops.loop():  # @endless
                ops.Const(1)
    err = info.value
    assert_at(err, "endless")
    assert "never ends" in err.message
    assert "ops.stop" in err.hint


# ----------------------------------------------------------------------------- phases


def test_task_init_outside_a_task():
    with NetBuilder():
        with pytest.raises(TraceError) as info:
            ops.task_init()  # @init-in-builder
    assert_at(info.value, "init-in-builder")
    assert "only valid inside a Task" in info.value.message
    assert "with Task()" in info.value.hint


def test_task_init_with_nothing_open():
    with pytest.raises(TraceError) as info:
        ops.task_init()  # @init-bare
    assert_at(info.value, "init-bare")
    assert "only valid inside a Task" in info.value.message


# ----------------------------------------------------------------------------- Python ops in instances


class FailsInOneInstance:
    """A Python-op builder for ``n`` instances: the first instance built raises on its
    third call, once every other instance is running (has made 5 calls)."""

    def __init__(self, n: int):
        self.n = n
        self.lock = threading.Lock()
        self.all_running = threading.Event()
        self.calls: dict[int, int] = {}  # instance -> calls of its function

    def build(self):
        with self.lock:
            me = len(self.calls)
            self.calls[me] = 0

        def op(inputs, outputs):
            with self.lock:
                self.calls[me] += 1
                others = [c for i, c in self.calls.items() if i != 0]
                if len(others) == self.n - 1 and min(others) >= 5:
                    self.all_running.set()
            if me == 0 and self.calls[me] == 3:
                self.all_running.wait(timeout=10)
                raise ValueError("instance zero gave up")
        return op


def test_python_op_error_in_a_multi_instance_task(session):
    iterations = 200_000  # far more than the others get through before they are stopped
    stats = FailsInOneInstance(8)
    threads_before = threading.active_count()
    with Task(name="workers", num_instances=8) as task:
        with ops.loop(iterations):
            ops.Python((stats.build, [], {}))([], [])  # @py-op
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    err = info.value
    assert_at(err, "py-op")
    assert err.task == "local/workers" and "in task 'local/workers'" in err.message
    assert "ValueError" in err.message and "instance zero gave up" in err.message
    assert err.hint
    # the other instances were stopped, not run to the end, and no thread is left over
    assert sorted(stats.calls) == list(range(8))
    assert stats.calls[0] == 3 and stats.all_running.is_set()
    assert max(stats.calls[i] for i in range(1, 8)) < iterations
    assert threading.active_count() == threads_before

    # the session still works
    with Task() as again:
        out = final_output(ops.Add([ops.Const(40), ops.Const(2)]))
    session.run(again)
    assert out.fetch() == 42


# ----------------------------------------------------------------------------- the message format


def test_one_line_format():
    err = VerifyError("first part\n  second part", Location("job.py", 12), "do this")
    assert err.one_line() == "job.py:12: error: first part second part; do this"
    assert str(err) == err.one_line()
    unknown_line = ExecutionError("it broke", Location("job.py", 0), task="local/t")
    assert unknown_line.one_line() == "job.py: runtime error: in task 'local/t': it broke"
    assert TraceError("no place").one_line() == "error: no place"
