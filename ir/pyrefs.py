"""References from IR attributes to live Python objects (Python op functions).

The IR text shows ``pyref<token, "name">``; the token finds the object again within
the process that made it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PyRef:
    token: int
    name: str


_objects: dict[int, object] = {}
_lock = threading.Lock()


def register(obj, name: str | None = None) -> PyRef:
    """Keep ``obj`` alive for the process and return a reference to it."""
    with _lock:
        token = len(_objects) + 1
        _objects[token] = obj
    return PyRef(token, name or getattr(obj, "__qualname__", None) or type(obj).__name__)


def resolve(ref: PyRef):
    try:
        return _objects[ref.token]
    except KeyError:
        raise LookupError(f"pyref<{ref.token}> ({ref.name}) does not exist in this process") from None
