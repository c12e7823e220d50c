"""How long this process spends compiling, told to whoever must not count it as running.

Caffe2's operator tests run each hypothesis example under a deadline (10 s in its "dev"
profile). On numba the first example of an op compiles its kernels, which can take longer
than the deadline by itself; the same example run again takes milliseconds, and hypothesis
then fails the test for "unreliable timings". The test harness (``hypothesis_test_util``)
listens here and takes compile time out of the example's measured time.

A session times each lowering + backend compile (``compiling()``); kernels numba compiles
lazily, on their first call at run time, are reported by the numba event listener the
harness installs (``inside()`` tells it whether a session compile already counts them).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

_listeners: list[Callable[[float], None]] = []
_state = threading.local()


def listen(fn: Callable[[float], None]) -> None:
    """Call ``fn(seconds)`` after each outermost compile (once per function, however often added)."""
    if fn not in _listeners:
        _listeners.append(fn)


def inside() -> bool:
    """Whether this thread is inside a timed compile now."""
    return getattr(_state, "depth", 0) > 0


def report(seconds: float) -> None:
    """Tell the listeners about ``seconds`` of compiling timed elsewhere (numba's lazy compiles)."""
    for fn in list(_listeners):
        fn(seconds)


@contextlib.contextmanager
def compiling():
    """Time the block as compiling; nested blocks count once, in the outermost."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    start = time.perf_counter()
    try:
        yield
    finally:
        _state.depth = depth
        if depth == 0 and _listeners:
            report(time.perf_counter() - start)
