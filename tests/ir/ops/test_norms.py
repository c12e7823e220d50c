"""LpNorm (and its gradient), EnsureClipped and TopK: the ops Caffe2's regularizers record.

Expected values were read off the real Caffe2 (torch 1.10.2's caffe2.python, through
shared/tools/caffe2-ref/run.sh), running each op once on the inputs below; they agree with
the hand figures in the comments."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError

X = np.array([[1., -2.], [0., 3.]], np.float32)


def _run(backend, *ops):
    net = core.Net("norms")
    for op in ops:
        net.Proto().op.extend([op])
    workspace.current().run(net, backend=backend)


@pytest.mark.parametrize("p,average,norm,grad", [
    (1, False, 6.0, [[2., -2.], [0., 2.]]),      # |1|+|-2|+|0|+|3|; dX = sign(X) dY, dY = 2
    (1, True, 1.5, [[.5, -.5], [0., .5]]),
    (2, False, 14.0, [[4., -8.], [0., 12.]]),    # 1+4+0+9 (squared); dX = 2 X dY
    (2, True, 3.5, [[1., -2.], [0., 3.]]),
])
def test_lp_norm_and_gradient(backend, p, average, norm, grad):
    workspace.FeedBlob("x", X)
    workspace.FeedBlob("dy", np.array([2.], np.float32))
    _run(backend, core.CreateOperator("LpNorm", ["x"], ["y"], p=p, average=average),
         core.CreateOperator("LpNormGradient", ["x", "dy"], ["dx"], p=p, average=average))
    y = workspace.FetchBlob("y")
    assert y.shape == (1,) and y.dtype == np.float32 and y[0] == norm
    assert workspace.FetchBlob("dx").tolist() == grad


def test_lp_norm_gradient_through_autodiff_is_finite_differences():
    x = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    net = core.Net("g")
    net.LpNorm(["x"], ["y"], p=2)
    net.AddGradientOperators(["y"])
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), 2 * x, rtol=1e-6)


def test_ensure_clipped_dense_and_sparse(backend):
    workspace.FeedBlob("w", np.array([[-1., .5], [2., 0.]], np.float32))
    _run(backend, core.CreateOperator("EnsureClipped", ["w"], ["w"], min=0.0, max=1.0))
    assert workspace.FetchBlob("w").tolist() == [[0., .5], [1., 0.]]
    # with a sparse gradient only its rows (here row 2) are clipped
    workspace.FeedBlob("w", np.array([[-1., .5], [2., 0.], [3., -3.]], np.float32))
    workspace.FeedBlob("i", np.array([2], np.int64))
    workspace.FeedBlob("g", np.array([[1., 1.]], np.float32))
    _run(backend, core.CreateOperator("EnsureClipped", ["w", "i", "g"], ["w"], min=0.0, max=1.0))
    assert workspace.FetchBlob("w").tolist() == [[-1., .5], [2., 0.], [1., 0.]]


def test_top_k(backend):
    workspace.FeedBlob("a", np.array([[3., 1., 2.], [.5, 4., 1.]], np.float32))
    _run(backend, core.CreateOperator("TopK", ["a"], ["v", "ix", "fl"], k=2))
    assert workspace.FetchBlob("v").tolist() == [[3., 2.], [4., 1.]]
    assert workspace.FetchBlob("ix").tolist() == [[0, 2], [1, 2]] and workspace.FetchBlob("ix").dtype == np.int64
    assert workspace.FetchBlob("fl").tolist() == [0, 2, 4, 5]
    workspace.FeedBlob("a1", np.array([3., 1., 2.], np.float32))
    _run(backend, core.CreateOperator("TopK", ["a1"], ["v1", "ix1"], k=2))
    assert workspace.FetchBlob("v1").tolist() == [3., 2.] and workspace.FetchBlob("ix1").tolist() == [0, 2]


def test_top_k_larger_than_the_row_is_a_located_error():
    workspace.FeedBlob("a", np.zeros((2, 3), np.float32))
    net = core.Net("bad")
    net.TopK(["a"], ["v", "i"], k=5)
    with pytest.raises(DSLError, match="TopK k=5"):
        workspace.RunNetOnce(net)


W = np.array([[3., 4.], [.3, .4], [1., 0.], [6., 8.]], np.float32)


@pytest.mark.parametrize("use_max_norm,expected", [
    (True, [[.6, .8], [.3, .4], [1., 0.], [6., 8.]]),   # row 0 (norm 5) scaled to 1, row 1 (0.5) kept
    (False, [[.6, .8], [.6, .8], [1., 0.], [6., 8.]]),  # both listed rows scaled to 1 (row 1 twice: same)
])
def test_sparse_normalize(backend, use_max_norm, expected):
    workspace.FeedBlob("w", W)
    workspace.FeedBlob("i", np.array([0, 1, 1], np.int64))
    _run(backend, core.CreateOperator("SparseNormalize", ["w", "i"], ["w"], use_max_norm=use_max_norm, norm=1.0))
    np.testing.assert_allclose(workspace.FetchBlob("w"), expected, rtol=1e-6)


def test_float16_sparse_normalize_rounds_the_factor_as_caffe2(backend):
    workspace.FeedBlob("w", W.astype(np.float16))
    workspace.FeedBlob("i", np.array([0, 3], np.int64))
    _run(backend, core.CreateOperator("Float16SparseNormalize", ["w", "i"], ["w"], use_max_norm=True, norm=2.0))
    out = workspace.FetchBlob("w")
    assert out.dtype == np.float16
    # 3 * fp16(0.4) = 3 * 0.39990234375 -> 1.19921875 (Caffe2's figure; 1.2 itself would round up)
    assert out.tolist() == [[1.19921875, 1.599609375], [0.300048828125, 0.39990234375], [1.0, 0.0],
                            [1.19921875, 1.599609375]]


@pytest.mark.parametrize("p,expected", [
    (1.0, [[2.5, 3.5], [.3, .4], [.5, 0.], [6., 8.]]),  # rows 0, 2 soft-thresholded by 0.5
    (2.0, [[1.5, 2.], [.3, .4], [.5, 0.], [6., 8.]]),   # rows 0, 2 scaled by 1 - 0.5
])
def test_sparse_lp_regularizer(backend, p, expected):
    workspace.FeedBlob("w", W)
    workspace.FeedBlob("i", np.array([0, 2], np.int64))
    _run(backend, core.CreateOperator("SparseLpRegularizer", ["w", "i"], ["w"], p=p, reg_lambda=0.5))
    np.testing.assert_allclose(workspace.FetchBlob("w"), expected, rtol=1e-6)
