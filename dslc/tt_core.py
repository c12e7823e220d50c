"""Tensor-train (TT) cores (Caffe2's ``tt_core``): a fully connected layer's weight matrix as
a chain of small cores, flat, laid out as Caffe2's ``TT`` operator reads them.

    cores = matrix_to_tt(W, inp_sizes, out_sizes, tt_ranks)   # W square, as FC's weight
    TT(X, b, cores) == X W^T + b                              # exact at full ranks
    cores = init_tt_cores(inp_sizes, out_sizes, tt_ranks)     # random, to train from scratch

The TT operator multiplies by the last core first, so ``matrix_to_tt`` stores core k as
[inp_k, r_k+1, r_k, out_k] and the cores last to first; ``init_tt_cores`` stores its random
cores first to last as [r_k, inp_k, out_k, r_k+1] (Caffe2's layout for each, kept so cores
move between the two unchanged). The results equal Caffe2's for the same numpy.
"""
from __future__ import annotations

import numpy as np


def _check(inp_sizes, out_sizes, tt_ranks):
    if len(inp_sizes) != len(out_sizes):
        raise ValueError(f"{len(inp_sizes)} input sizes and {len(out_sizes)} output sizes: give one of each per core")
    if len(tt_ranks) != len(inp_sizes) + 1:
        raise ValueError(f"{len(tt_ranks)} tt_ranks for {len(inp_sizes)} cores: give one more rank than cores")
    return np.array(inp_sizes), np.array(out_sizes), np.array(tt_ranks)


def init_tt_cores(inp_sizes, out_sizes, tt_ranks, seed=1234):
    """Random cores for training from scratch: Gaussian cores, each but the last made
    orthonormal (QR, its R carried into the next), scaled by 0.1 / (prod(inp) prod(ranks))^(1/d).
    Seeds numpy's global generator with ``seed`` (as Caffe2 does); float32, flat."""
    inp, out, ranks = _check(inp_sizes, out_sizes, tt_ranks)
    np.random.seed(seed)
    d = inp.size
    flat, carry = [], 1
    for k in range(d):
        block = np.dot(carry, np.random.normal(0, 1, size=(ranks[k], inp[k] * out[k] * ranks[k + 1])))
        tall = block.reshape(ranks[k] * inp[k] * out[k], ranks[k + 1])
        if k < d - 1:
            tall, carry = np.linalg.qr(tall)
        flat.append(tall.ravel())
    scale = 0.1 / (np.prod(inp) * np.prod(ranks)) ** (1.0 / d)
    # (in float32, the scale rounded first: numpy 1's promotion, which Caffe2's figures have)
    return np.float32(scale) * np.concatenate(flat).astype(np.float32)


def tt_svd(W, sizes, tt_ranks):
    """Cores of the tensor ``W`` (seen with dims ``sizes``) by successive truncated SVDs, flat,
    first to last, core k as [r_k, sizes[k], r_k+1]. A rank above what the tensor has is padded
    with zero columns, so every core has the size its ranks give."""
    sizes, tt_ranks = np.asarray(sizes), np.asarray(tt_ranks)
    if len(tt_ranks) != len(sizes) + 1:
        raise ValueError(f"{len(tt_ranks)} tt_ranks for {len(sizes)} cores: give one more rank than cores")
    rest = np.array(W, copy=True)
    flat = []
    for k in range(sizes.size - 1):
        rest = rest.reshape(tt_ranks[k] * sizes[k], -1)
        U, S, V = np.linalg.svd(rest, full_matrices=False)
        r, want = min(int(tt_ranks[k + 1]), S.size), int(tt_ranks[k + 1])
        flat.append(np.pad(U[:, :r], ((0, 0), (0, want - r))).ravel())
        rest = np.pad(S[:r, None] * V[:r], ((0, want - r), (0, 0)))
    flat.append(rest.ravel())
    return np.concatenate(flat).astype(np.float32)


def matrix_to_tt(W, inp_sizes, out_sizes, tt_ranks):
    """The cores of a weight ``W`` of shape [prod(inp_sizes), prod(out_sizes)] in the order and
    layout the TT operator reads: TT(X, b, cores) = X W^T + b (FC's product with W) when the
    ranks suffice. (Caffe2 reshapes W^T by the input sizes first: for a square W, as its tests
    use it, that is the same tensor.)"""
    inp, out, ranks = _check(inp_sizes, out_sizes, tt_ranks)
    W = np.asarray(W)
    if W.shape[0] != np.prod(inp) or W.shape[1] != np.prod(out):
        raise ValueError(f"W is {list(W.shape)}: it must be [prod(inp_sizes), prod(out_sizes)] = "
                         f"[{np.prod(inp)}, {np.prod(out)}]")
    d = inp.size
    # W^T as a tensor (i_1..i_d, o_1..o_d), pairs interleaved (i_1, o_1, i_2, o_2, ...)
    t = W.T.reshape(np.concatenate((inp, out)))
    t = t.transpose([x for k in range(d) for x in (k, d + k)]).reshape(inp * out)
    flat = tt_svd(t, inp * out, ranks)
    pieces, at = [], 0
    for k in range(d):  # each core to [inp, r_k+1, r_k, out]; then last core first
        shape = (ranks[k], inp[k], out[k], ranks[k + 1])
        n = int(np.prod(shape))
        pieces.append(flat[at:at + n].reshape(shape).transpose(1, 3, 0, 2).ravel())
        at += n
    return np.concatenate(pieces[::-1]).astype(np.float32)
