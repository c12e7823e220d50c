"""Sparse-feature operators of Caffe2's recommendation models, with their gradients.
``FUNCTIONS`` holds the numpy semantics the interpreter runs.

    SparseToDenseMask(ids [K], values [K, ...], default [...][, lengths [B]]) {mask = [m0, m1, ..]}
        -> out [B, len(mask), ...]: out[b, j] = the value of id mask[j] in row b (the last one if
           repeated), default where absent ([len(mask), ...] without lengths); a second result
           says which were present. Negative ids are skipped, at most max_skipped_indices - 1.
    IndexHash(ids) {seed, modulo} -> Caffe2's hash of each id's bytes, in 0..modulo-1
    Mod(X) {divisor, sign_follow_divisor} -> X % divisor (the sign of X, or of the divisor)
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, REQUIRED, declare, type_error
from ..types import INT_DTYPES, TensorType
from .infer import tensors
from .nn import indices


# ----------------------------------------------------------------------------- SparseToDenseMask
def _mask(name, attrs) -> list[int]:
    mask = [int(m) for m in attrs["mask"]]
    if not mask:
        type_error(f"{name} needs a mask: the ids that become the output's columns", "pass mask=[id0, id1, ...]")
    if min(mask) < 0:
        type_error(f"{name}'s mask holds a negative id {min(mask)}", "mask ids are >= 0")
    if len(set(mask)) != len(mask):
        type_error(f"{name}'s mask repeats an id", "give each id once")
    return mask


def _sparse_to_dense_mask(types, attrs, n):
    ids, values, default, *lengths = tensors("SparseToDenseMask", types)
    indices("SparseToDenseMask", ids, "indices")
    cols = len(_mask("SparseToDenseMask", attrs))
    if n == 2 and not attrs["return_presence_mask"]:
        type_error("SparseToDenseMask has a second output only with return_presence_mask=True")
    if values.dtype and default.dtype and values.dtype != default.dtype:
        type_error(f"SparseToDenseMask's values are {values.dtype} and its default {default.dtype}",
                   "feed the default with the values' dtype")
    if values.shape is not None and default.shape is not None and len(values.shape) != len(default.shape) + 1:
        type_error(f"SparseToDenseMask's default {list(default.shape)} must be one value's shape "
                   f"(values {list(values.shape)} less its first dim)")
    lead = ((lengths[0].shape[0] if lengths[0].shape else None),) if lengths else ()
    inner = default.shape
    out = TensorType(values.dtype, None if inner is None else lead + (cols,) + tuple(inner))
    return [out, TensorType("bool", lead + (cols,))][:n]


_MASK_ATTRS = {"mask": REQUIRED, "return_presence_mask": 0, "max_skipped_indices": 50}
declare("SparseToDenseMask", (3, 4), _sparse_to_dense_mask, results=(1, 2), attrs=dict(_MASK_ATTRS),
        traits={PURE}, may_fail=lambda op: True,
        doc="out[b, j] = values of id mask[j] in row b of (ids, values) split by lengths (the last if "
            "repeated), else default; [len(mask), ...] without lengths; presence mask as a 2nd result")


def _sparse_to_dense_mask_grad(types, attrs, n):
    ids, dy, *lengths = tensors("SparseToDenseMaskGradient", types)
    _mask("SparseToDenseMaskGradient", attrs)
    lead = 2 if lengths else 1
    inner = None if dy.shape is None else tuple(dy.shape[lead:])
    k = None if ids.shape is None else ids.shape[0]
    return [TensorType(dy.dtype, None if inner is None else (k,) + inner)]


declare("SparseToDenseMaskGradient", (2, 3), _sparse_to_dense_mask_grad, attrs=dict(_MASK_ATTRS),
        traits={PURE}, doc="dvalues of SparseToDenseMask from (ids, dout[, lengths]): each id's slot of dout, "
                           "zero for ids not in the mask and for all but the last of a repeated id in a row")
no_gradient("SparseToDenseMaskGradient")


@gradient("SparseToDenseMask")
def _(g):  # (no gradient for the default value, as in Caffe2)
    ins = [g.I[0], g.GO[0]] + ([g.I[3]] if len(g.I) > 3 else [])
    return [GradOp("SparseToDenseMaskGradient", ins, [g.GI[1]], g.pick("mask"))]


def _rows(ids, lengths):
    """(row of each id, row count, whether a batch dim is added)."""
    if lengths is None:
        return np.zeros(ids.shape[0], np.int64), 1, False
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1)
    if lengths.min(initial=0) < 0 or lengths.sum() != ids.shape[0]:
        raise ValueError(f"lengths {lengths.tolist()[:8]} do not add up to the {ids.shape[0]} ids")
    return np.repeat(np.arange(lengths.size), lengths), lengths.size, True


def _columns(ids, mask):
    """The mask column of each id (-1: not in the mask)."""
    order = np.argsort(np.asarray(mask, np.int64), kind="stable")
    sorted_mask = np.asarray(mask, np.int64)[order]
    pos = np.searchsorted(sorted_mask, ids.astype(np.int64)).clip(0, len(mask) - 1)
    return np.where(sorted_mask[pos] == ids, order[pos], -1)


def _last_of_each(rows, cols, n_cols):
    """Positions k whose (row, col) no later k repeats (the value the output keeps)."""
    keys = rows * n_cols + cols
    keep = np.zeros(keys.size, bool)
    valid = np.flatnonzero(cols >= 0)
    if valid.size:
        rev = valid[::-1]
        _, first = np.unique(keys[rev], return_index=True)
        keep[rev[first]] = True
    return keep


def sparse_to_dense_mask(ids, values, default, lengths=None, mask=(), return_presence_mask=0,
                         max_skipped_indices=50, n_out=1):
    ids, values, default = np.asarray(ids), np.asarray(values), np.asarray(default)  # (a 0-d string comes as bytes)
    if ids.ndim != 1 or values.ndim < 1 or values.shape[0] != ids.shape[0]:
        raise ValueError(f"{ids.shape[0] if ids.ndim else 0} ids and values of shape {list(values.shape)}: "
                         "one value (row) per id")
    if values.shape[1:] != default.shape:
        raise ValueError(f"the default's shape {list(default.shape)} is not one value's {list(values.shape[1:])}")
    rows, n_rows, batched = _rows(ids, lengths)
    # (Caffe2 skips negative ids, and its dtype's largest value, up to a limit)
    bad = (ids < 0) | (ids == np.iinfo(ids.dtype).max)
    if int(bad.sum()) >= max(int(max_skipped_indices), 1):
        raise ValueError(f"{int(bad.sum())} negative ids, not fewer than max_skipped_indices={max_skipped_indices}")
    cols = np.where(bad, -1, _columns(ids, mask))
    n_cols = len(mask)
    out = np.empty((n_rows, n_cols) + default.shape, dtype=values.dtype)
    out[...] = default
    keep = _last_of_each(rows, cols, n_cols)
    out[rows[keep], cols[keep]] = values[keep]
    present = np.zeros((n_rows, n_cols), bool)
    present[rows[keep], cols[keep]] = True
    if not batched:
        out, present = out[0], present[0]
    return (out, present) if n_out == 2 else out


def sparse_to_dense_mask_grad(ids, dy, lengths=None, mask=(), return_presence_mask=0, max_skipped_indices=50):
    rows, n_rows, batched = _rows(ids, lengths)
    n_cols = len(mask)
    block = dy.reshape((n_rows, n_cols) + dy.shape[2 if batched else 1:])
    cols = np.where(ids < 0, -1, _columns(ids, mask))
    keep = _last_of_each(rows, cols, n_cols)
    dx = np.zeros((ids.shape[0],) + block.shape[2:], dy.dtype)
    dx[keep] = block[rows[keep], cols[keep]]
    return dx


# ----------------------------------------------------------------------------- IndexHash
def _index_hash(types, attrs, n):
    (ids,) = tensors("IndexHash", types)
    if ids.dtype is not None and ids.dtype not in ("i32", "i64"):
        type_error(f"IndexHash hashes int32 or int64 ids, got {ids.dtype}", "Cast them to INT64 first")
    if int(attrs["modulo"]) < 1:
        type_error(f"IndexHash's modulo must be >= 1, got {attrs['modulo']}", "pass modulo=<hash size>")
    if ids.dtype == "i32" and int(attrs["modulo"]) > np.iinfo(np.int32).max:
        type_error(f"IndexHash: modulo {attrs['modulo']} does not fit the int32 ids", "hash int64 ids")
    return [ids]


declare("IndexHash", 1, _index_hash, attrs={"seed": 0, "modulo": REQUIRED}, traits={PURE},
        doc="each id hashed as Caffe2 does (h = seed * 0xDEADBEEF, then h = h * 65537 + byte for each "
            "of the id's little-endian bytes taken as signed, in the ids' width), reduced to 0..modulo-1")
no_gradient("IndexHash")


def index_hash(ids, seed=0, modulo=0):
    """Bit for bit Caffe2's IndexHash: the arithmetic wraps in the ids' width (unsigned here,
    the same bits as two's complement), the final reduction is C's % made non-negative."""
    signed = np.dtype(ids.dtype)
    unsigned = np.dtype(f"u{signed.itemsize}")
    flat = np.ascontiguousarray(ids).reshape(-1)
    # seed * 0xDEADBEEF in 64 bits, cut to the ids' width
    h0 = np.array(int(seed) * 0xDEADBEEF & 0xFFFFFFFFFFFFFFFF, np.uint64).astype(unsigned)
    h = np.full(flat.size, h0, unsigned)
    octets = flat.view(np.int8).reshape(flat.size, signed.itemsize)
    mult = unsigned.type(65537)
    with np.errstate(over="ignore"):
        for i in range(signed.itemsize):  # (little-endian: the byte order of Caffe2's x86 builds)
            h = h * mult + octets[:, i].astype(np.int64).astype(unsigned)
    hs = h.view(signed).astype(np.int64)
    r = np.fmod(hs, np.int64(modulo))
    return ((np.int64(modulo) + r) % np.int64(modulo)).astype(signed).reshape(ids.shape)


# ----------------------------------------------------------------------------- Mod
def _mod(types, attrs, n):
    (x,) = tensors("Mod", types)
    if x.dtype is not None and x.dtype not in INT_DTYPES:
        type_error(f"Mod takes integers, got {x.dtype}", "Cast to INT32 or INT64 first")
    if int(attrs["divisor"]) < 1:
        type_error(f"Mod's divisor must be >= 1, got {attrs['divisor']}", "pass divisor=N")
    return [x]


declare("Mod", 1, _mod, attrs={"divisor": REQUIRED, "sign_follow_divisor": 0}, traits={PURE},
        doc="Y = X % divisor with the sign of X (C's remainder), or of the divisor if sign_follow_divisor")
no_gradient("Mod")


def mod(x, divisor=1, sign_follow_divisor=0):
    d = x.dtype.type(divisor)
    return (np.mod(x, d) if sign_follow_divisor else np.fmod(x, d)).astype(x.dtype, copy=False)


FUNCTIONS = {
    "SparseToDenseMaskGradient": sparse_to_dense_mask_grad,
    "IndexHash": index_hash, "Mod": mod,
}
