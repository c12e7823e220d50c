"""Norms, clipping into a range and top-k selection: the operators Caffe2's regularizers
record (dslc/regularizer.py). ``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    LpNorm([1, -2, 0, 3], p=1) -> [6.];  p=2 -> [14.] (the squared L2 norm); average: / size
    EnsureClipped(W, min=0, max=1) -> W clipped; (W, INDICES, GRAD) -> only rows INDICES clipped
    TopK([[3, 1, 2]], k=2) -> ([[3, 2]], [[0, 2]], flat [0, 2])
    SparseNormalize(W, INDICES, norm=1) -> the rows INDICES of W scaled to norm <= 1
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import floats, indices


# --- LpNorm: sum |x| (p=1) or sum x^2 (p=2), a [1] tensor
def _lp_attrs(name, attrs):
    if int(attrs["p"]) not in (1, 2):
        type_error(f"{name} takes p=1 or p=2, got {attrs['p']}", "p=1: sum |x|; p=2: sum x^2")


def _lp_norm(types, attrs, n):
    (x,) = floats("LpNorm", types)
    _lp_attrs("LpNorm", attrs)
    return [TensorType(x.dtype, (1,))]


def _lp_norm_grad(types, attrs, n):
    x, _ = floats("LpNormGradient", types)
    _lp_attrs("LpNormGradient", attrs)
    return [x]


declare("LpNorm", 1, _lp_norm, attrs={"p": 2, "average": 0}, traits={PURE},
        doc="y = [sum |X|] (p=1) or [sum X^2] (p=2: the squared L2 norm), divided by X's size if `average`")
declare("LpNormGradient", 2, _lp_norm_grad, attrs={"p": 2, "average": 0}, traits={PURE},
        doc="dX from (X, dY) of LpNorm: sign(X) dY (p=1) or 2 X dY (p=2), / size if `average`")
no_gradient("LpNormGradient")


@gradient("LpNorm")
def _lp_norm_gradient(g):
    return [GradOp("LpNormGradient", [g.I[0], g.GO[0]], [g.GI[0]], g.pick("p", "average"))]


def lp_norm(x, p=2, average=0):
    x64 = x.astype(np.float64)
    s = np.abs(x64).sum() if int(p) == 1 else np.square(x64).sum()
    if average:
        s = s / max(x.size, 1)
    return np.array([s], dtype=x.dtype)


def lp_norm_grad(x, dy, p=2, average=0):
    scale = dy.reshape(-1)[0] / (max(x.size, 1) if average else 1)
    g = np.sign(x) if int(p) == 1 else 2 * x
    return (g * scale).astype(x.dtype)


# --- Normalize: X scaled to unit L2 norm along an axis (a zero vector stays zero)
def _normalize(name):
    def infer(types, attrs, n):
        ts = floats(name, types)
        x = ts[0]
        if x.shape is not None and not -len(x.shape) <= int(attrs["axis"]) < max(len(x.shape), 1):
            type_error(f"{name} axis {attrs['axis']} is outside a rank-{len(x.shape)} input")
        return [x]
    return infer


declare("Normalize", 1, _normalize("Normalize"), attrs={"axis": -1}, traits={PURE},
        doc="Y = X / max(||X||, 1e-12), the L2 norm taken along `axis`")
declare("NormalizeGradient", 2, _normalize("NormalizeGradient"), attrs={"axis": -1}, traits={PURE},
        doc="dX from (X, dY) of Normalize: (dY - Y <Y, dY>) / ||X||")
no_gradient("NormalizeGradient")


@gradient("Normalize")
def _normalize_gradient(g):
    return [GradOp("NormalizeGradient", [g.I[0], g.GO[0]], [g.GI[0]], g.pick("axis"))]


def _norm_along(x, axis):
    return np.maximum(np.sqrt(np.square(x, dtype=np.float64).sum(axis=axis, keepdims=True)), 1e-12)


def normalize(x, axis=-1):
    return (x / _norm_along(x, axis)).astype(x.dtype)


def normalize_grad(x, dy, axis=-1):
    norm = _norm_along(x, axis)
    y = x / norm
    return ((dy - y * (y * dy).sum(axis=axis, keepdims=True)) / norm).astype(x.dtype)


# --- EnsureClipped: a parameter clipped into [min, max] (in place in Caffe2's nets)
def _ensure_clipped(types, attrs, n):
    ts = floats("EnsureClipped", types, 1)
    if len(ts) == 3:
        indices("EnsureClipped", ts[1], "indices")
    elif len(ts) != 1:
        type_error(f"EnsureClipped takes (param) or (param, indices, grad), got {len(ts)} inputs",
                   "a sparse gradient's rows are what gets clipped")
    return [ts[0]]


declare("EnsureClipped", (1, 3), _ensure_clipped, attrs={"min": None, "max": None}, traits={PURE},
        doc="Y = PARAM clipped into [min, max] (an absent bound: none); with (INDICES, GRAD) only the rows "
            "INDICES are clipped, the rest copied")
no_gradient("EnsureClipped")


def ensure_clipped(param, *sparse, min=None, max=None):
    lo = -np.inf if min is None else min
    hi = np.inf if max is None else max
    if not sparse:
        return np.clip(param, lo, hi).astype(param.dtype, copy=False)
    out = param.copy()
    rows = np.asarray(sparse[0]).reshape(-1).astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= len(param)):
        raise IndexError(f"EnsureClipped: an index is outside 0..{len(param) - 1}")
    out[rows] = np.clip(param[rows], lo, hi)
    return out


# --- TopK: the k largest along the last axis, their indices, and the flat indices
def _top_k(types, attrs, n):
    (x,) = tensors("TopK", types)
    k = int(attrs["k"])
    if k < 1:
        type_error(f"TopK needs k >= 1, got {k}", "k is how many values to keep per row")
    if x.shape is None:
        return [TensorType(x.dtype, None), TensorType("i64", None), TensorType("i64", None)][:n]
    if not x.shape:
        type_error("TopK takes a tensor of rank >= 1, got a scalar")
    if x.shape[-1] is not None and x.shape[-1] < k:
        type_error(f"TopK k={k} is more than the last dim ({x.shape[-1]})", "ask for at most that many")
    out = tuple(x.shape[:-1]) + (k,)
    rows = 1
    for d in x.shape[:-1]:
        rows = None if rows is None or d is None else rows * d
    return [TensorType(x.dtype, out), TensorType("i64", out),
            TensorType("i64", (None if rows is None else rows * k,))][:n]


declare("TopK", 1, _top_k, results=(2, 3), attrs={"k": -1}, traits={PURE},
        doc="(VALUES, INDICES[, FLAT_INDICES]): the k largest entries of each row (last axis), largest first "
            "(ties: the lower index first), their int64 positions, and those positions in the flattened input")


@gradient("TopK")
def _top_k_gradient(g):
    return [GradOp("TopKGradient", [g.GO[0], g.O[1], g.I[0]], [g.GI[0]])]


declare("TopKGradient", 3, lambda t, a, n: [TensorType(tensors("TopKGradient", t)[0].dtype, tensors("TopKGradient", t)[2].shape)],
        traits={PURE}, doc="dX from (dVALUES, INDICES, X) of TopK: dVALUES scattered to their positions, zeros elsewhere")
no_gradient("TopKGradient")


def top_k(x, k=-1):
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    cols = x.shape[-1]
    flat = (order.reshape(-1, k) + cols * np.arange(order.size // k)[:, None]).reshape(-1)
    return values, order.astype(np.int64), flat.astype(np.int64)


def top_k_grad(dv, idx, x):
    out = np.zeros_like(x, dtype=dv.dtype)
    np.put_along_axis(out, idx, dv, axis=-1)
    return out


# --- per-row updates of a sparse parameter (the rows INDICES), after the optimizer's step
def _rows_update(name, dtypes=None):
    def infer(types, attrs, n):
        ts = floats(name, types, 1)
        if len(ts) not in (2, 3):
            type_error(f"{name} takes (param, indices[, grad]), got {len(ts)} inputs")
        indices(name, ts[1], "indices")
        if dtypes and ts[0].dtype not in dtypes:
            type_error(f"{name} takes a {'/'.join(dtypes)} parameter, got {ts[0].dtype}")
        return [ts[0]]
    return infer


declare("CopyRowsToTensor", 3, lambda t, a, n: [tensors("CopyRowsToTensor", t)[0]], traits={PURE},
        doc="Y = TENSOR with each row in INDICES replaced by ROW (the rows of evicted ids re-initialized)")
no_gradient("CopyRowsToTensor")
declare("SparseNormalize", (2, 3), _rows_update("SparseNormalize", ("f32",)),
        attrs={"use_max_norm": 1, "norm": 1.0}, traits={PURE},
        doc="Y = PARAM with each row in INDICES scaled to L2 norm `norm` (use_max_norm: only rows whose norm "
            "is above it), the other rows copied")
declare("Float16SparseNormalize", (2, 3), _rows_update("Float16SparseNormalize", ("f16",)),
        attrs={"use_max_norm": 1, "norm": 1.0}, traits={PURE}, doc="SparseNormalize of a float16 parameter")
declare("SparseLpRegularizer", (2, 3), _rows_update("SparseLpRegularizer"), attrs={"p": 2.0, "reg_lambda": 1e-5},
        traits={PURE}, doc="Y = PARAM with each row in INDICES shrunk: p=1 soft-thresholds by reg_lambda, p=2 "
                           "scales by 1 - reg_lambda; the other rows copied")
no_gradient("SparseNormalize", "Float16SparseNormalize", "SparseLpRegularizer")


def _rows(param, idx, name):
    rows = np.asarray(idx).reshape(-1).astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= len(param)):
        raise IndexError(f"{name}: an index is outside 0..{len(param) - 1}")
    return rows


def sparse_normalize(param, idx, *grad, use_max_norm=1, norm=1.0):
    out = param.copy()
    for r in np.unique(_rows(param, idx, "SparseNormalize")):
        row = out[r].astype(np.float32)
        current = np.sqrt(np.square(row).sum())
        if use_max_norm and current <= norm:
            continue
        # (the factor in the parameter's type, as Caffe2's fp16 kernel rounds it: 0.4 -> 0.39990234375)
        out[r] = out[r] * param.dtype.type(norm / (current + 1e-12))
    return out


def copy_rows_to_tensor(tensor, idx, row):
    out = tensor.copy()
    out[_rows(tensor, idx, "CopyRowsToTensor")] = row
    return out


def sparse_lp_regularizer(param, idx, *grad, p=2.0, reg_lambda=1e-5):
    out = param.copy()
    rows = np.unique(_rows(param, idx, "SparseLpRegularizer"))
    if float(p) == 1.0:
        out[rows] = np.sign(param[rows]) * np.maximum(np.abs(param[rows]) - reg_lambda, 0)
    elif float(p) == 2.0:
        out[rows] = param[rows] * (1 - reg_lambda)
    else:
        raise ValueError(f"SparseLpRegularizer takes p=1 or p=2, got {p}")
    return out


# (TopK's kernel is the interpreter's: it returns as many results as the op has)
FUNCTIONS = {"LpNorm": lp_norm, "LpNormGradient": lp_norm_grad, "EnsureClipped": ensure_clipped,
             "TopKGradient": top_k_grad, "SparseNormalize": sparse_normalize,
             "Float16SparseNormalize": sparse_normalize, "SparseLpRegularizer": sparse_lp_regularizer,
             "Normalize": normalize, "NormalizeGradient": normalize_grad, "CopyRowsToTensor": copy_rows_to_tensor}
