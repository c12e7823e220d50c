"""What compiling one module did, the part every compiling backend reports (``dslc compile``
prints it): ops left to the interpreter and why, kernels compiled, and the time it took."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class CompileStats:
    interp: Counter = field(default_factory=Counter)  # (why, op name) -> count
    seconds: float = 0.0
    compiled: int = 0

    def timed(self, fn):
        """``fn()``, its time added to ``seconds``."""
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds += time.perf_counter() - t
