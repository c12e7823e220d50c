"""Runtime resources held in blobs: atomic counters and wall-clock timers; and the process's
stat registry (named int64 counts ops add to, StatRegistryExport reads)."""
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


class IndexError_(Exception):
    """An index asked to hold more keys than its max_elements."""


class Index:
    """Caffe2's index (IntIndexCreate & co.): keys -> ids 1, 2, ... in order of arrival;
    0 for keys a frozen index lacks. Thread-safe (IndexGet may run in several tasks)."""

    handle_kind = "index"

    def __init__(self, key_dtype, max_elements: int):
        self.key_dtype, self.max_elements = key_dtype, int(max_elements)
        self.ids: dict = {}
        self.frozen = False
        self.lock = threading.Lock()

    def _key(self, k):
        return k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else k

    def get(self, keys) -> np.ndarray:
        keys = np.asarray(keys)
        out = np.empty(keys.shape, dtype=np.int64)
        flat = out.reshape(-1)
        with self.lock:
            for i, k in enumerate(keys.reshape(-1).tolist()):
                k = self._key(k)
                got = self.ids.get(k)
                if got is None:
                    if self.frozen:
                        got = 0
                    else:
                        if len(self.ids) + 1 >= self.max_elements:
                            raise IndexError_(f"the index holds its max_elements={self.max_elements} "
                                              f"(with id 0) and met a new key {k!r}")
                        got = self.ids[k] = len(self.ids) + 1
                flat[i] = got
        return out

    def load(self, items, skip_first_entry: bool) -> None:
        with self.lock:
            for k in np.asarray(items).reshape(-1).tolist()[1 if skip_first_entry else 0:]:
                k = self._key(k)
                if k not in self.ids:
                    if len(self.ids) + 1 >= self.max_elements:
                        raise IndexError_(f"IndexLoad: the index holds its max_elements={self.max_elements}")
                    self.ids[k] = len(self.ids) + 1

    def store(self) -> np.ndarray:
        with self.lock:
            keys = list(self.ids)
        if self.key_dtype is object:
            return np.array(keys, dtype=object).reshape(-1)
        return np.array(keys, dtype=self.key_dtype).reshape(-1)

    def size(self) -> np.int64:
        with self.lock:
            return np.int64(len(self.ids) + 1)


class StatRegistry:
    """Named int64 counts kept for the whole process, as Caffe2's global StatRegistry: an op
    adds to its own key (AtomicIter: ``atomic_iter/stats/<counter blob>/num_iter``) and
    StatRegistryExport reads them all, in key order, zeroing them when asked."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def export(self, reset: bool = True):
        """(keys: bytes, values: int64, timestamps: int64 ns since the epoch), one row per key."""
        now = time.time_ns()
        with self._lock:
            keys = sorted(self._counts)
            values = [self._counts[k] for k in keys]
            if reset:
                self._counts = dict.fromkeys(keys, 0)
        return (np.array([k.encode() for k in keys] or [], dtype=object), np.array(values, np.int64),
                np.full(len(keys), now, np.int64))


STATS = StatRegistry()
