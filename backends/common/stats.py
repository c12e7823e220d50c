"""What compiling one module did, the part every compiling backend reports (``dslc compile``
prints it): ops left to the interpreter and why, kernels compiled, and the time it took."""
from __future__ import annotations

import time
from collections import Counter


class CompileStats:
    # (a plain class, as its subclasses: a dataclass is made at import, through exec, and
    # that is a backend's first-run milliseconds)
    def __init__(self):
        self.interp: Counter = Counter()  # (why, op name) -> count
        self.seconds = 0.0
        self.compiled = 0

    def timed(self, fn):
        """``fn()``, its time added to ``seconds``."""
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds += time.perf_counter() - t
