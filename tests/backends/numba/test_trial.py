"""A compiled region races the interpreter's code for it in its first runs, and the faster
is kept (backends/numba/trial.py): numba never stays slower than interp on a region.

The rest of the suite turns the race off (conftest: ``islands.TRIAL_RUNS = 0``), so that
its compiled code keeps running; these tests turn it on.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from dslc import workspace
from dslc.backends.numba import emitter, islands
from dslc.backends.numba.trial import Trial
from dslc.runtime.profile import OpProfile
from dslc.session import LocalSession
from dslc.net_builder import ops
from test_hot import _job  # (x added to itself in a loop: one island, the Copy and the loop)


class _Clock:
    """A fake clock: each call returns the next of ``ticks``."""

    def __init__(self, ticks):
        self.ticks = iter(ticks)

    def __call__(self):
        return next(self.ticks)


def test_the_slower_compiled_function_is_dropped_after_its_runs():
    ns = {"n0": None}
    calls = []
    # compiled runs of 1.0 (the first, not counted, 9.0), interpreted ones of 0.5: the interpreter wins
    t = Trial("a region", 2)
    t.clock = _Clock([0, 9, 10, 11, 20, 21])
    t.start(ns, "n0", lambda x: calls.append(x) or x + 1)
    assert ns["n0"](1) == 2 and ns["n0"](2) == 3 and ns["n0"](3) == 4  # (results as the callee's)
    assert calls == [1, 2, 3] and ns["n0"] is None and t.kept is None  # now the interpreter's turn
    t.interpreted(0.5)
    assert t.kept is None
    t.interpreted(0.5)
    assert t.kept == "interpreter" and ns["n0"] is None
    assert "compiled 1000.000 ms, interpreted 500.000 ms per run: fell back to the interpreter" in t.describe()


def test_the_faster_compiled_function_stays_and_is_then_called_untimed():
    def callee(x):
        return x * 2
    ns = {"k0": "the interpreter's kernel"}
    t = Trial("a kernel", 2)
    t.clock = _Clock([0, 5, 10, 10.25, 20, 20.25])
    for s in (3.0, 1.0, 2.0):  # interpreted while cold: the last two count
        t.interpreted(s)
    t.queued()
    t.interpreted(100.0)  # (while compiling: not counted)
    t.start(ns, "k0", callee)
    assert [ns["k0"](i) for i in range(3)] == [0, 2, 4]
    assert t.kept == "compiled" and ns["k0"] is callee  # no wrapper left
    assert t.interp == [1.0, 2.0] and t.compiled_seconds() == 0.25


def test_numbas_race_counts_only_the_calling_threads_work():
    """numba's compiled code runs on the calling thread, so its race reads that thread's CPU
    time (backends/common/race.py), as the generated code's timers of the interpreted side
    do (lazy.CLOCK): a compiled run that sleeps 30 ms while another thread of the process
    spins (a kernel loading in the background) is timed at about nothing; on the process's
    CPU time it would be charged the spinning, on a wall clock the sleep."""
    from dslc.backends.numba.lazy import CLOCK
    ns = {"n0": None}
    t = Trial("a region", 1)
    assert t.clock is CLOCK  # (the interpreted side's clock: one clock for both sides)
    t.start(ns, "n0", lambda: time.sleep(0.03))
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass
    other = threading.Thread(target=spin)
    other.start()
    try:
        ns["n0"]()
        ns["n0"]()
    finally:
        stop.set()
        other.join()
    assert len(t.compiled) == 2 and max(t.compiled) < 0.005, t.compiled


def _slowed(monkeypatch, seconds):
    """Every compiled island made ``seconds`` slower per call (numba forced to lose)."""
    real = emitter.load_island

    def load(*args, **kwargs):
        call = real(*args, **kwargs)

        def slow(*xs):
            time.sleep(seconds)
            return call(*xs)
        return slow
    monkeypatch.setattr(emitter, "load_island", load)


def _spun(monkeypatch, seconds):
    """Every compiled island made ``seconds`` of this thread's CPU slower per call."""
    real = emitter.load_island

    def load(*args, **kwargs):
        call = real(*args, **kwargs)

        def slow(*xs):
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                pass
            return call(*xs)
        return slow
    monkeypatch.setattr(emitter, "load_island", load)


def test_the_race_times_both_sides_on_the_cpu_clock_the_hot_timers_use(monkeypatch):
    """The interpreted runs are timed by the generated code's clock (lazy.CLOCK, CPU time),
    so the compiled ones are too: a compiled island that sleeps 20 ms per call (wall time,
    no CPU) against an interpreted one that works microseconds is no slower on that clock,
    and stays; with wall time on one side and CPU time on the other, a loaded machine (or
    this sleep) made it lose."""
    _slowed(monkeypatch, 0.02)
    monkeypatch.setattr(islands, "TRIAL_RUNS", 2)
    tg, out = _job(2000)  # (2000 interpreted Adds: milliseconds of CPU; compiled: microseconds)
    workspace.FeedBlob("x", np.array([0.0, 0.0]))
    with LocalSession(backend="numba", passes="default") as s:
        program = s.compile(tg).program
        h, = program.hots
        for k in range(6):
            workspace.FeedBlob("x", np.array([k, -1.5]))
            s.run(tg)
            np.testing.assert_array_equal(out.fetch(), [2001 * k, -3001.5])  # 2001 x, by hand
        assert h.trial.kept == "compiled"
        assert max(h.trial.compiled[1:]) < 0.02


def test_a_region_compiled_before_the_run_falls_back_when_slower(monkeypatch):
    _spun(monkeypatch, 0.02)
    monkeypatch.setattr(islands, "TRIAL_RUNS", 2)
    tg, out = _job(6)
    workspace.FeedBlob("x", np.array([0.0, 0.0]))
    profile = OpProfile()
    with LocalSession(backend="numba", passes="default", profile=profile) as s:
        program = s.compile(tg).program
        h, = program.hots
        for k in range(6):  # 3 compiled runs (the first not counted), 2 interpreted, then decided
            workspace.FeedBlob("x", np.array([k, -1.5]))
            s.run(tg)
            np.testing.assert_array_equal(out.fetch(), [7 * k, -10.5])  # 7 x, by hand
        assert h.trial.kept == "interpreter" and h.ns[h.name] is None
        assert min(h.trial.compiled[1:]) >= 0.02 > max(h.trial.interp)
        lines = program.summary()["regions timed against the interpreter"]
        assert len(lines) == 1 and lines[0].endswith("fell back to the interpreter")
        assert "ms per run" in lines[0] and lines[0].startswith("Copy at ")
    assert "fell back to the interpreter" in profile.table()


def test_a_region_compiled_when_hot_keeps_its_compiled_function_when_faster(monkeypatch):
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)  # never hot by itself: the test compiles it
    monkeypatch.setattr(islands, "TRIAL_RUNS", 2)
    tg, out = _job(20000)  # (20000 interpreted Adds: tens of milliseconds; compiled: microseconds)
    workspace.FeedBlob("x", np.array([1.0, 2.0]))
    with LocalSession(backend="numba", passes="default", when="hot") as s:
        program = s.compile(tg).program
        program.split()  # (the region written with its island now, not once it has run 0.5 s: lazy.py)
        h, = program.hots
        s.run(tg)
        s.run(tg)
        assert len(h.trial.interp) == 2 and h.trial.kept is None
        assert h.ensure()
        for _ in range(3):
            s.run(tg)
            np.testing.assert_array_equal(out.fetch(), [20001.0, 40002.0])
        assert h.trial.kept == "compiled" and h.ns[h.name] is h.trial.callee
        assert program.summary()["regions timed against the interpreter"][0].endswith("kept compiled")


def test_racing_helper_kernels_in_a_region_cut_into_parts(monkeypatch):
    """A racing helper kernel's call is timed across three lines (its clock read carried
    from one part of a long region's function to the next: codegen.PIECE_LINES)."""
    from dslc.backends.interp import codegen
    from dslc.task import Task, TaskGroup, final_output

    monkeypatch.setattr(codegen, "PIECE_LINES", 2)
    monkeypatch.setattr(islands, "TRIAL_RUNS", 2)
    with TaskGroup() as tg, Task():
        y = "x"
        for _ in range(3):
            y = ops.Conv([y, "w"], kernel=1)
        out = final_output(y)
    workspace.FeedBlob("x", np.ones((1, 2, 2, 2), np.float32))
    workspace.FeedBlob("w", np.full((2, 2, 1, 1), 0.5, np.float32))
    with LocalSession(backend="numba", passes="none") as s:
        for _ in range(7):  # (3 compiled runs, 2 interpreted, then the verdicts)
            s.run(tg)
            np.testing.assert_array_equal(out.fetch(), np.ones((1, 2, 2, 2)))  # (0.5 + 0.5 each time)
        assert all(h.trial.kept for h in s.compile(tg).program.hots)
