"""The numba backend's kernels for the sparse updates (ScatterWeightedSum, SparseAdagrad,
RowWiseSparseAdagrad): compiled loops over the rows a sparse gradient has, writing into
the parameter where it lies under the interpreter's conditions (backends/interp/
kernels_nn.py: no later or concurrent use of the loaded value, nothing else holding the
array), else into a copy. They run between islands, as the interpreter's kernels would,
but do per-row work in compiled loops instead of numpy's sort and indexed add. A bag
reduction left outside an island (SparseLengthsSum...) runs the islands' own compiled
helper.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from dslc.backends.interp import kernels_nn as ik
from dslc.ir.ops.ids import updated_rows

from . import kernels_embedding as ke
from .cache import jit
from .failures import KernelFail


# (an id may be negative, counting from the end, as in the interpreter: ir/ops/ids.py)
@jit(nogil=True)
def _add_rows(out, idx, rows, w):
    for i in range(idx.size):
        r = idx[i] + out.shape[0] if idx[i] < 0 else idx[i]
        for j in range(rows.shape[1]):
            out[r, j] += rows[i, j] * w


@jit(nogil=True)
def _adagrad_rows(p, m, idx, g, lr, eps):
    for i in range(idx.size):
        r = idx[i] + p.shape[0] if idx[i] < 0 else idx[i]
        for j in range(g.shape[1]):
            gi = g[i, j]
            m[r, j] += gi * gi
            p[r, j] += lr * gi / (np.sqrt(m[r, j]) + eps)


@jit(nogil=True)
def _row_wise_adagrad_rows(p, m, idx, g, lr, eps):
    n = g.shape[1]
    for i in range(idx.size):
        r = idx[i] + p.shape[0] if idx[i] < 0 else idx[i]
        s = g.dtype.type(0)
        for j in range(n):
            s += g[i, j] * g[i, j]
        m[r] += s / n
        step = lr / (np.sqrt(m[r]) + eps)
        for j in range(n):
            p[r, j] += step * g[i, j]


@jit(nogil=True)
def _outside(idx, rows) -> bool:
    """Whether an index is outside -rows..rows-1 (one compiled pass: numpy's min and max are
    two passes and most of a small batch's cost)."""
    for i in range(idx.size):
        if idx[i] < -rows or idx[i] >= rows:
            return True
    return False


def _checked(name, indices, table):
    """The indices as a flat int64 array, every one checked before any row is touched (an
    update that fails leaves the parameter as it was): the interpreter's error if one is
    outside the table."""
    idx = np.ascontiguousarray(indices.reshape(-1), dtype=np.int64)
    if _outside(idx, table.shape[0]):
        updated_rows(name, idx, table)  # (raises)
    return idx


def _flat(x, rows=None):
    """``x`` as a matrix of ``rows`` (default its first dim) rows of its other dims' size (an
    empty batch or table too: no -1 to infer there)."""
    return x.reshape(x.shape[0] if rows is None else rows, math.prod(x.shape[1:]))


@jit(nogil=True)
def _add_rows_checked(out, idx, rows, w) -> bool:
    """``_add_rows`` if every index is a row of ``out`` (else False, nothing written)."""
    if _outside(idx, out.shape[0]):
        return False
    _add_rows(out, idx, rows, w)
    return True


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _compilable(indices, *floats) -> bool:
    """Whether the compiled loops take these arrays: integer ids, float32 or float64 values
    (numba has no float16: the interpreter's kernel runs those)."""
    return np.asarray(indices).dtype.kind in "iu" and all(np.asarray(x).dtype in _FLOATS for x in floats)


def _scatter_weighted_sum(data, w0, indices, *pairs, inplace=False):
    # the form optimizers emit (a table's rows plus lr times a gradient's) in one compiled
    # call, checks included: at an embedding's sizes its Python costs as much as the rows
    if w0.size != 1 or w0.reshape(-1)[0] != 1 or len(pairs) != 2 or data.dtype != pairs[0].dtype or data.ndim == 0 \
            or not _compilable(indices, data):
        return ik.nm.scatter_weighted_sum(data, w0, indices, *pairs, inplace=inplace)
    out = data if inplace else data.copy()  # (contiguous either way: see ik._owned)
    rows = _flat(np.ascontiguousarray(pairs[0]).reshape((indices.size,) + data.shape[1:]), indices.size)
    if not _add_rows_checked(_flat(out), indices.reshape(-1), rows, data.dtype.type(pairs[1].reshape(-1)[0])):
        _checked("ScatterWeightedSum", indices, data)  # (raises the error)
    return out


def _adagrad(loop, name):
    def run(p, m, indices, g, lr, *counter, epsilon=1e-5, weight_decay=0.0, counter_halflife=-1, inplace=False):
        m = ik.nm.float_moment(p, m)
        if weight_decay or not _compilable(indices, p, m, g, lr):  # (the compiled loop has no decay term)
            extra = {"counter_halflife": counter_halflife} if counter else {}
            return ik.IN_PLACE[name](p, m, indices, g, lr, *counter, epsilon=epsilon, weight_decay=weight_decay,
                                        inplace=inplace, **extra)
        idx = _checked(name, indices, p)
        if not inplace:
            p, m = p.copy(), m.copy()
        rows = _flat(np.ascontiguousarray(g).reshape((idx.size,) + p.shape[1:]), idx.size)
        dt = p.dtype.type
        # (the moment: one per element, shaped as the parameter; row-wise, one per row)
        moment = m.reshape(-1) if name == "RowWiseSparseAdagrad" else _flat(m)
        loop(_flat(p), moment, idx, rows, dt(lr.reshape(())), dt(epsilon))
        return p, m
    return run


@functools.cache
def _bags():
    """The islands' bag helper (kernels_embedding), compiled in a module of its own: the
    bags of an op left outside an island are added by the same code."""
    from .kernels import HELPERS
    from .source import helper_module
    return helper_module(HELPERS["_bags"])._bags


def _sparse_lengths(name, weighted=False, mean=False):
    """The bags' sums (or means) gathered and added in one compiled pass (the interpreter's
    kernel when a check fails: its error)."""
    mode = ke.WEIGHTED if weighted else ke.MEAN if mean else ke.SUM

    def run(data, *rest):
        weights, indices, lengths = rest if weighted else (None, *rest)
        if data.ndim == 0 or not _compilable(indices, data) or (weighted and (
                np.ndim(weights) != 1 or not (_compilable(indices, weights) or weights.dtype.kind in "iu"))):
            return ik.segments.FUNCTIONS[name](data, *rest)
        table = _flat(np.ascontiguousarray(data))
        w = np.ascontiguousarray(weights).reshape(-1) if weighted else table.reshape(-1)[:0]
        try:
            out = _bags()(table, w, np.ascontiguousarray(indices).reshape(-1),
                          np.ascontiguousarray(lengths).reshape(-1), mode, 0)
        except KernelFail:
            return ik.segments.FUNCTIONS[name](data, *rest)  # (raises the interpreter's error)
        return out.reshape((out.shape[0],) + data.shape[1:])
    return lambda op, cfg: run


KERNELS = {
    "SparseLengthsSum": _sparse_lengths("SparseLengthsSum"),
    "SparseLengthsMean": _sparse_lengths("SparseLengthsMean", mean=True),
    "SparseLengthsWeightedSum": _sparse_lengths("SparseLengthsWeightedSum", weighted=True),
    "ScatterWeightedSum": ik._in_place(_scatter_weighted_sum),
    "SparseAdagrad": ik._in_place(_adagrad(_adagrad_rows, "SparseAdagrad")),
    "RowWiseSparseAdagrad": ik._in_place(_adagrad(_row_wise_adagrad_rows, "RowWiseSparseAdagrad")),
}
