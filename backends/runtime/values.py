"""IR types of runtime values (the session tells the lowering what a workspace holds)."""
from __future__ import annotations

import numpy as np

from dslc.ir.types import ANY, COUNTER, TIMER, HandleType, TensorType, Type, dtype_of_numpy

from .resources import Counter, Timer


def blob_types(ws) -> tuple[dict, set]:
    """Blob -> the type of the value workspace ``ws`` holds, and the blobs it holds created
    but empty (``CreateBlob``)."""
    known, created = {}, set()
    for n, c in ws.blobs.items():
        if c.v is None:
            created.add(n)
        else:
            known[n] = type_of_value(c.v)
    return known, created


def type_of_value(v) -> Type:
    if isinstance(v, (np.ndarray, np.generic)):
        try:
            return TensorType(dtype_of_numpy(v.dtype), tuple(np.shape(v)))
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
