"""Gradients nobody reads are not computed, yet their blobs exist as Caffe2 makes them.

Caffe2's FCGradient always writes dX: after a training net's RunNet, the real Caffe2
(torch 1.10.2's caffe2.python, a brew MLP "data" -> fc -> relu -> fc ->
SoftmaxWithLoss, AddGradientOperators, build_sgd) lists ``data_grad`` among
``workspace.Blobs()`` and ``FetchBlob("data_grad")`` has the shape of ``data``. With the
default pipeline, dce turns that store into a ``defer``: the value is computed when read.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, model_helper, optimizer, workspace
from dslc.runtime.workspace import Cell, materialize_all
from dslc.session import LocalSession


def _mlp():
    m = model_helper.ModelHelper(name="mlp")
    h = brew.fc(m, "data", "fc0", dim_in=4, dim_out=3)
    h = brew.relu(m, h, "r0")
    h = brew.fc(m, h, "fc1", dim_in=3, dim_out=2)
    _, loss = m.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, 0.1)
    return m


@pytest.mark.parametrize("backend", ["interp", "numba", "xla"], indirect=True)
def test_data_grad_is_deferred_and_right(backend, default_pipeline):
    ws = workspace.C.Workspace.current
    rng = np.random.default_rng(0)
    ws.feed_blob("data", rng.normal(size=(5, 4)).astype(np.float32))
    ws.feed_blob("label", np.array([0, 1, 1, 0, 1], np.int32))
    m = _mlp()
    s = LocalSession(ws, backend=backend)
    s.run(m.param_init_net)
    w0 = ws.fetch_blob("fc0_w")  # (the step updates it: dX is of the weights before)
    s.run(m.net)
    assert type(ws.lookup("data_grad")).__name__ == "DeferredBlob"  # not computed yet
    assert "data_grad" in workspace.Blobs()
    ws.blobs["fc0_grad"].tensor().data[:] += 1.0  # a write in place: pending values are computed first
    assert type(ws.lookup("data_grad")).__name__ == "Blob"
    want = (ws.fetch_blob("fc0_grad") - 1.0) @ w0  # FC: dX = dY W
    np.testing.assert_allclose(ws.fetch_blob("data_grad"), want, rtol=1e-5, atol=1e-6)


def test_a_deferred_cell_computes_once_and_a_write_replaces_it():
    calls = []

    def f(a, b):
        calls.append(1)
        return a + b

    c = Cell("x")
    c.defer(f, 1, 2)
    assert not calls and type(c) is not Cell
    assert c.v == 3 and c.v == 3 and len(calls) == 1 and type(c) is Cell
    c.defer(f, 1, 2)
    c.v = 7  # a store before anyone read it: f never runs
    assert c.v == 7 and len(calls) == 1 and type(c) is Cell
    c.defer(f, 2, 2)
    materialize_all()
    assert len(calls) == 2 and type(c) is Cell and c.v == 4


def _conv_dx(dy, w):
    """dX of a stride-1, unpadded convolution by its definition: each output position
    scatters dY times the kernel back onto the window it read."""
    n, m, ho, wo = dy.shape
    _, c, kh, kw = w.shape
    dx = np.zeros((n, c, ho + kh - 1, wo + kw - 1))
    for i in range(kh):
        for j in range(kw):
            dx[:, :, i:i + ho, j:j + wo] += np.einsum("nmhw,mc->nchw", dy, w[:, :, i, j])
    return dx


@pytest.mark.parametrize("backend", ["interp", "numba", "xla"], indirect=True)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_data_grad_is_deferred_and_right(backend, bias, default_pipeline):
    # LeNet's case: ConvGradient's dX (optional as FCGradient's, with or without a bias) of
    # the data nobody reads
    ws = workspace.C.Workspace.current
    rng = np.random.default_rng(1)
    ws.feed_blob("data", rng.normal(size=(2, 2, 6, 6)).astype(np.float32))
    ws.feed_blob("label", np.array([0, 1], np.int32))
    m = model_helper.ModelHelper(name="convnet")
    c = brew.conv(m, "data", "conv", dim_in=2, dim_out=3, kernel=3, no_bias=not bias)
    h = brew.fc(m, brew.relu(m, c, "r"), "fc", dim_in=3 * 4 * 4, dim_out=2)
    _, loss = m.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, 0.1)
    s = LocalSession(ws, backend=backend)
    s.run(m.param_init_net)
    w0 = ws.fetch_blob("conv_w")
    s.run(m.net)
    assert type(ws.lookup("data_grad")).__name__ == "DeferredBlob"
    np.testing.assert_allclose(ws.fetch_blob("data_grad"), _conv_dx(ws.fetch_blob("conv_grad"), w0),
                               rtol=1e-5, atol=1e-6)
    assert ("conv_b_grad" in workspace.Blobs()) == bias
