"""Regions split into islands only once hot (backends/numba/lazy.py): a "hot" compile runs
the interpreter's code, and a region or a top-level loop switches to the numba backend's
code between two calls or two iterations, on the cells and states it was bound with."""
from __future__ import annotations

import time

import numpy as np
import pytest

from dslc import core, workspace
from dslc.backends.numba import islands, lazy
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, final_output

ITERS = 6


def _job():
    """A loop whose body draws (UniformFill), multiplies (FC) and accumulates: random
    draws, carried values and values defined before the loop all cross the switch."""
    with TaskGroup() as tg, Task():
        total = ops.Copy("x")
        with ops.loop(ITERS):
            r = ops.UniformFill([], "r", shape=[4, 3], min=-1.0, max=1.0)
            y = ops.FC([r, "w", "b"], "y")
            ops.Add([total, y], [total])
        out = final_output(total)
    return tg, out


def _feed():
    rng = np.random.default_rng(3)
    workspace.FeedBlob("x", np.zeros((4, 2), np.float32))
    workspace.FeedBlob("w", rng.normal(size=(2, 3)).astype(np.float32))
    workspace.FeedBlob("b", rng.normal(size=2).astype(np.float32))


def _run(backend, switch=None, runs=1):
    """The job's total after each of ``runs`` runs; ``switch(program)`` after compiling."""
    workspace.ResetWorkspace()
    _feed()
    tg, out = _job()
    options = {"when": "hot", "min_work": 0, "nn_min_work": 0} if backend == "numba" else {}
    got = []
    with LocalSession(backend=backend, passes="none", **options) as s:
        program = s.compile(tg).program
        if switch is not None:
            switch(program)
        for _ in range(runs):
            s.run(tg)
            got.append(np.array(out.fetch()))
    return got, program


def test_a_hot_compile_splits_nothing_before_the_run_and_gives_the_interpreters_answers(monkeypatch):
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    want, _ = _run("interp", runs=2)
    got, program = _run("numba", runs=2)
    assert program.hots == [] and program.lazies  # (the region, its loop: timed, not split)
    assert all(not lz.fn for lz in program.lazies)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(want[0], want[1])  # (the second run draws on from the first)


def _split_the_loop_first(program):
    region = next(lz for lz in program.lazies if isinstance(lz, lazy.LazyRegion))
    loop = next(lz for lz in program.lazies if isinstance(lz, lazy.Loop))
    region.limit, loop.limit = float("inf"), 0.0  # the loop after its first iteration, never the region


@pytest.mark.parametrize("compiled", [False, True])
def test_a_loop_switched_after_its_first_iteration_gives_the_interpreters_answers(monkeypatch, compiled):
    """Iteration 1 interpreted, 2..6 in the split loop's function (its islands interpreted,
    or compiled before the second run); the second run calls that function for all six.
    The draws go on from the interpreted ones: the totals equal the interpreter's."""
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    want, _ = _run("interp", runs=2)

    def switch(program):
        _split_the_loop_first(program)
        if compiled:  # (once split, its islands compile: here, before the second run)
            orig = program.executor.run

            def run(ws, token=None):
                orig(ws, token)
                for h in program.hots:
                    assert h.ensure()
            program.run = run
    got, program = _run("numba", switch, runs=2)
    loop = next(lz for lz in program.lazies if isinstance(lz, lazy.Loop))
    assert loop.fn is not None and loop.total > 0
    assert program.hots and all((h.ns[h.name] is not None) == compiled for h in program.hots)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_loop_switched_midway_keeps_its_ops_per_instance_state(monkeypatch):
    """CollectTensor counts the records it saw (per bound op): four iterations, switched
    after the first, collect all four values (a fresh state would restart the count and
    overwrite the first slot: [2, 3, 4])."""
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    init, net = core.Net("init"), core.Net("collect")
    init.CreateTensorVector([], "coll")
    init.ConstantFill([], "v", shape=[1], value=0.0)
    init.ConstantFill([], "one", shape=[1], value=1.0)
    net.Add(["v", "one"], "v")
    net.CollectTensor(["coll", "v"], ["coll"], num_to_collect=10)
    loop = core.execution_step("four", [net], num_iter=4)
    with LocalSession(backend="numba", passes="none", when="hot", min_work=0, nn_min_work=0) as s:
        s.run(init)
        program = s.compile(loop).program
        _split_the_loop_first(program)
        s.run(loop)
        assert all(lz.fn is not None for lz in program.lazies if isinstance(lz, lazy.Loop))
    assert sorted(np.concatenate(workspace.FetchBlob("coll")).tolist()) == [1.0, 2.0, 3.0, 4.0]


def test_a_variant_for_other_sizes_reuses_the_kernels_compiled_for_the_first(tmp_path, monkeypatch):
    """A net fed another batch size compiles once more with that dim unknown (variants.py);
    its islands' text is the first compile's, so numba compiles nothing again: the second
    variant reports its functions as reused, and both give numpy's answers."""
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))
    net = core.Net("fc")
    net.FC(["x", "w", "b"], "y")
    net.Relu("y", "r")
    rng = np.random.default_rng(5)
    w, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    workspace.FeedBlob("w", w)
    workspace.FeedBlob("b", b)
    with LocalSession(backend="numba", passes="default", when="now", min_work=0, nn_min_work=0) as s:
        stats = []
        for n in (6, 9):
            x = rng.normal(size=(n, 4)).astype(np.float32)
            workspace.FeedBlob("x", x)
            s.run(net)
            np.testing.assert_allclose(workspace.FetchBlob("r"), np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-6)
            stats.append(s.compile(net).program.stats)
    first, second = stats
    assert s.compiles == 2 and first.compiled >= 1 and first.reused == 0
    assert (second.compiled, second.cache_hits, second.reused) == (0, 0, first.compiled)


def _waiting_or_busy(busy: bool):
    """A net whose Python op waits 20 ms (a sleep) or works 20 ms on this thread's CPU,
    then a Relu: one region, timed by the lazy emitter."""
    def step(_inputs, _outputs):
        if not busy:
            time.sleep(0.02)
            return
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
    net = core.Net("wait")
    net.Python(step)([], [])
    net.Relu("x", "y")
    return net


@pytest.mark.parametrize("busy", [False, True])
def test_a_region_turns_hot_by_the_cpu_time_it_spends_not_the_time_it_waits(monkeypatch, busy):
    """Hotness counts the CPU time of the thread running the region (lazy.CLOCK), so a
    loaded machine (or a region that waits) does not split regions early: ten runs that
    sleep 20 ms each spend ~0 s of CPU and stay interpreted (with a wall clock, 0.2 s,
    past a 0.1 s threshold: split); ten that work 20 ms each spend 0.2 s and split."""
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    workspace.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    net = _waiting_or_busy(busy)
    with LocalSession(backend="numba", passes="none", when="hot", min_work=0, nn_min_work=0) as s:
        program = s.compile(net).program
        region = next(lz for lz in program.lazies if isinstance(lz, lazy.LazyRegion))
        region.limit = 0.1
        for _ in range(10):
            s.run(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 2.0])
    assert (region.fn is not None) == busy
    assert (region.total >= 0.1) == busy


def test_a_loop_turns_hot_by_the_cpu_time_it_spends_not_the_time_it_waits(monkeypatch):
    """The same for a loop at a region's top: eight iterations that sleep 20 ms each (0.16 s
    of wall time, ~0 of CPU) stay on the interpreter's loop with a 0.1 s threshold."""
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    workspace.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    body = _waiting_or_busy(False)
    loop = core.execution_step("eight", [body], num_iter=8)
    with LocalSession(backend="numba", passes="none", when="hot", min_work=0, nn_min_work=0) as s:
        program = s.compile(loop).program
        loops = [lz for lz in program.lazies if isinstance(lz, lazy.Loop)]
        for lz in loops:
            lz.limit = 0.1
        s.run(loop)
    assert loops and all(lz.fn is None and lz.total < 0.1 for lz in loops)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 2.0])


def test_a_summary_after_a_loop_switched_counts_its_islands_once(monkeypatch):
    """The loop split on its own mid-run, then its region split by summary(): both writings
    hold the loop's islands, which the summary must list once, as a compile before the run
    (when="now": every region split once) lists them."""
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    _, hot = _run("numba", _split_the_loop_first)
    assert next(lz for lz in hot.lazies if isinstance(lz, lazy.Loop)).fn is not None
    workspace.ResetWorkspace()
    _feed()
    tg, _ = _job()
    with LocalSession(backend="numba", passes="none", when="now", min_work=0, nn_min_work=0) as s:
        now = s.compile(tg).program.summary()
    got = hot.summary()
    assert now["regions compiled"]  # (the loop's islands, at least)
    for key in ("regions compiled", "ops compiled", "kernels fused", "ops interpreted, and why"):
        assert got[key] == now[key], key
    # one Hot per island and fused group (no helper kernel here): the loop's own went with its islands
    assert len(hot.hots) == len(now["regions compiled"]) + now["kernels fused"]



class _Op:
    """A stand-in for an IR op in a straight run: its name and the ops it holds."""

    def __init__(self, name, inner=0):
        self.name, self.inner = name, inner

    def walk(self):
        return [self] * (1 + self.inner)


def test_a_long_straight_run_is_cut_into_functions_of_at_most_max_ops(monkeypatch):
    """DSLC_NUMBA_MAX_OPS (default 32) cuts a run: numba's compile time grows faster than a
    function's length. Loads count nothing (they run before the island); an op holding a
    region counts its ops; one op larger than the cap is a function of its own."""
    run = [_Op("load")] + [_Op("Add") for _ in range(70)]
    assert [len(c) for c in islands._chunks(run)] == [33, 32, 6]  # (the load rides with the first 32)
    monkeypatch.setenv("DSLC_NUMBA_MAX_OPS", "5")
    run = [_Op("Mul"), _Op("for", inner=9), _Op("Add"), _Op("Add"), _Op("load"), _Op("Add")]
    assert [[o.name for o in c] for c in islands._chunks(run)] == [["Mul"], ["for"], ["Add", "Add", "load", "Add"]]
