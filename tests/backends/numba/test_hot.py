"""Compiling when hot (backends/numba/hot.py): the numba backend's default outside the tests.

Regions start on the interpreter's code and switch to their compiled function once it is
ready; nothing is compiled, and numba is not even imported, for a job that ends first.
The rest of the suite compiles every region before the run (conftest: ``islands.WHEN``).
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dslc import workspace
from dslc.backends.numba import cache, conv, emitter, hot, islands, sparse, worker
from dslc.backends.numba.trial import Trial
from dslc.ir import settings
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, final_output


def _job(n_iters):
    """x (a 2-vector) added to itself n_iters times in a loop: one island, on the default
    pipeline (promote-blobs makes the loop pure dataflow)."""
    with TaskGroup() as tg, Task():
        total = ops.Copy("x")
        with ops.loop(n_iters):
            ops.Add([total, "x"], [total])
        out = final_output(total)
    return tg, out


def test_the_helper_kernel_names_are_the_compiled_loops():
    """The emitter names the ops with compiled loops without importing them (they import
    numba): the list must be exactly their tables' keys."""
    assert emitter.HELPER_KERNELS == set(sparse.KERNELS) | set(conv.KERNELS)


def test_an_island_runs_interpreted_until_compiled_then_compiled(monkeypatch):
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)  # never hot by itself: the test compiles it
    tg, out = _job(6)
    workspace.FeedBlob("x", np.array([3, -4], np.int64))
    with LocalSession(backend="numba", passes="default", when="hot") as s:
        program = s.compile(tg).program
        assert program.hots == []  # (nothing split into islands before it is hot: lazy.py)
        program.split()
        loops = program.hots  # (one island: the Copy and the loop)
        assert len(loops) == 1 and program.stats.compiled + program.stats.cache_hits == 0
        s.run(tg)
        np.testing.assert_array_equal(out.fetch(), [21, -28])  # 3 * 7, by hand
        h = loops[0]
        ran = h.total
        assert ran > 0 and h.ns[h.name] is None  # timed on the interpreter, not compiled
        assert h.ensure() and h.ns[h.name] is not None  # (what the switcher does, here)
        workspace.FeedBlob("x", np.array([5, 1], np.int64))
        s.run(tg)
        np.testing.assert_array_equal(out.fetch(), [35, 7])
        assert h.total == ran  # the compiled function ran: the interpreter's code did not


@pytest.mark.slow
def test_a_hot_island_is_compiled_in_the_background_and_switched_to(monkeypatch, tmp_path):
    """The whole path: hot after its first run, compiled by the worker process into an
    empty cache, loaded by the switcher thread, called from then on."""
    monkeypatch.setattr(islands, "HOT_MS", 0)
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))
    tg, out = _job(4)
    workspace.FeedBlob("x", np.array([2.5, 1.0]))
    with LocalSession(backend="numba", passes="default", when="hot") as s:
        s.run(tg)
        h, = s.compile(tg).program.hots
        assert h.state in (hot.QUEUED, hot.DONE)
        end = time.time() + 240
        while h.state == hot.QUEUED and time.time() < end:
            time.sleep(0.1)
        assert h.state == hot.DONE and h.ns[h.name] is not None
        ran = h.total
        s.run(tg)
        np.testing.assert_array_equal(out.fetch(), [12.5, 5.0])
        assert h.total == ran
    assert any(p.name.startswith("x_") for p in (tmp_path / "numba").iterdir())  # the worker's file


def test_a_job_that_ends_before_anything_is_hot_never_imports_numba(tmp_path):
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from dslc import workspace
        from dslc.net_builder import ops
        from dslc.session import LocalSession
        from dslc.task import Task, TaskGroup, final_output
        with TaskGroup() as tg, Task():
            total = ops.Copy("x")
            with ops.loop(50):
                ops.Add([total, "x"], [total])
            out = final_output(total)
        workspace.FeedBlob("x", np.arange(3.0))
        with LocalSession(backend="numba", passes="default") as s:
            s.run(tg)
        print(out.fetch().tolist(), "numba" in sys.modules)
    """)
    env = dict(os.environ, DSLC_CACHE_DIR=str(tmp_path))
    for name in ("DSLC_NUMBA_COMPILE", "DSLC_NUMBA_MIN_WORK", "DSLC_NUMBA_HOT_MS"):
        env.pop(name, None)
    got = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["[0.0,", "51.0,", "102.0]", "False"]  # x * 51, by hand
    assert not (tmp_path / "numba").exists()


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_what_compiles_is_said_only_on_a_terminal(tty):
    out = _Stream(tty)
    hot.Switcher(out).say("dslc: numba is compiling 1 hot region(s)")
    assert out.getvalue() == ("dslc: numba is compiling 1 hot region(s)\n" if tty else "")


def test_the_worker_compiles_a_request_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "_given", [])
    cache.use_directory(tmp_path)
    source = ("import numpy as np\nfrom numba import njit\n\n\n@njit(nogil=True)\n"
              "def kernel(a, b):\n    return a * b + 1\n")
    request = {"id": 7, "source": source, "name": "kernel", "sig": ["int64", "int64"]}
    out = io.StringIO()
    worker.serve([json.dumps(request) + "\n", "not json\n"], out)
    first, second = [json.loads(line) for line in out.getvalue().splitlines()]
    assert first["ok"] and first["id"] == 7
    assert not second["ok"] and "JSONDecodeError" in second["error"]
    assert [p.name[:2] for p in sorted(tmp_path.iterdir())] == ["k_", "x_"]  # its source and its code


def test_the_worker_exits_a_grace_after_its_parent_has_gone(tmp_path):
    """A job killed while its worker compiles: the worker does not go on for an hour.
    Here its parent exits while the worker's stdin stays open (held by this test), as
    when the parent dies in the middle of a long compile: the worker is gone within the
    grace (0 s here) and the watcher's poll, not when its stdin closes."""
    r, w = os.pipe()
    parent = textwrap.dedent(f"""
        import os, subprocess, sys
        env = dict(os.environ, DSLC_NUMBA_WORKER_GRACE="0")
        p = subprocess.Popen([sys.executable, "-m", "dslc.backends.numba.worker", {str(tmp_path)!r}, str(os.getpid())],
                             stdin={r}, pass_fds=({r},), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        print(p.pid, flush=True)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", parent], pass_fds=(r,), capture_output=True, text=True,
                             timeout=60, check=True)
        pid = int(out.stdout)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        assert not _alive(pid), "the worker outlived its parent with its stdin open"
    finally:
        os.close(r)
        os.close(w)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaps has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_parent_watch_waits_for_the_parent_then_the_grace():
    exits = []
    t = time.monotonic()
    worker.watch_parent(os.getppid() + 1, 0.2, exit=exits.append, poll=0.01)  # (not our parent: gone)
    assert exits == [0] and time.monotonic() - t >= 0.2


def test_the_compile_setting_is_checked(monkeypatch):
    monkeypatch.setenv("DSLC_NUMBA_COMPILE", "later")
    with pytest.raises(settings.SettingError, match="DSLC_NUMBA_COMPILE='later' is not one of hot, now"):
        settings.check_all()
    monkeypatch.setenv("DSLC_NUMBA_COMPILE", "NOW")
    monkeypatch.setattr(islands, "WHEN", None)
    assert islands.when_default() == "now"



def test_a_training_step_switched_midway_gives_the_interpreters_answers(monkeypatch):
    """Two steps interpreted, then the step's function (Dropout's draws included: its
    generator is an argument the call was written with before the source) for three more:
    every fetched value equals five interpreted steps'."""
    from test_numba_nn import dropout_softmax_xent, feed
    monkeypatch.setattr(islands, "HOT_MS", 10 ** 9)
    got = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        feed(ws)
        model, fetch = dropout_softmax_xent()
        s = LocalSession(ws, backend=backend, **({"when": "hot"} if backend == "numba" else {}))
        s.run(model.param_init_net)
        for step in range(5):
            if step == 2 and backend == "numba":
                program = s.compile(model.net).program
                program.split()  # (the step's region was the interpreter's code until now: lazy.py)
                assert program.hots and all(h.ns[h.name] is None for h in program.hots)
                program.compile_now()
                assert all(h.state == hot.DONE for h in program.hots)
            s.run(model.net)
        got[backend] = [np.array(ws.fetch_blob(b)) for b in fetch]
    for w, g in zip(got["interp"], got["numba"]):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    assert got["numba"][5].tolist() == got["interp"][5].tolist()  # the same draws


class _Queue:
    """A switcher that only records what was queued."""

    def __init__(self):
        self.queued = []

    def submit(self, h):
        self.queued.append(h.label)


def test_pooled_hots_count_their_seconds_together():
    """Every Conv calls the same compiled loops, so switching costs once for them all: the
    pool's seconds reach the limit for each member (after its own trial runs), where one
    op alone would not; an unpooled Hot counts its own."""
    q, shared = _Queue(), hot.Pool()
    a, b = (hot.Hot(n, None, 1.0, q, pool=shared) for n in "ab")
    c = hot.Hot("c", None, 1.0, q)
    raced = hot.Hot("raced", None, 1.0, q, trial=Trial("raced", 2), pool=shared)
    a.spent(0.6)
    c.spent(0.6)
    assert q.queued == []
    b.spent(0.5)  # (1.1 s in the pool)
    assert q.queued == ["b"]
    a.spent(0.01)
    raced.spent(0.01)  # (its first interpreted run: the race wants 2)
    c.spent(0.3)
    assert q.queued == ["b", "a"]
    raced.spent(0.01)
    assert q.queued == ["b", "a", "raced"]
    assert a.total == pytest.approx(0.61) and shared.total == pytest.approx(1.13)
    assert emitter.POOLED <= set(conv.KERNELS)  # (the pooled ops share conv.py's loops)
