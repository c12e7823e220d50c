"""Timing for the bench scripts: every figure is a median of warmed-up runs."""
from __future__ import annotations

import statistics
import time


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
