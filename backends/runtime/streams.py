"""Seeded random streams, one per random op, kept by the root workspace.

A stream is named by Caffe2's ``random_seed`` argument when the op has one, else by
the session's seed and the op's output blob name. It lives as long as the workspace,
so an init net run twice in one workspace draws new values (as in Caffe2), while a
fresh workspace with the same seed draws the same values again, on every backend.
"""
from __future__ import annotations

import threading
import zlib

import numpy as np

_LOCK = threading.Lock()


def _root(ws):
    while ws.parent is not None:
        ws = ws.parent
    return ws


def stream(ws, seed: int, random_seed: int, name: str) -> np.random.Generator:
    """The generator of the op writing ``name`` (``random_seed`` >= 0 names its own stream)."""
    key = ("op_seed", int(random_seed)) if random_seed >= 0 else ("blob", int(seed), name)
    root = _root(ws)
    with _LOCK:
        table = root.__dict__.setdefault("_random_streams", {})
        gen = table.get(key)
        if gen is None:
            words = [int(random_seed)] if random_seed >= 0 else [int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())]
            gen = table[key] = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))
    return gen
