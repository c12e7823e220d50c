"""YellowFin (ir/ops/yellowfin.py, its numba kernel, optimizer.YellowFinOptimizer) against
the real Caffe2 (torch 1.10.2's caffe2, /tmp/caffe2-venv).

Caffe2's figures come from running the same steps there: the op through
``workspace.RunOperatorOnce`` in place, five steps of the gradients below with iter = 1..5,
and the state fetched with ``.tolist()``; the model through ``build_yellowfin`` on the
linear model below, 30 ``RunNet`` with the rows in order.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

STATE = ["p", "m", "lr", "mu", "cw", "ga", "g2a", "sm"]
P0 = np.array([[0.5, -1.0, 2.0], [0.25, 1.5, -0.75]], np.float32)
G0 = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], np.float32)

# Caffe2's state after the five steps (beta 0.9, epsilon 1e-6, curv_win_width 3)
CAFFE2_AVERAGES = {  # (the same for both settings: the averages do not see nesterov or the debiasing)
    "cw": [4.925894260406494, 5.234195232391357, 4.561251163482666],
    "ga": [[-0.23511506617069244, 0.4702301323413849, -0.11755753308534622],
           [-0.705345094203949, -0.05877876654267311, 0.23511506617069244]],
    "g2a": [[2.980473041534424, 11.921892166137695, 0.745118260383606],
            [26.82425880432129, 0.1862795650959015, 2.980473041534424]],
    "sm": [4.174183368682861, 45.63849639892578, 1.603449821472168, 1.868425726890564, 0.04985261335968971]}
CAFFE2_STEPS = {
    (0, 1): {"p": [[0.6799969673156738, -1.3599939346313477, 2.089998722076416],
                   [0.7899909615516663, 1.5449992418289185, -0.9299969673156738]],
             "m": [[-0.2440401017665863, 0.4880802035331726, -0.12202005088329315],
                   [-0.7321203351020813, -0.061010025441646576, 0.2440401017665863]],
             "lr": [0.06759794801473618], "mu": [0.09504857659339905]},
    (1, 0): {"p": [[0.7205953598022461, -1.4411907196044922, 2.110297679901123],
                   [0.9117863178253174, 1.555148959159851, -0.9705953598022461]],
             "m": [[-0.20717072486877441, 0.41434144973754883, -0.10358536243438721],
                   [-0.621512234210968, -0.051792681217193604, 0.20717072486877441]],
             "lr": [0.06614258885383606], "mu": [0.29656556248664856]},
}


def _yellowfin_net(nesterov, zero_debias, width=3):
    net = core.Net("yellowfin")
    net.YellowFin(STATE + ["g", "it"], STATE, beta=0.9, epsilon=1e-6, curv_win_width=width, nesterov=nesterov,
                  zero_debias=zero_debias)
    return net


def _start(ws, width=3):
    for name, value in zip(STATE, [P0, np.zeros_like(P0), np.array([0.1], np.float32), np.array([0.0], np.float32),
                                   np.zeros(width, np.float32), np.zeros_like(P0), np.zeros_like(P0),
                                   np.zeros(5, np.float32)]):
        ws.feed_blob(name, value)


@pytest.mark.parametrize("nesterov,zero_debias", [(0, 1), (1, 0)])
def test_five_steps_give_caffe2s_state(backend, nesterov, zero_debias):
    ws = workspace.Workspace()
    _start(ws)
    net = _yellowfin_net(nesterov, zero_debias)
    s = LocalSession(ws, backend=backend)
    for t in range(1, 6):  # (the window of 3 wraps around; lr and mu move from t = 2)
        ws.feed_blob("g", (G0 * (1 + 0.5 * t) * (-1) ** t).astype(np.float32))
        ws.feed_blob("it", np.array([t], np.int64))
        s.run(net)
    want = dict(CAFFE2_AVERAGES, **CAFFE2_STEPS[(nesterov, zero_debias)])
    for name in STATE:
        got = ws.fetch_blob(name)
        assert got.dtype == np.float32, name
        np.testing.assert_allclose(got, want[name], rtol=2e-6, err_msg=name)
    if backend == "numba":  # (the compiled kernel ran, not the interpreter's)
        summary = s.compile(net).program.summary()
        assert summary["ops compiled"] == 1 and summary["regions compiled"][0].startswith("from YellowFin"), summary


def test_an_iteration_below_one_is_a_located_error(backend):
    """Caffe2 writes curv_win[-1] at iter 0 (out of bounds); dslc says what to do."""
    ws = workspace.Workspace()
    _start(ws)
    ws.feed_blob("g", G0)
    ws.feed_blob("it", np.array([0], np.int64))
    with pytest.raises(DSLError, match="counts from 1") as e:
        LocalSession(ws, backend=backend).run(_yellowfin_net(0, 1))
    assert "test_yellowfin.py" in str(e.value)


def test_a_window_of_another_width_is_a_type_error():
    ws = workspace.Workspace()
    _start(ws, width=4)
    ws.feed_blob("g", G0)
    ws.feed_blob("it", np.array([1], np.int64))
    with pytest.raises(DSLError, match=r"curv_win \(input 4\) must hold 3 values"):
        LocalSession(ws).run(_yellowfin_net(0, 1, width=3))


def _linear_model():
    """Caffe2's optimizer-test model: fc of 5 binary features, squared loss."""
    perfect = np.array([2, 6, 5, 0, 1], np.float32)
    data = np.random.RandomState(123).randint(2, size=(20, 5)).astype(np.float32)
    model = ModelHelper(name="yf")
    out = brew.fc(model, "data", "fc", 5, 1, ("ConstantFill", {}), ("ConstantFill", {}), axis=0)
    model.AddGradientOperators([model.AveragedLoss(model.SquaredL2Distance([out, "label"]), "avg_loss")])
    return model, data, np.dot(data, perfect)[:, np.newaxis]


def test_build_yellowfin_trains_as_caffe2(backend):
    model, data, label = _linear_model()
    opt = optimizer.build_yellowfin(model, base_learning_rate=0.1, curv_win_width=5)
    assert [op.type for op in model.net.Proto().op][-3:] == ["AtomicIter", "YellowFin", "YellowFin"]  # Caffe2's
    assert [str(b) for b in opt.get_auxiliary_parameters().local[:7]] == [
        "fc_w_moment", "fc_w_lr_avg", "fc_w_mu_avg", "fc_w_curv_win", "fc_w_g_avg", "fc_w_g2_avg",
        "fc_w_scalars_memory"]  # Caffe2's
    assert [str(b) for b in opt.get_auxiliary_parameters().shared] == ["optimizer_iteration"]
    ws = workspace.Workspace()
    ws.feed_blob("data", data[0])
    ws.feed_blob("label", label[0])
    s = LocalSession(ws, backend=backend)
    s.run(model.param_init_net)
    for k in range(30):
        ws.feed_blob("data", data[k % 20])
        ws.feed_blob("label", label[k % 20])
        s.run(model.net)
    # Caffe2, the same 30 steps
    np.testing.assert_allclose(ws.fetch_blob("fc_w"), [[1.1141504049301147, 3.1582236289978027, 2.1488142013549805,
                                                        1.2458890676498413, 0.9900689125061035]], rtol=2e-6)
    np.testing.assert_allclose(ws.fetch_blob("fc_b"), [2.4051172733306885], rtol=2e-6)
    np.testing.assert_allclose([ws.fetch_blob(b)[0] for b in ("fc_w_lr_avg", "fc_w_mu_avg", "fc_b_lr_avg",
                                                              "fc_b_mu_avg")],
                               [0.09740965813398361, 0.016441693529486656, 0.09786342084407806,
                                0.015189606696367264], rtol=2e-6)
    np.testing.assert_allclose(ws.fetch_blob("fc_w_scalars_memory"),
                               [0.10120876878499985, 0.5811119675636292, -0.004166814032942057,
                                0.11214340478181839, 0.004706663079559803], rtol=2e-6)
    assert ws.fetch_blob("optimizer_iteration").tolist() == [30]


def test_yellowfin_refuses_what_caffe2_refuses():
    """A sparse gradient (Caffe2 asserts), and a gradient of the op (Caffe2: 'One should not
    call gradient for operator YellowFin')."""
    model = ModelHelper(name="yf_sparse")
    w = model.param_init_net.ConstantFill([], "w", shape=[4], value=0.0)
    model.params.append(w)
    loss = model.AveragedLoss(model.SquaredL2Distance([model.net.Gather([w, "idx"], "picked"), "y"]), "loss")
    model.AddGradientOperators([loss])
    with pytest.raises(DSLError, match="dense gradient") as e:
        optimizer.build_yellowfin(model)
    assert "test_yellowfin.py" in str(e.value)
    op = _yellowfin_net(0, 1).Proto().op[0]
    with pytest.raises(DSLError, match="YellowFin has no gradient"):
        core.GradientRegistry.GetGradientForOp(op, [f"{b}_grad" for b in op.output])
