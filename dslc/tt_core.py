"""Tensor-train (TT) cores for a matrix (Caffe2's ``tt_core``): a [prod(inp), prod(out)]
matrix as cores G_k of shape [r_k, inp_k, out_k, r_k+1] (r_0 = r_d = 1), stored flat,
one after another, as the TT layer reads them.
"""
from __future__ import annotations

import numpy as np


def init_tt_cores(inp_sizes, out_sizes, tt_ranks, seed=1234):
    """Random cores whose product has about the variance Glorot's init gives the full
    matrix (2 / (fan_in + fan_out)), flat, float32."""
    inp_sizes, out_sizes, tt_ranks = (np.asarray(a) for a in (inp_sizes, out_sizes, tt_ranks))
    assert inp_sizes.size == out_sizes.size == tt_ranks.size - 1 and tt_ranks[0] == tt_ranks[-1] == 1
    rng = np.random.RandomState(seed)
    d = inp_sizes.size
    # the product of d cores has variance prod(var_k * r_k) (r_0 = 1): choose equal var_k
    target = 2.0 / (np.prod(inp_sizes) + np.prod(out_sizes))
    var = (target / np.prod(tt_ranks[1:-1])) ** (1.0 / d)
    cores = [rng.normal(0, np.sqrt(var), size=(tt_ranks[k], inp_sizes[k], out_sizes[k], tt_ranks[k + 1]))
             for k in range(d)]
    return np.concatenate([c.ravel() for c in cores]).astype(np.float32)


def tt_svd(W, sizes, tt_ranks):
    """Cores of the tensor ``W`` (reshaped to ``sizes``) by successive truncated SVDs."""
    d = len(sizes)
    C = np.asarray(W, dtype=np.float64).reshape(sizes)
    cores, rank = [], 1
    for k in range(d - 1):
        C = C.reshape(rank * sizes[k], -1)
        U, S, V = np.linalg.svd(C, full_matrices=False)
        want = int(tt_ranks[k + 1])
        r = min(want, S.size)
        # (a rank above what the matrix has: zero columns, so every core has the size asked)
        U = np.pad(U[:, :r], ((0, 0), (0, want - r)))
        C = np.pad(S[:r, None] * V[:r], ((0, want - r), (0, 0)))
        cores.append(U.reshape(rank, sizes[k], want))
        rank = want
    cores.append(C.reshape(rank, sizes[-1], 1))
    return np.concatenate([c.ravel() for c in cores])


def matrix_to_tt(W, inp_sizes, out_sizes, tt_ranks):
    """The TT cores of the [prod(inp), prod(out)] matrix ``W`` (exact when the ranks allow)."""
    inp_sizes, out_sizes = list(inp_sizes), list(out_sizes)
    d = len(inp_sizes)
    # interleave (i_1, o_1, i_2, o_2, ...) so each core holds one (input, output) pair
    t = np.asarray(W).reshape(inp_sizes + out_sizes)
    t = t.transpose([x for k in range(d) for x in (k, d + k)])
    return tt_svd(t, [inp_sizes[k] * out_sizes[k] for k in range(d)], tt_ranks)


def tt_to_matrix(cores, inp_sizes, out_sizes, tt_ranks):
    """The matrix the flat ``cores`` stand for (the inverse of matrix_to_tt)."""
    d = len(inp_sizes)
    at, out = 0, np.ones((1, 1, 1))
    for k in range(d):
        r0, r1 = int(tt_ranks[k]), int(tt_ranks[k + 1])
        n = r0 * inp_sizes[k] * out_sizes[k] * r1
        core = np.asarray(cores[at:at + n]).reshape(r0, inp_sizes[k], out_sizes[k], r1)
        at += n
        out = np.einsum("abr,rcds->acbds", out, core).reshape(out.shape[0] * inp_sizes[k],
                                                                out.shape[1] * out_sizes[k], r1)
    return out.reshape(int(np.prod(inp_sizes)), int(np.prod(out_sizes)))
