"""Fused 8-bit row-wise quantized tables (Caffe2's ``Fused8BitRowwise`` ops): an embedding
table kept as uint8, each row followed by its float32 scale and bias, read back as floats
by the lookups of inference.

    row r of Q (uint8, cols + 8 bytes) = q[r, :cols] | scale[r] (4 bytes) | bias[r] (4 bytes)
    X[r, c] ~= q[r, c] * scale[r] + bias[r],  scale = (max - min) / 255,  bias = min

Quantizing rounds half to even, as C's lrintf; a constant row has scale 0. The lookups
(Gather, SparseLengthsSum/WeightedSum/Mean) dequantize only the rows they read. None has
a gradient: these are for serving a trained table.

Caffe2's older, unfused form keeps the same bytes and the scales apart: Q uint8 [rows, cols]
and SCALE_BIAS float32 [rows, 2] (``FloatToRowwiseQuantized8Bits``; a constant row gets scale
1), read by ``Rowwise8BitQuantizedToFloat`` and ``SparseLengths{Sum,WeightedSum,Mean}8BitsRowwise``
(SCALE_BIAS last), which run as the fused lookups on the rows joined with their scales.
"""
from __future__ import annotations

import numpy as np

from ..gradients import no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import indices
from . import segments


def _quantize(types, attrs, n):
    (x,) = tensors("FloatToFused8BitRowwiseQuantized", types)
    if x.dtype is not None and x.dtype not in ("f32", "f16"):
        type_error(f"FloatToFused8BitRowwiseQuantized takes float rows, got {x}", "Cast the table to float first")
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"FloatToFused8BitRowwiseQuantized takes a matrix, got shape {list(x.shape)}",
                   "reshape the table to [rows, cols]")
    cols = None if x.shape is None or x.shape[1] is None else x.shape[1] + 8
    return [TensorType("u8", None if x.shape is None else (x.shape[0], cols))]


def _table(name, q):
    if q.dtype is not None and q.dtype != "u8":
        type_error(f"{name} reads a uint8 table made by FloatToFused8BitRowwiseQuantized, got {q}")
    if q.shape is not None and len(q.shape) != 2:
        type_error(f"{name} reads a matrix, got shape {list(q.shape)}")


def _cols(q):
    return None if q.shape is None or q.shape[1] is None else q.shape[1] - 8


def _dequantize(types, attrs, n):
    (q,) = tensors("Fused8BitRowwiseQuantizedToFloat", types)
    _table("Fused8BitRowwiseQuantizedToFloat", q)
    return [TensorType("f32", None if q.shape is None else (q.shape[0], _cols(q)))]


def _gather(types, attrs, n):
    q, idx = tensors("GatherFused8BitRowwise", types)
    _table("GatherFused8BitRowwise", q)
    indices("GatherFused8BitRowwise", idx, "indices")
    rows = None if idx.shape is None else tuple(idx.shape)
    return [TensorType("f32", None if rows is None else rows + (_cols(q),))]


def _lookup(name, weighted=False):
    def infer(types, attrs, n):
        ts = tensors(name, types)
        q, idx, lengths = (ts[0], ts[2], ts[3]) if weighted else ts
        _table(name, q)
        indices(name, idx, "indices")
        indices(name, lengths, "lengths")
        if weighted:
            segments.weights_per_id(name, ts[1], idx)
        rows = None if lengths.shape is None else lengths.shape[0]
        return [TensorType("f32", (rows, _cols(q)))]
    return infer


declare("FloatToFused8BitRowwiseQuantized", 1, _quantize, traits={PURE},
        doc="X [rows, cols] float -> uint8 [rows, cols + 8]: each row's values as bytes of "
            "(x - min) / scale (scale = (max - min) / 255), then scale and min as float32")
declare("Fused8BitRowwiseQuantizedToFloat", 1, _dequantize, traits={PURE},
        doc="the float32 rows of a fused 8-bit table: q * scale + bias")
declare("GatherFused8BitRowwise", 2, _gather, traits={PURE},
        doc="(Q, INDICES) -> the float32 rows of Q at INDICES")
declare("SparseLengthsSumFused8BitRowwise", 3, _lookup("SparseLengthsSumFused8BitRowwise"), traits={PURE},
        doc="SparseLengthsSum of a fused 8-bit table: (Q, INDICES, LENGTHS)")
declare("SparseLengthsMeanFused8BitRowwise", 3, _lookup("SparseLengthsMeanFused8BitRowwise"), traits={PURE},
        doc="SparseLengthsMean of a fused 8-bit table: (Q, INDICES, LENGTHS)")
declare("SparseLengthsWeightedSumFused8BitRowwise", 4,
        _lookup("SparseLengthsWeightedSumFused8BitRowwise", weighted=True), traits={PURE},
        doc="SparseLengthsWeightedSum of a fused 8-bit table: (Q, WEIGHTS, INDICES, LENGTHS)")


# the unfused form: (Q, SCALE_BIAS)
def _quantize_unfused(types, attrs, n):
    (x,) = tensors("FloatToRowwiseQuantized8Bits", types)
    if x.dtype is not None and x.dtype not in ("f32", "f16"):
        type_error(f"FloatToRowwiseQuantized8Bits takes float rows, got {x}", "Cast the table to float first")
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"FloatToRowwiseQuantized8Bits takes a matrix, got shape {list(x.shape)}",
                   "reshape the table to [rows, cols]")
    rows = None if x.shape is None else x.shape[0]
    return [TensorType("u8", x.shape), TensorType("f32", (rows, 2))]


def _unfused_table(name, q, sb):
    if q.dtype is not None and q.dtype != "u8":
        type_error(f"{name} reads a uint8 table made by FloatToRowwiseQuantized8Bits, got {q}")
    if sb.shape is not None and (len(sb.shape) != 2 or sb.shape[1] not in (None, 2)):
        type_error(f"{name}'s scale_bias is [rows, 2] (scale, bias per row), got shape {list(sb.shape)}")


def _dequantize_unfused(types, attrs, n):
    q, sb = tensors("Rowwise8BitQuantizedToFloat", types)
    _unfused_table("Rowwise8BitQuantizedToFloat", q, sb)
    return [TensorType("f32", q.shape)]


def _lookup_unfused(name, weighted=False):
    def infer(types, attrs, n):
        ts = tensors(name, types)
        _unfused_table(name, ts[0], ts[-1])
        idx, lengths = ts[-3], ts[-2]
        indices(name, idx, "indices")
        indices(name, lengths, "lengths")
        if weighted:
            segments.weights_per_id(name, ts[1], idx)
        rows = None if lengths.shape is None else lengths.shape[0]
        cols = None if ts[0].shape is None else ts[0].shape[1]
        return [TensorType("f32", (rows, cols))]
    return infer


declare("FloatToRowwiseQuantized8Bits", 1, _quantize_unfused, results=2, traits={PURE},
        doc="X [rows, cols] float -> (Q uint8 [rows, cols], SCALE_BIAS [rows, 2]): Q = (x - min) / scale, "
            "scale = (max - min) / 255 (1 for a constant row), bias = min")
declare("Rowwise8BitQuantizedToFloat", 2, _dequantize_unfused, traits={PURE},
        doc="(Q, SCALE_BIAS) -> the float32 rows q * scale + bias")
declare("SparseLengthsSum8BitsRowwise", 4, _lookup_unfused("SparseLengthsSum8BitsRowwise"), traits={PURE},
        doc="SparseLengthsSum of an unfused 8-bit table: (Q, INDICES, LENGTHS, SCALE_BIAS)")
declare("SparseLengthsMean8BitsRowwise", 4, _lookup_unfused("SparseLengthsMean8BitsRowwise"), traits={PURE},
        doc="SparseLengthsMean of an unfused 8-bit table: (Q, INDICES, LENGTHS, SCALE_BIAS)")
declare("SparseLengthsWeightedSum8BitsRowwise", 5,
        _lookup_unfused("SparseLengthsWeightedSum8BitsRowwise", weighted=True), traits={PURE},
        doc="SparseLengthsWeightedSum of an unfused 8-bit table: (Q, WEIGHTS, INDICES, LENGTHS, SCALE_BIAS)")
no_gradient("FloatToRowwiseQuantized8Bits", "Rowwise8BitQuantizedToFloat", "SparseLengthsSum8BitsRowwise",
            "SparseLengthsMean8BitsRowwise", "SparseLengthsWeightedSum8BitsRowwise")
no_gradient("FloatToFused8BitRowwiseQuantized", "Fused8BitRowwiseQuantizedToFloat", "GatherFused8BitRowwise",
            "SparseLengthsSumFused8BitRowwise", "SparseLengthsMeanFused8BitRowwise",
            "SparseLengthsWeightedSumFused8BitRowwise")


# ----------------------------------------------------------------------------- numpy semantics

def quantize(x):
    x = np.asarray(x, dtype=np.float32)
    lo = x.min(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    hi = x.max(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    span = (hi - lo).astype(np.float32)
    scale = (span / np.float32(255)).astype(np.float32)
    # (in float32, as Caffe2: 1e-8 vanishes next to most ranges, and only keeps 0 from dividing)
    inverse = (np.float32(255) / (span + np.float32(1e-8))).astype(np.float32)
    q = np.clip(np.rint((x - lo[:, None]) * inverse[:, None]), 0, 255).astype(np.uint8)
    return np.concatenate([q, scale[:, None].view(np.uint8), lo.astype(np.float32)[:, None].view(np.uint8)],
                          axis=1)


def _rows(q, name):
    q = np.ascontiguousarray(q)
    if q.ndim != 2 or q.shape[1] < 8 or q.dtype != np.uint8:
        raise segments.SegmentError(f"{name}: a fused 8-bit table is uint8 [rows, cols + 8], got "
                                    f"{q.dtype} {list(q.shape)}")
    return q


def _scale_bias(q):
    return q[:, -8:-4].copy().view(np.float32)[:, 0], q[:, -4:].copy().view(np.float32)[:, 0]


def dequantize(q, name="Fused8BitRowwiseQuantizedToFloat"):
    """q * scale + bias, rounded once (a fused multiply-add, as Caffe2's)."""
    q = _rows(q, name)
    scale, bias = _scale_bias(q)
    return (q[:, :-8].astype(np.float64) * scale[:, None] + bias[:, None]).astype(np.float32)


def gather(q, idx):
    """The rows at ``idx`` as q * scale + bias in float32, product and sum each rounded (as
    Caffe2's GatherFused8BitRowwise computes them, unlike its dequantizing op)."""
    q = _rows(q, "GatherFused8BitRowwise")
    flat = np.asarray(idx).astype(np.int64).reshape(-1)
    picked = segments._picked(q, flat, "GatherFused8BitRowwise")
    scale, bias = _scale_bias(picked)
    rows = (picked[:, :-8].astype(np.float32) * scale[:, None] + bias[:, None]).astype(np.float32)
    return rows.reshape(np.shape(idx) + (q.shape[1] - 8,))


def _bags(name, q, idx, lengths, weights=None, mean=False):
    """Each bag's sum of its rows, in Caffe2's order of rounding: per id in bag order,
    out = fma(w scale, q, out + w bias)."""
    q = _rows(q, name)
    flat = np.asarray(idx).astype(np.int64).reshape(-1)
    picked = segments._picked(q, flat, name)
    starts, lens = segments._starts(np.asarray(lengths), flat.size, name)
    scale, bias = _scale_bias(picked)
    if weights is not None:
        segments.check_weights(name, weights, flat.size)
    w = np.ones(flat.size, np.float32) if weights is None else np.asarray(weights, np.float32).reshape(-1)
    ws_scale, ws_bias = (w * scale).astype(np.float32), (w * bias).astype(np.float32)
    owner = np.repeat(np.arange(lens.size), lens)
    pos = np.arange(flat.size) - np.repeat(starts, lens)
    out = np.zeros((lens.size, q.shape[1] - 8), np.float32)
    for p in range(int(lens.max()) if lens.size else 0):
        at = np.flatnonzero(pos == p)
        bags = owner[at]
        shifted = (out[bags] + ws_bias[at, None]).astype(np.float32)
        out[bags] = (ws_scale[at, None].astype(np.float64) * picked[at, :-8] + shifted).astype(np.float32)
    return segments._mean(out, lens) if mean else out


def quantize_unfused(x):
    """(Q, SCALE_BIAS): the fused bytes apart from their scales; a constant row gets scale 1 (as Caffe2)."""
    fused = quantize(x)
    q = np.ascontiguousarray(fused[:, :-8])
    scale, bias = _scale_bias(fused)
    scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    return q, np.stack([scale, bias], axis=1).astype(np.float32)


def dequantize_unfused(q, sb):
    """q * scale + bias in float32, product and sum each rounded (as Caffe2's unfused op; the
    fused one rounds once)."""
    _fused(q, sb, "Rowwise8BitQuantizedToFloat")  # (checks the shapes)
    sb = np.asarray(sb, dtype=np.float32)
    return (q.astype(np.float32) * sb[:, :1] + sb[:, 1:]).astype(np.float32)


def _fused(q, sb, name):
    """The unfused (Q, SCALE_BIAS) as one fused table (each row then its scale and bias bytes)."""
    q = np.ascontiguousarray(q)
    sb = np.ascontiguousarray(sb, dtype=np.float32)
    if q.ndim != 2 or q.dtype != np.uint8 or sb.shape != (q.shape[0], 2):
        raise segments.SegmentError(f"{name}: an 8-bit table is uint8 [rows, cols] with scale_bias [rows, 2], "
                                    f"got {q.dtype} {list(q.shape)} and {list(sb.shape)}")
    return np.concatenate([q, sb[:, :1].view(np.uint8), sb[:, 1:].view(np.uint8)], axis=1)


FUNCTIONS = {
    "FloatToRowwiseQuantized8Bits": quantize_unfused,
    "Rowwise8BitQuantizedToFloat": lambda q, sb: dequantize_unfused(q, sb),
    "SparseLengthsSum8BitsRowwise": lambda q, idx, lengths, sb: _bags(
        "SparseLengthsSum8BitsRowwise", _fused(q, sb, "SparseLengthsSum8BitsRowwise"), idx, lengths),
    "SparseLengthsMean8BitsRowwise": lambda q, idx, lengths, sb: _bags(
        "SparseLengthsMean8BitsRowwise", _fused(q, sb, "SparseLengthsMean8BitsRowwise"), idx, lengths, mean=True),
    "SparseLengthsWeightedSum8BitsRowwise": lambda q, w, idx, lengths, sb: _bags(
        "SparseLengthsWeightedSum8BitsRowwise", _fused(q, sb, "SparseLengthsWeightedSum8BitsRowwise"), idx, lengths,
        weights=w),
    "FloatToFused8BitRowwiseQuantized": quantize,
    "Fused8BitRowwiseQuantizedToFloat": dequantize,
    "GatherFused8BitRowwise": gather,
    "SparseLengthsSumFused8BitRowwise": lambda q, idx, lengths: _bags("SparseLengthsSumFused8BitRowwise", q, idx,
                                                                      lengths),
    "SparseLengthsMeanFused8BitRowwise": lambda q, idx, lengths: _bags("SparseLengthsMeanFused8BitRowwise", q, idx,
                                                                       lengths, mean=True),
    "SparseLengthsWeightedSumFused8BitRowwise": lambda q, w, idx, lengths: _bags(
        "SparseLengthsWeightedSumFused8BitRowwise", q, idx, lengths, weights=w),
}
