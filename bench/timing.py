"""Timing for the bench scripts: every figure is a median of warmed-up runs."""
from __future__ import annotations

import statistics
import time


def median_time(f, reps: int = 7) -> float:
    """Median seconds of ``reps`` calls of ``f``, after one call to warm it up."""
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)
