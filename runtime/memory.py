"""Keeping freed arrays' memory in the process (glibc's malloc), so a training step's
arrays are not mapped and page-faulted afresh on every run.

glibc serves a large allocation (above 128 KB at first) with its own mmap, and gives
freed memory above the heap's top back to the system beyond 128 KB: an MLP step that
allocates and frees a few hundred-KB arrays then pays page faults for each, every step
(measured: 45% of the compiled MLP step of bench/train.py). ``keep_freed_memory`` raises
both limits (arrays up to 32 MB come from the heap; up to 128 MB of freed memory stays
in the process), as Caffe2's and PyTorch's own allocators keep their blocks. Off with
DSLC_MALLOC_TUNE=0, and a no-op where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import os
import threading

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_done = False
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True if they are set."""
    global _done
    with _lock:
        if _done or os.environ.get("DSLC_MALLOC_TUNE", "1") == "0":
            return _done
        _done = True
        try:
            # the process's own symbols hold its C library's: ctypes.util.find_library would
            # run ldconfig in a subprocess, ~5 ms of every dslc run's start
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return False  # not glibc (musl, macOS, Windows)
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
