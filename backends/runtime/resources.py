"""Runtime resources held in blobs: atomic counters and wall-clock timers."""
from __future__ import annotations

import threading
import time

import numpy as np


class Counter:
    """An atomic int64 counter (CreateCounter)."""

    __slots__ = ("count", "init", "lock")

    def __init__(self, init: int = 0):
        self.init = int(init)
        self.count = self.init
        self.lock = threading.Lock()

    def count_up(self):
        with self.lock:
            prev = self.count
            self.count += 1
        return np.int64(prev)

    def count_down(self):
        """Decrement; True iff the count was already <= 0 (it is decremented anyway)."""
        with self.lock:
            prev = self.count
            self.count -= 1
        return np.bool_(prev <= 0)

    def reset(self, init=None):
        with self.lock:
            prev = self.count
            self.count = self.init if init is None else int(init)
        return np.int64(prev)

    def retrieve(self):
        return np.int64(self.count)

    def done(self):
        return np.bool_(self.count <= 0)

    def __repr__(self):
        return f"Counter({self.count})"


class Timer:
    """One TimerBegin op's own timer (Begin starts it, End stops it)."""

    __slots__ = ("name", "start")

    def __init__(self, name: str):
        self.name = name
        self.start = None

    def begin(self):
        if self.start is not None:
            raise RuntimeError(f"timer {self.name!r} is already running")
        self.start = time.perf_counter_ns()
        return self

    def elapsed(self) -> int:
        if self.start is None:
            raise RuntimeError(f"timer {self.name!r} is not running")
        return time.perf_counter_ns() - self.start

    def end(self) -> None:
        self.elapsed()
        self.start = None

    def __repr__(self):
        return f"Timer({self.name!r})"
