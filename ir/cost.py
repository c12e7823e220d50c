"""What one operator costs on given operand types: floating-point operations, bytes written
and bytes read (Caffe2's ``workspace.GetOperatorCost``). An op declares its rule beside its
types (``OpDef.cost``); the builders here make the common ones.

    cost(types, attrs, result_types) -> (flops, bytes_written, bytes_read)
    Conv X [1, 8, 8, 8] f32, W [1, 8, 3, 3] -> Y [1, 1, 8, 8]:
        flops 2 * 64 outputs * 9 * 8 = 9216, written 64 * 4, read (512 + 72) * 4

Every size comes from the types, so each must be fully known.
"""
from __future__ import annotations

import math

import numpy as np

from .types import NUMPY_DTYPES, TensorType


def nbytes(t) -> int:
    """Bytes of a tensor of type ``t`` (its shape and dtype known)."""
    if not isinstance(t, TensorType) or t.shape is None or None in t.shape or t.dtype not in NUMPY_DTYPES:
        raise ValueError(f"the size of {t} is not known")
    return math.prod(t.shape) * np.dtype(NUMPY_DTYPES[t.dtype]).itemsize


def moves(written=lambda types, results: sum(nbytes(r) for r in results)):
    """A rule for an op that moves data and computes nothing: 0 flops, every operand read,
    ``written`` bytes (default: every result)."""
    def cost(types, attrs, results):
        return 0, written(types, results), sum(nbytes(t) for t in types)
    return cost


def products(flops):
    """A rule for an op that reads every operand once and writes every result once, doing
    ``flops(types, attrs, results)`` operations."""
    def cost(types, attrs, results):
        return int(flops(types, attrs, results)), sum(nbytes(r) for r in results), sum(nbytes(t) for t in types)
    return cost
