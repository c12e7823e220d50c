"""The ids a lookup op reads or writes rows at, checked once for every such op.

Every op that picks rows (or entries along an axis) by id checks its ids here before it
touches anything, so each reports an id outside its table the same way, at the op's line,
on every backend (the numba kernels fail over to the interpreter's kernel, which raises
this error):

    Gather: id 3 is outside DATA's 3 rows; ids run 0..2, or -3..-1 counting from the end

An id in 0..n-1 names a row. A negative id counts from the end (-1 is the last row) only
where the op's definition says so (``wrap``): Gather along axis 0 (Caffe2's default
``wrap_indices``), and the updates that take a sparse gradient's ids (ScatterWeightedSum,
ScatterAssign, the sparse optimizers, RowWiseCounter, SparseToDense's densified gradients),
so that a Gather's gradient lands on the row it read. Elsewhere (BatchGather, Gather along
another axis, the SparseLengths* bags, SparseToDense as a user writes it) a negative id is
an error, as Caffe2 reports it. Nothing is checked where no value moves (an empty batch).
"""
from __future__ import annotations

import numpy as np

from ..diagnostics import DSLError


class IdError(DSLError):
    """An id outside the rows (or the axis) a lookup op indexes."""


def wraps(axis, wrap_indices) -> bool:
    """Whether Gather takes a negative id as counting from the end: when ``wrap_indices``
    says so, and by default (-1) along axis 0 as written (``axis=-2`` of a matrix does not),
    as Caffe2 decides."""
    return int(axis) == 0 if int(wrap_indices) < 0 else bool(wrap_indices)


def checked(name: str, ids, n: int, wrap: bool = False, what: str = "DATA's {n} rows") -> np.ndarray:
    """``ids`` as int64, each in ``0..n-1`` (with ``wrap``, a negative ``-k`` in ``-n..-1``
    turned into ``n - k``), or an ``IdError`` naming the first bad one; the shape is kept. ``what``
    says what the ids index (``{n}``: its size)."""
    idx = np.asarray(ids).astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if lo >= 0 and hi < n:
        return idx
    if wrap and lo >= -n and hi < n:
        return np.where(idx < 0, idx + n, idx)
    flat = idx.reshape(-1)
    bad = int(flat[np.flatnonzero((flat < (-n if wrap else 0)) | (flat >= n))[0]])
    raise IdError(f"{name}: id {bad} is outside {what.format(n=n)}",
                  hint=f"ids run 0..{n - 1}" + (f", or {-n}..-1 counting from the end" if wrap else "")
                  if n else "there is nothing to index: the axis is empty")


def updated_rows(name: str, ids, table) -> np.ndarray:
    """A sparse update's ids, flat and checked against ``table``'s rows, a negative one
    counting from the end (as the Gather whose gradient it may be read them)."""
    n = table.shape[0] if np.ndim(table) else 1
    return checked(name, ids, n, wrap=True, what="the parameter's {n} rows").reshape(-1)
