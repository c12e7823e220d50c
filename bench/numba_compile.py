"""Compile-time figures of the numba backend, each against its reference in the same run.

1. cold compile of the loops job (n=20000, empty cache) vs numba compiling the
   hand-written function (target: at most 3x);
2. warm `dslc run` with the numba backend (cache hit) vs `python -c "import dslc"`
   (target: at most 0.5 s more), for examples/loops.py and for a job that does load a
   compiled kernel (bench/jobs/loops_large.py);
3. a generated 10,000-op job compiled by the numba backend (target: at most 10 s),
   with the default work threshold, and (for 1,000 ops) with every island compiled;
4. a compiled function loaded from a warm cache in a fresh process: dslc's kernel cache
   (no pickle) vs numba's own (``cache=True``) on the same function (target: at most 1x),
   for the loops reference and for Conv's gradient scatter.
Usage: python bench/numba_compile.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("DSLC_NUMBA_COMPILE", "now")  # (compile times: every region, before the run)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

COLD_DSLC = """
import sys, time
sys.path.insert(0, {here!r})
from loops import build
from dslc.session import LocalSession
from dslc.task import TaskGroup
g = TaskGroup()
with g:
    build(20000)
s = LocalSession(backend="numba")
t = time.perf_counter(); s.compile(g); print(time.perf_counter() - t)
"""

COLD_HAND = """
import sys, time
sys.path.insert(0, {here!r})
from loops import loops_py
import numba
f = numba.njit(loops_py)
t = time.perf_counter(); f(10); print(time.perf_counter() - t)
"""

SCALE = """
import sys, time
sys.path.insert(0, {here!r})
import compile_scaling as cs
from dslc.backends.numba import NumbaBackend
from dslc.ir.gcpause import paused
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
from dslc.lower import lower_group
with paused():
    g, n = cs.build({n})
    m = lower_group(g)
    PassManager(DEFAULT_PIPELINE).run(m)
    t = time.perf_counter(); p = NumbaBackend().compile(m); dt = time.perf_counter() - t
s = p.summary()
print(n, dt, len(s["regions compiled"]), s["ops compiled"])
"""


WARM_LOAD = """
import sys, time
sys.path.insert(0, {here!r})
import numba
from numba import types as nt
from dslc.backends.numba.cache import attach
{setup}
numba.njit(lambda: 0)()  # (numba's target set up: the same for both caches, not timed)
fn = numba.njit(cache=True)(py) if {numba_own} else attach(numba.njit(py))
t, c = time.perf_counter(), time.process_time()
fn.compile({sig})
print(time.perf_counter() - t, time.process_time() - c, sum(fn.stats.cache_hits.values()))
"""
FUNCTIONS = {
    "loops": ("from loops import loops_py as py", "(nt.int64,)"),
    "conv scatter": ("from dslc.backends.numba.conv import _scatter_matrix_2d as d; py = d.py_func",
                     "(nt.float32[:, ::1], nt.float32[:, :, :, ::1]) + (nt.int64,) * 10"),
}


def warm_load(env, what: str, numba_own: bool) -> tuple[float, float]:
    """(best wall, best CPU) seconds to load ``what`` from a warm cache in a fresh process."""
    setup, sig = FUNCTIONS[what]
    code = WARM_LOAD.format(here=HERE, setup=setup, sig=sig, numba_own=numba_own)
    py(code, env)  # (fills the cache)
    runs = [py(code, env).split() for _ in range(5)]
    assert all(int(hits) == 1 for _, _, hits in runs), runs
    return min(float(w) for w, _, _ in runs), min(float(c) for _, c, _ in runs)


def py(code: str, env=None) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def best_wall(cmd, env, reps=7) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DSLC_CACHE_DIR=cache)
        cold = float(py(COLD_DSLC.format(here=HERE), env))
        hand = float(py(COLD_HAND.format(here=HERE), env))
        print(f"1. cold compile, loops n=20000: dslc numba {cold:.2f} s, hand-written numba {hand:.2f} s, "
              f"ratio {cold / hand:.2f}x (target <= 3x)")

        base = best_wall([sys.executable, "-c", "import dslc"], env)
        for job in ("examples/loops.py", "bench/jobs/loops_large.py"):
            cmd = [sys.executable, "-m", "dslc.cli", "run", job, "--backend", "numba"]
            subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=True)  # fill the cache
            warm = best_wall(cmd, env)
            print(f"2. warm run {job}: {warm:.2f} s vs import dslc {base:.2f} s: +{warm - base:.2f} s "
                  f"(target <= +0.5 s)")

        n, dt, regions, ops = py(SCALE.format(here=HERE, n=10000), env).split()
        print(f"3. {n}-op job, default threshold: numba compile {float(dt):.2f} s "
              f"({regions} regions, {ops} ops compiled; target <= 10 s)")
        env0 = dict(env, DSLC_NUMBA_MIN_WORK="0")
        n, dt, regions, ops = py(SCALE.format(here=HERE, n=1000), env0).split()
        print(f"   {n}-op job, every island compiled: {float(dt):.2f} s for {ops} ops in {regions} "
              f"functions ({1e3 * float(dt) / max(1, int(ops)):.1f} ms per compiled op)")

    for what in FUNCTIONS:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, DSLC_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
            ours, theirs = warm_load(env, what, False), warm_load(env, what, True)
        print(f"4. warm load of {what}: dslc cache {1e3 * ours[0]:.1f} ms ({1e3 * ours[1]:.1f} ms CPU), "
              f"numba's own {1e3 * theirs[0]:.1f} ms ({1e3 * theirs[1]:.1f} ms CPU): "
              f"{ours[1] / theirs[1]:.2f}x in CPU (target <= 1x)")


if __name__ == "__main__":
    main()
