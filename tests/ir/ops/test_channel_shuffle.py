"""ChannelShuffle and its gradient (ir/ops/spatial.py), ShuffleNet's channel mixing.

The figures were read off the real Caffe2 (torch 1.10.2's caffe2.python through
shared/tools/caffe2-ref/run.sh): X = arange(24) as [2, 6, 2, 1] (NCHW) or its NHWC transpose,
group=2, in ``loss = SumElements(ChannelShuffle(X) * w)`` with w = arange(24) in X's shape,
``AddGradientOperators([loss])``; Y and X_grad printed flat.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError

f32 = np.float32
X = np.arange(24, dtype=f32).reshape(2, 6, 2, 1)
CAFFE2 = {
    "NCHW": ([0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, 12, 13, 18, 19, 14, 15, 20, 21, 16, 17, 22, 23],
             [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11, 12, 13, 16, 17, 20, 21, 14, 15, 18, 19, 22, 23]),
    "NHWC": ([0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11, 12, 18, 14, 20, 16, 22, 13, 19, 15, 21, 17, 23],
             [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11, 12, 14, 16, 13, 15, 17, 18, 20, 22, 19, 21, 23]),
}


def _run(backend, x, **args):
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("w", np.arange(x.size, dtype=f32).reshape(x.shape))
    net = core.Net("shuffle")
    y = net.ChannelShuffle(["X"], ["Y"], **args)
    net.AddGradientOperators([net.SumElements([net.Mul([y, "w"], "yw")], "loss")])
    workspace.current().run(net, backend=backend)
    return workspace.FetchBlob("Y"), workspace.FetchBlob("X_grad")


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_shuffle_and_gradient_are_caffe2s(backend, order):
    x = X if order == "NCHW" else np.ascontiguousarray(X.transpose(0, 2, 3, 1))
    y, dx = _run(backend, x, group=2, order=order)
    assert y.shape == x.shape and y.dtype == f32
    assert y.ravel().tolist() == CAFFE2[order][0]
    assert dx.ravel().tolist() == CAFFE2[order][1]


def test_shuffle_is_the_reshape_transpose_and_its_gradient_undoes_it(backend):
    """Independent reference: channels as [G, K] transposed to [K, G]; the gradient of
    SumElements(Y * w) is w shuffled back, so shuffling it again gives w."""
    x = np.random.RandomState(0).rand(3, 12, 4, 5).astype(f32)
    y, dx = _run(backend, x, group=3)
    np.testing.assert_array_equal(y, x.reshape(3, 3, 4, 20).transpose(0, 2, 1, 3).reshape(x.shape))
    w = np.arange(x.size, dtype=f32).reshape(x.shape)
    np.testing.assert_array_equal(dx.reshape(3, 3, 4, 20).transpose(0, 2, 1, 3).reshape(x.shape), w)


def test_a_group_that_does_not_divide_the_channels_is_an_error():
    with pytest.raises(DSLError, match="5 channels do not split into group=2"):
        _run("interp", np.ones((1, 5, 2, 2), f32), group=2)


def test_an_empty_batch_shuffles_to_an_empty_batch(backend):
    y, dx = _run(backend, np.zeros((0, 4, 3, 3), f32), group=2)  # (Caffe2's own test draws N = 0)
    assert y.shape == (0, 4, 3, 3) and dx.shape == (0, 4, 3, 3)
