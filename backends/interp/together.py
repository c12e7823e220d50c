"""Running independent large ops at the same time (``concurrent`` regions).

numpy releases the GIL inside big array operations, so two of them on two threads
really run in parallel.
"""
from __future__ import annotations

from dslc.ir.cores import usable_cpus
from dslc.runtime.ieee import in_ieee

_pool = None  # a ThreadPoolExecutor, made (and concurrent.futures imported) on first use


def together(*thunks):
    """Call every thunk; all but the first on the pool. Returns their results in order."""
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor
        _pool = ThreadPoolExecutor(max_workers=max(1, usable_cpus() - 1),
                                   thread_name_prefix="dslc-op")
    futures = [_pool.submit(in_ieee(t)) for t in thunks[1:]]
    first = thunks[0]()
    return (first, *[f.result() for f in futures])
