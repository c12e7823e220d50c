"""Pausing Python's cyclic garbage collector while a compiler phase builds a big graph.

The IR allocates many small objects that live until the module is dropped; with the
collector on, each full collection rescans all of them, which made compile time grow
quadratically with job size. Reference counting still frees everything promptly.
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused():
    """Run the block with the cyclic collector off (nests; restores the previous state)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
