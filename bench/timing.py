"""Timing for the bench scripts: every figure is a median of warmed-up runs."""
from __future__ import annotations

import os
import statistics
import time

# The benches time compiled code: the numba backend compiles every region before a run
# (its default compiles a region once it is hot, in the background: a warm-up would time
# the interpreter, then the switch). bench/first_result.py times the default.
os.environ.setdefault("DSLC_NUMBA_COMPILE", "now")


def median_time(f, reps: int = 7, clock=time.perf_counter) -> float:
    """Median seconds of ``reps`` calls of ``f``, after one call to warm it up; ``clock``
    may be ``time.process_time`` (the CPU time of this process's threads)."""
    f()
    ts = []
    for _ in range(reps):
        t = clock()
        f()
        ts.append(clock() - t)
    return statistics.median(ts)


def one_core() -> int:
    """Pin this process (and the processes it starts) to one core, the first it may use;
    returns it. A "one thread" comparison then holds for every library, whatever threads
    of its own it starts (XLA's, a thread pool's)."""
    import os
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core
