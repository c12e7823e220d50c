"""The numba backend's training kernels: whole steps compiled, answers equal the interpreter's.

Each program runs on interp and on numba with every training island compiled (the
size threshold set to 0); results must agree to float32 rounding, and the numba
summary must show the training ops compiled, not interpreted.
"""
import numpy as np
import pytest

from dslc import brew, optimizer, workspace
from dslc.backends.numba import islands
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

B, D_IN, D_HID, D_OUT = 32, 8, 16, 5


def feed(ws):
    rng = np.random.default_rng(11)
    ws.feed_blob("data", rng.normal(size=(B, D_IN)).astype(np.float32))
    ws.feed_blob("label", rng.integers(0, D_OUT, B).astype(np.int32))
    ws.feed_blob("target", rng.normal(size=(B, D_OUT)).astype(np.float32))


def softmax_loss_momentum():
    model = ModelHelper(name="m")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "r1")
    fc2 = brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT)
    sm, loss = model.net.SoftmaxWithLoss([fc2, "label"], ["sm", "loss"])
    model.net.Accuracy([sm, "label"], "accuracy")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.2, momentum=0.9)
    return model, ["loss", "accuracy", "fc1_w", "fc2_b", "fc1_w_momentum"]


def tanh_sigmoid_l2():
    model = ModelHelper(name="m")
    h = brew.tanh(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "t1")
    s = brew.sigmoid(model, brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT), "s2")
    mm = model.net.MatMul([s, "target"], "mm", trans_b=1)
    d = model.net.SquaredL2Distance([s, "target"], "d")
    loss = model.net.AveragedLoss(d, "loss")
    model.net.AveragedLoss(mm, "mm_mean")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.5)
    return model, ["loss", "mm_mean", "fc1_w", "fc2_w", "fc2_b"]


def run(backend, build, steps=5):
    ws = workspace.Workspace()
    feed(ws)
    model, fetch = build()
    s = LocalSession(ws, backend=backend)
    s.run(model.param_init_net)
    out = []
    for _ in range(steps):
        s.run(model.net)
        out.append([np.array(ws.fetch_blob(b)) for b in fetch])
    return out, s, model


@pytest.mark.parametrize("build", [softmax_loss_momentum, tanh_sigmoid_l2])
def test_compiled_step_equals_interp(monkeypatch, build):
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    want, _, _ = run("interp", build)
    got, s, model = run("numba", build)
    for w_step, g_step in zip(want, got):
        for w, g in zip(w_step, g_step):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    summary = s.compile(model.net).program.summary()
    assert summary["ops compiled"] >= 8, summary
    assert not any(why.startswith("FC") for why in summary["ops interpreted, and why"]), summary


def test_small_steps_stay_interpreted():
    # below the size threshold a straight-line step is not worth numba's compile time
    _, s, model = run("numba", softmax_loss_momentum, steps=1)
    assert s.compile(model.net).program.summary()["ops compiled"] == 0
