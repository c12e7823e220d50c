"""runtime/memory.py: freed arrays' memory stays in the process (glibc)."""
import ctypes
import ctypes.util
import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes, ctypes.util, sys
import numpy as np
from dslc.runtime.memory import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                              "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info

def mapped_by_a_large_array(mb):
    before = libc.mallinfo2().hblks
    a = np.ones(mb << 18, np.float32)
    return libc.mallinfo2().hblks - before

# (glibc raises its threshold to the largest block freed so far: the second array is larger)
print(mapped_by_a_large_array(1), keep_freed_memory(), mapped_by_a_large_array(2))
"""


def _glibc_with_mallinfo2():
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc 2.33+ only (mallinfo2)")
@pytest.mark.parametrize("tune, want", [("1", "1 True 0"), ("0", "1 False 1")])
def test_large_arrays_come_from_the_heap(tune, want):
    # glibc maps a MB-sized block of its own (one more mmapped chunk) until the thresholds
    # are raised; DSLC_MALLOC_TUNE=0 leaves them alone
    env = dict(os.environ, DSLC_MALLOC_TUNE=tune)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == want.split(), out.stderr


def test_thread_pools_count_the_cpus_the_process_may_use(monkeypatch):
    """Pinned to one CPU, a process gets no second worker (the machine may have more)."""
    import os

    from dslc.ir import cores
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cores.usable_cpus() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3}, raising=False)
    assert cores.usable_cpus() == 2
