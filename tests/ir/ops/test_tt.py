"""Tensor-train layers (ir/ops/tt.py): TT and TTSparseLengthsSum with its gradient; the cores
of dslc.tt_core in Caffe2's layout.

Figures read off the real Caffe2 (torch 1.10.2's caffe2.python, caffe2-ref run.sh) running the
same program: random operands from RandomState(1) drawn in the order below, printed rounded to
1e-5; the gradients of ``loss = SumElements(Y * w)`` after ``AddGradientOperators([loss])``.
Independent checks: TT with exact-rank cores of W equals FC with W; the gradient equals
finite differences.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, tt_core, workspace
from dslc.ir.diagnostics import DSLError

f32 = np.float32
RS = np.random.RandomState(1)
INP, OUT, RANKS = [2, 3, 2], [3, 2, 2], [1, 2, 3, 1]
CORES = RS.standard_normal(sum(INP[k] * RANKS[k + 1] * RANKS[k] * OUT[k] for k in range(3))).astype(f32)
X = RS.standard_normal((2, 12)).astype(f32)
TT_Y = [[1.09761, -3.56244, -8.79244, 14.10695, -4.35923, 6.0491, -2.31081, 2.5829, 1.37983, 5.47147, -6.99055, 6.5163]]
FI, FJ, RK = [3, 2, 2], [2, 1, 2], [1, 2, 3, 1]
TT_CORES = [RS.standard_normal((FI[k], RK[k], FJ[k], RK[k + 1])).astype(f32) for k in range(3)]
IDX, LENGTHS = np.array([5, 0, 11, 7, 5], np.int64), np.array([2, 0, 3], np.int32)
W = RS.standard_normal((3, 4)).astype(f32)
SLS_Y = [[1.96414, -1.13765, -0.04411, -0.23586], [0.0] * 4, [4.71478, 1.13992, -2.15507, -0.18522]]
DCORES = [
    [[[[-0.40291, 0.87139], [0.42535, -0.43765]]], [[[1.09029, -1.69585], [0.07104, -0.48133]]],
     [[[2.02229, 2.06487], [0.90532, 0.68098]]]],
    [[[[0.86557, 1.72949, -0.12107]], [[-1.72553, -1.79255, -1.35819]]],
     [[[0.66398, -0.17236, 0.49423]], [[0.81955, -0.23661, 1.28952]]]],
    [[[[1.14787], [1.18843]], [[0.93768], [0.00434]], [[-0.7178], [1.06705]]],
     [[[-0.56602], [0.48018]], [[1.38339], [-1.20009]], [[-2.60071], [2.64608]]]],
]



def _tt(backend, x, b, cores, inp, out, ranks):
    for n, v in (("X", x), ("b", b), ("cores", cores)):
        workspace.FeedBlob(n, v)
    net = core.Net("tt")
    net.TT(["X", "b", "cores"], ["Y"], inp_sizes=inp, out_sizes=out, tt_ranks=ranks)
    workspace.current().run(net, backend=backend)
    return workspace.FetchBlob("Y")


def test_tt_is_caffe2s(backend):
    """Caffe2's figure is for X's first row alone: for a batch over 1 its TT scrambles the rows
    (it transposes the [outputs, batch] result as if the batch came first; docs/differences.md).
    Here each row of a batch gets what it gets alone."""
    b = np.arange(12, dtype=f32) / 10
    y = _tt(backend, X[:1], b, CORES, INP, OUT, RANKS)
    assert y.dtype == f32 and y.shape == (1, 12)
    np.testing.assert_allclose(y, TT_Y, rtol=1e-5, atol=1e-5)
    both = _tt(backend, X, b, CORES, INP, OUT, RANKS)
    np.testing.assert_allclose(both, np.concatenate([_tt(backend, X[i:i + 1], b, CORES, INP, OUT, RANKS)
                                                     for i in range(2)]), rtol=1e-6, atol=1e-6)


def test_tt_of_full_rank_cores_is_the_fc():
    """matrix_to_tt at ranks that lose nothing: TT(X) = X W^T + b, the FC of W."""
    rs = np.random.RandomState(2)
    w, x, b = rs.rand(16, 16).astype(f32), rs.rand(3, 16).astype(f32), rs.rand(16).astype(f32)
    cores = tt_core.matrix_to_tt(w, [4, 4], [4, 4], [1, 16, 1])
    np.testing.assert_allclose(_tt("interp", x, b, cores, [4, 4], [4, 4], [1, 16, 1]), x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_init_tt_cores_are_caffe2s():
    # Caffe2's init_tt_cores([2, 3], [2, 2], [1, 2, 1])[:6] (it seeds numpy's generator with 1234)
    np.testing.assert_array_equal(tt_core.init_tt_cores([2, 3], [2, 2], [1, 2, 1])[:6],
                                  np.array([-0.00724030751734972, 0.022362928837537766, -0.022003531455993652,
                                            -0.014389310963451862, 0.01106681115925312, -0.010940417647361755], f32))


def _sls(backend, cores, with_grad=True, idx=IDX):
    for n, v in (("c0", cores[0]), ("c1", cores[1]), ("c2", cores[2]), ("idx", idx), ("len", LENGTHS), ("w", W)):
        workspace.FeedBlob(n, v)
    net = core.Net("ttsls")
    y, *_ = net.TTSparseLengthsSum(["c0", "c1", "c2", "idx", "len"], ["Y", "o0", "o1", "ind"], factor_i=FI,
                                   factor_j=FJ, ranks=RK, emb_size=4)
    if with_grad:
        net.AddGradientOperators([net.SumElements([net.Mul([y, "w"], "yw")], "loss")])
    workspace.current().run(net, backend=backend)
    return workspace.FetchBlob("Y")


def test_tt_sparse_lengths_sum_and_gradient_are_caffe2s(backend):
    np.testing.assert_allclose(_sls(backend, TT_CORES), SLS_Y, rtol=1e-5, atol=1e-5)
    # id = i0 + 3 (i1 + 2 i2): 5 -> (2, 1, 0), 11 -> (2, 1, 1), 7 -> (1, 0, 1)
    assert workspace.FetchBlob("ind").tolist() == [[2, 1, 0], [0, 0, 0], [2, 1, 1], [1, 0, 1], [2, 1, 0]]
    for k in range(3):
        np.testing.assert_allclose(workspace.FetchBlob(f"c{k}_grad"), DCORES[k], rtol=1e-5, atol=1e-5)


def test_tt_sparse_lengths_sum_gradient_is_finite_differences():
    _sls("interp", TT_CORES)
    got = [workspace.FetchBlob(f"c{k}_grad") for k in range(3)]
    for k in range(3):
        flat = TT_CORES[k].astype(np.float64).ravel()
        for at in range(0, flat.size, 3):
            losses = []
            for h in (1e-2, -1e-2):
                moved = [c.copy() for c in TT_CORES]
                moved[k] = (flat + h * (np.arange(flat.size) == at)).reshape(TT_CORES[k].shape).astype(f32)
                losses.append(float((_sls("interp", moved, with_grad=False).astype(np.float64) * W).sum()))
            assert got[k].ravel()[at] == pytest.approx((losses[0] - losses[1]) / 2e-2, rel=2e-2, abs=2e-2)


def test_bad_tt_arguments_are_errors():
    with pytest.raises(DSLError, match="emb_size 5 is not J0 J1 J2 = 4"):
        for n, v in (("c0", TT_CORES[0]), ("c1", TT_CORES[1]), ("c2", TT_CORES[2]), ("idx", IDX), ("len", LENGTHS)):
            workspace.FeedBlob(n, v)
        net = core.Net("bad")
        net.TTSparseLengthsSum(["c0", "c1", "c2", "idx", "len"], ["Y", "o0", "o1", "ind"], factor_i=FI, factor_j=FJ,
                               ranks=RK, emb_size=5)
        workspace.RunNetOnce(net)
    with pytest.raises(DSLError, match="id 12 is outside the table of I0 I1 I2 = 12 rows"):
        _sls("interp", TT_CORES, with_grad=False, idx=np.array([12, 0, 1, 2, 3], np.int64))
    with pytest.raises(DSLError, match="X has 10 features, the product of inp_sizes is 12"):
        _tt("interp", np.ones((1, 10), f32), np.zeros(12, f32), CORES, INP, OUT, RANKS)
