"""IR types of runtime values (the session tells the lowering what a workspace holds)."""
from __future__ import annotations

import numpy as np

from dslc.ir.types import ANY, COUNTER, TIMER, HandleType, TensorType, Type, dtype_of_numpy

from .resources import Counter, Timer


def blob_types(ws, only=None) -> tuple[dict, set]:
    """Blob -> the type of the value workspace ``ws`` holds, and the blobs it holds created
    but empty (``CreateBlob``); of the blobs named in ``only``, if given."""
    known, created = {}, set()
    cells = ws.blobs.items() if only is None else ((n, ws.blobs.get(n)) for n in only)
    for n, c in cells:
        if c is None:
            continue
        if c.v is None:
            created.add(n)
        else:
            known[n] = type_of_value(c.v)
    return known, created


def type_of_value(v) -> Type:
    if isinstance(v, (np.ndarray, np.generic)):
        try:
            return TensorType(dtype_of_numpy(v.dtype), v.shape)  # (np.shape dispatches: slower)
        except ValueError:
            return ANY
    if isinstance(v, Counter):
        return COUNTER
    if isinstance(v, Timer):
        return TIMER
    kind = getattr(type(v), "handle_kind", None)  # queues, cursors, mutexes
    if kind is not None:
        return HandleType(kind)
    return ANY
