"""Seeded random streams, one per random op, kept by the root workspace.

A stream is named by Caffe2's ``random_seed`` argument when the op has one, else by
the session's seed and the op's output blob name. It lives as long as the workspace,
so an init net run twice in one workspace draws new values (as in Caffe2), while a
fresh workspace with the same seed draws the same values again, on every backend.

A session given no seed uses the process's: drawn from the OS once per process, so two
runs of a program that seeds nothing draw different values, as Caffe2's do, while the
sessions and backends of one process agree with each other.
"""
from __future__ import annotations

import secrets
import threading
import zlib

import numpy as np

_LOCK = threading.Lock()
_PROCESS_SEED: list = []  # [seed] once drawn


def default_seed() -> int:
    """The seed of a session given none: one per process, from the OS's entropy."""
    with _LOCK:
        if not _PROCESS_SEED:
            _PROCESS_SEED.append(secrets.randbits(32))
        return _PROCESS_SEED[0]


def session_seed(seed) -> int:
    """A backend's seed option (None: the process's)."""
    return default_seed() if seed is None else int(seed)


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
