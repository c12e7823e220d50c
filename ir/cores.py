"""How many CPUs this process may run on: its affinity mask, not the machine's count
(a process pinned to one core gains nothing from a second thread, only hand-offs)."""
from __future__ import annotations

import os


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (no affinity masks on this platform)
        return os.cpu_count() or 1
