"""The update ops of RMSProp, FTRL, Adadelta, momentum SGD (dense and sparse) and sparse Adam,
and the builders that use them: each recovers a linear model's weights.

Figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2, the same
inputs through workspace.RunOperatorOnce, printed with .tolist()).
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc import hypothesis_test_util as hu
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

G = np.array([0.5, -1.0, 2.0], np.float32)
W = np.array([1.0, 2.0, -1.0], np.float32)
MS = np.array([0.1, 0.2, 0.3], np.float32)
MOM = np.array([0.0, 0.5, -0.5], np.float32)
LR = np.array([0.1], np.float32)
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])


def _run(do, op_type, inputs, outputs, **args):
    outs = hu.runOpOnInput(do, core.CreateOperator(op_type, list(inputs), outputs, **args), list(inputs.values()))
    return [o.tolist() for o in outs]


@DEVICES
def test_dense_updates_match_caffe2(do):
    got = _run(do, "RmsProp", {"g": G, "ms": MS, "mom": MOM, "lr": LR}, ["go", "mso", "momo"], decay=0.9,
               momentum=0.5, epsilon=1e-5)
    step = [0.1474355310201645, 0.06102113425731659, -0.005662962794303894]
    np.testing.assert_allclose(got, [step, [0.115, 0.28, 0.67], step], rtol=1e-6)  # Caffe2
    got = _run(do, "MomentumSGD", {"g": G, "mom": MOM, "lr": LR}, ["go", "momo"], momentum=0.9, nesterov=1)
    np.testing.assert_allclose(got, [[0.095, 0.215, -0.025], [0.05, 0.35, -0.25]], rtol=1e-5, atol=1e-7)  # Caffe2
    nz = np.array([[0.1, 0.2], [0.3, 0.4], [0.0, 1.0]], np.float32)
    got = _run(do, "Ftrl", {"w": W, "nz": nz, "g": G}, ["wo", "nzo"], alpha=0.1, beta=1.0, lambda1=0.001, lambda2=0.01)
    np.testing.assert_allclose(got[0], [0.1288956254720688, 0.5813655257225037, -0.766377866268158], rtol=1e-6)
    np.testing.assert_allclose(got[1], [[0.35, -2.053802013397217], [1.3, -12.449056625366211], [4.0, 23.0]],
                               rtol=1e-6)  # Caffe2
    got = _run(do, "Adadelta", {"w": W, "ms": MS, "d": np.array([0.2, 0.1, 0.05], np.float32), "g": G, "lr": LR},
               ["wo", "mso", "do"], epsilon=1e-4, decay=0.95)
    np.testing.assert_allclose(got, [[1.068184733390808, 1.9354314804077148, -0.9357262849807739],
                                     [0.1075, 0.24, 0.485],
                                     [0.21324582397937775, 0.11584548652172089, 0.06815553456544876]],
                               rtol=1e-6)  # Caffe2


@DEVICES
def test_adagrads_optional_outputs_match_caffe2(do):
    """Adagrad may also name the effective learning rate lr / (sqrt(m') + eps) and the update."""
    ins = {"p": np.array([1., 2., 3.], np.float32), "m": np.array([0.5, 0.1, 0.], np.float32),
           "g": np.array([0.5, -1., 2.], np.float32), "lr": np.array([-0.1], np.float32)}
    got = _run(do, "Adagrad", ins, ["p1", "m1", "e1", "u1"], epsilon=1e-5, decay=0.9)
    np.testing.assert_allclose(got, [[0.9402393102645874, 2.0957818031311035, 2.90000057220459],
                                     [0.699999988079071, 1.090000033378601, 4.0],
                                     [-0.11952143162488937, -0.09578170627355576, -0.04999975115060806],
                                     [-0.05976071581244469, 0.09578170627355576, -0.09999950230121613]],
                               rtol=1e-6)  # Caffe2
    got = _run(do, "Adagrad", ins, ["p1", "m1", "e1"], epsilon=1e-5)
    np.testing.assert_allclose(got, [[0.9422656297683716, 2.0953452587127686, 2.90000057220459],
                                     [0.75, 1.100000023841858, 4.0],
                                     [-0.11546872556209564, -0.09534535557031631, -0.04999975115060806]],
                               rtol=1e-6)  # Caffe2


@DEVICES
def test_adagrads_weight_decay_matches_caffe2(do):
    """weight_decay adds weight_decay * param to the gradient (dense, sparse and row-wise;
    figures read off the real Caffe2, the same inputs through RunOperatorOnce)."""
    p = np.array([[0.5, -1.0], [2.0, 3.0], [1.0, 1.0]], np.float32)
    g = np.array([[1., 2.], [3., -4.], [0.5, 0.5]], np.float32)
    m, lr, idx = np.full((3, 2), 0.5, np.float32), np.array([-0.1], np.float32), np.array([1, 0, 1], np.int64)
    got = _run(do, "Adagrad", {"p": p, "m": m, "g": g, "lr": lr}, ["p", "m"], epsilon=1e-5, weight_decay=0.1)
    np.testing.assert_allclose(got[0], [[0.4170556366443634, -1.0937196016311646],
                                        [1.9023557901382446, 3.098222017288208],
                                        [0.9353010058403015, 0.9353010058403015]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [[1.6024998426437378, 4.109999656677246],
                                        [10.74000072479248, 14.190000534057617],
                                        [0.8600000143051147, 0.8600000143051147]], rtol=1e-6)  # Caffe2
    got = _run(do, "SparseAdagrad", {"p": p, "m": m, "i": idx, "g": g, "lr": lr}, ["p", "m"], epsilon=1e-5,
               weight_decay=0.1)
    np.testing.assert_allclose(got[0], [[0.402584046125412, -0.9014550447463989],
                                        [1.8693838119506836, 2.873206853866577], [1.0, 1.0]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [[9.802499771118164, 17.309999465942383],
                                        [2.4180126190185547, 6.414797782897949], [0.5, 0.5]], rtol=1e-6)  # Caffe2
    got = _run(do, "RowWiseSparseAdagrad", {"p": p, "m": np.full(3, 0.5, np.float32), "i": idx, "g": g, "lr": lr},
               ["p", "m"], epsilon=1e-5, weight_decay=0.1)
    np.testing.assert_allclose(got[0], [[0.41716212034225464, -0.8886442184448242],
                                        [1.9059430360794067, 2.845499038696289], [1.0, 1.0]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [13.556249618530273, 4.416455268859863, 0.5], rtol=1e-6)  # Caffe2


@DEVICES
def test_sparse_updates_match_caffe2(do):
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    g = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)
    got = _run(do, "SparseMomentumSGDUpdate", {"g": g, "m": np.full((4, 2), 0.5, np.float32), "lr": LR, "w": w,
                                               "i": np.array([1, 3, 1], np.int64)}, ["g", "m", "w"], momentum=0.9)
    np.testing.assert_allclose(got[0], [[0.55, 0.65], [0.75, 0.85], [0.995, 1.185]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[2], [[0.0, 1.0], [0.455, 1.165], [4.0, 5.0], [5.25, 6.15]], rtol=1e-6)  # Caffe2
    got = _run(do, "SparseAdam", {"w": w, "m1": np.zeros((4, 2), np.float32), "m2": np.zeros((4, 2), np.float32),
                                  "i": np.array([1, 3], np.int64), "g": g[:2], "lr": LR,
                                  "it": np.array([3], np.int64)}, ["w", "m1", "m2"], beta1=0.9, beta2=0.999,
               epsilon=1e-5)
    np.testing.assert_allclose(got[0], [[0.0, 1.0], [2.0580945014953613, 3.058103561401367], [4.0, 5.0],
                                        [6.058106899261475, 7.058108329772949]], rtol=1e-6)  # Caffe2


PERFECT = np.array([2, 6, 5, 0, 1], np.float32)


def _linear_model():
    np.random.seed(123)  # (the data Caffe2's own optimizer tests train on)
    data = np.random.randint(2, size=(20, 5)).astype(np.float32)
    model = ModelHelper(name="lin")
    out = brew.fc(model, "data", "fc", 5, 1, weight_init=("ConstantFill", {}), bias_init=("ConstantFill", {}))
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([out, "label"], "sq"), "loss")
    model.AddGradientOperators([loss])
    return model, data, (data @ PERFECT)[:, None]


@pytest.mark.parametrize("build, kwargs", [
    (optimizer.build_sgd, dict(base_learning_rate=0.1, momentum=0.9)),
    (optimizer.build_rms_prop, dict(base_learning_rate=0.1, epsilon=0.1)),
    (optimizer.build_ftrl, dict(alpha=1.0, beta=0.1)),
    (optimizer.build_adadelta, dict(base_learning_rate=1.0, decay=0.995)),
], ids=["momentum_sgd", "rms_prop", "ftrl", "adadelta"])
def test_builders_recover_a_linear_model(build, kwargs):
    model, data, label = _linear_model()
    build(model, **kwargs)
    with LocalSession() as s:
        s.run(model.param_init_net)
        for _ in range(2000):
            k = np.random.randint(20)
            workspace.FeedBlob("data", data[k:k + 1])
            workspace.FeedBlob("label", label[k:k + 1])
            s.run(model.net)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), PERFECT[None, :], atol=1e-2)


def test_optimizers_name_their_kept_blobs():
    """SGD shares the constant one; momentum SGD and Adagrad keep a moment per parameter."""
    for build, kwargs, shared, local in [(optimizer.build_sgd, {}, ["ONE_0_0"], []),
                                         (optimizer.build_sgd, {"momentum": 0.9}, ["ONE_0_0"], ["fc_w_momentum"]),
                                         (optimizer.build_adagrad, {}, [], ["fc_w_squared_sum"]),
                                         # (Adam shares its step count; RMSProp reads ONE but keeps no
                                         # shared blob: both as the real Caffe2's aux params list them)
                                         (optimizer.build_adam, {}, ["optimizer_iteration"],
                                          ["fc_w_first_moment", "fc_w_second_moment"]),
                                         (optimizer.build_rms_prop, {}, [],
                                          ["fc_w_mean_squares", "fc_w_momentum"])]:
        workspace.ResetWorkspace()
        model, _, _ = _linear_model()
        opt = build(model, base_learning_rate=0.1, **kwargs)
        aux = opt.get_auxiliary_parameters()
        assert [str(b) for b in aux.shared] == shared
        assert [str(b) for b in aux.local][:len(local)] == local


def test_row_wise_adagrad_of_a_parameter_without_a_recorded_shape():
    """A table filled by hand (no param info): the per-row moment takes its rows from the
    table when the init net runs. One step on rows [1, 1, 3] of a 4x2 table, by hand: each
    gathered row's gradient is ones, and a repeated row is updated once per occurrence, in
    order, its moment adding mean(g**2) each time. (The real Caffe2 gives the same table:
    row 1 at 0.14644662, row 3 at 0.5, run with the same calls.)"""
    model = ModelHelper(name="rowwise")
    w = model.param_init_net.ConstantFill([], "w", shape=[4, 2], value=1.0)
    model.params.append(w)
    picked = model.net.Gather([w, "idx"], "picked")
    loss = model.net.AveragedLoss(model.net.SumElements([picked], "s"), "loss")
    model.AddGradientOperators([loss])
    assert isinstance(model.param_to_grad["w"], core.GradientSlice)
    optimizer.build_adagrad(model, base_learning_rate=0.5, rowWise=True, epsilon=0.0)
    workspace.ResetWorkspace()
    workspace.FeedBlob("idx", np.array([1, 1, 3], np.int32))
    workspace.RunNetOnce(model.param_init_net)
    assert workspace.FetchBlob("w_avg_squared_sum").shape == (4,)
    workspace.RunNetOnce(model.net)
    want, h = np.ones((4, 2)), np.zeros(4)
    for r in (1, 1, 3):
        h[r] += 1.0  # mean of ones squared
        want[r] -= 0.5 * 1.0 / np.sqrt(h[r])
    np.testing.assert_allclose(workspace.FetchBlob("w"), want, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("w_avg_squared_sum"), h, rtol=1e-6)


def test_gradient_clipping_and_lr_injection():
    """max_gradient_norm scales the learning rate by clip / max(clip, |all gradients|);
    lr_injection multiplies it further. Checked against numpy on one SGD step."""
    model, data, label = _linear_model()
    optimizer.build_sgd(model, base_learning_rate=0.1, max_gradient_norm=1.0, allow_lr_injection=True)
    workspace.FeedBlob("data", data[:1])
    workspace.FeedBlob("label", label[:1])
    with LocalSession() as s:
        s.run(model.param_init_net)
        w0 = workspace.FetchBlob("fc_w").copy()
        optimizer.set_lr_injection(0.5)
        s.run(model.net)
    # from zero weights: y = 0, dloss/dy = -label, dW = -label * x, db = -label
    x, t = data[0].astype(np.float64), float(label[0, 0])
    norm = np.sqrt(np.sum((t * x) ** 2) + t ** 2)
    ratio = 1.0 / max(1.0, norm)
    np.testing.assert_allclose(workspace.FetchBlob("norm_clipped_grad_update/norm_ratio"), ratio, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 + 0.1 * ratio * 0.5 * t * x[None, :], rtol=1e-5)
    assert float(optimizer.get_lr_injection()[0]) == 0.5


def _one_sgd_step(model, x, label):
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    w0, b0 = workspace.FetchBlob("fc_w").copy(), workspace.FetchBlob("fc_b").copy()
    workspace.FeedBlob("data", x)
    workspace.FeedBlob("label", label)
    workspace.RunNetOnce(model.net)
    # loss = mean over the batch of (x.w + b - label)^2 / 2, by hand
    r = x @ w0.T + b0 - label
    return w0, b0, (r.T @ x) / len(x), r.mean(axis=0)


def test_parameters_made_under_use_optimizer_get_that_optimizer():
    """fc_w under a SGD of lr 0.2, fc_b under one of lr 0.05; the build_sgd(0.11) default
    updates neither."""
    from dslc.optimizer_context import UseOptimizer
    model = ModelHelper(name="ctx")
    with UseOptimizer({"WEIGHT": optimizer.SgdOptimizer(0.2), "BIAS": optimizer.SgdOptimizer(0.05)}):
        out = brew.fc(model, "data", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.5}),
                      bias_init=("ConstantFill", {"value": 0.1}))
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([out, "label"], "sq"), "loss")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.11)
    x, label = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0]], np.float32), np.array([[2.0], [1.0]], np.float32)
    w0, b0, gw, gb = _one_sgd_step(model, x, label)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 - 0.2 * gw, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b0 - 0.05 * gb, rtol=1e-6)


def test_an_optimizer_called_per_parameter():
    """Caffe2's opt(net, param_init_net, param, grad): only that parameter is updated."""
    model = ModelHelper(name="per_param")
    out = brew.fc(model, "data", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.5}),
                  bias_init=("ConstantFill", {"value": 0.1}))
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([out, "label"], "sq"), "loss")
    model.AddGradientOperators([loss])
    sgd = optimizer.SgdOptimizer(base_learning_rate=0.3)
    sgd(model.net, model.param_init_net, "fc_w", "fc_w_grad")
    x, label = np.array([[1.0, -2.0, 0.5]], np.float32), np.array([[1.0]], np.float32)
    w0, b0, gw, _ = _one_sgd_step(model, x, label)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 - 0.3 * gw, rtol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("fc_b"), b0)
    with pytest.raises(optimizer.OptimizerError, match="needs a parameter and its gradient"):
        sgd(model.net, model.param_init_net, "fc_b")


@DEVICES
def test_lars_row_wise_counter_and_counted_decay_match_caffe2(do):
    x, dx = np.array([[3.0, 4.0]], np.float32), np.array([[0.6, 0.8]], np.float32)
    one = np.array([1.0], np.float32)
    for wd, trust, lr_max, args, want in [(0.0, 1.0, 1e30, {"offset": 0.5, "lr_min": 0.0}, 1.4285715),
                                          (0.1, 2.0, 1e30, {"offset": 0.5, "lr_min": 0.0}, 2.5),
                                          (0.0, 1.0, 0.3, {"offset": 0.5, "lr_min": 0.0}, 0.3),
                                          (0.0, 1.0, 10.0, {"offset": 0.5, "lr_min": 2.0}, 2.0)]:
        got = _run(do, "Lars", {"x": x, "dx": dx, "wd": np.float32(wd) * one, "t": np.float32(trust) * one,
                                "m": np.float32(lr_max) * one}, ["r"], **args)
        np.testing.assert_allclose(got[0], [want], rtol=1e-6)  # Caffe2
    got = _run(do, "Lars", {"x": 0 * x, "dx": dx, "wd": 0 * one, "t": one, "m": 0.5 * one}, ["r"])
    assert got[0] == [0.5]  # Caffe2: a zero norm gives 1, clipped to lr_max
    got = _run(do, "RowWiseCounter", {"prev": np.array([0, 3, 5, 0], np.int64), "c": np.array([0.0, 2.0, 1.5, 0.0]),
                                      "i": np.array([1, 2, 3], np.int64), "it": np.array([7], np.int64)},
               ["prev", "c"], counter_halflife=5)
    assert got[0] == [0, 7, 7, 7]
    np.testing.assert_allclose(got[1], [0.0, 2.148698354997035, 2.1367874248827987, 1.0], rtol=1e-12)  # Caffe2
    ins = {"w": np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32), "m": np.array([0.1, 0.2, 0.3], np.float32),
           "i": np.array([0, 2], np.int64), "g": np.array([[0.5, -0.5], [1.0, 2.0]], np.float32), "lr": LR,
           "c": np.array([2.0, 0.0, 4.0])}
    got = _run(do, "RowWiseSparseAdagrad", ins, ["w", "m"], epsilon=1e-4, weight_decay=0.1, counter_halflife=5)
    np.testing.assert_allclose(got[0], [[1.1214467287063599, 2.0], [3.0, -1.0], [0.5614279508590698, 0.6192425489425659]],
                               rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [0.3812499940395355, 0.2, 2.991406202316284], rtol=1e-6)  # Caffe2


def test_row_wise_adagrad_with_counted_weight_decay_as_numpy():
    """Two steps on rows [1, 1, 3] then [1, 2] of a 4x2 table of ones (each row's gradient is
    ones): the weight decay of row r is scaled by counter_halflife / its update count, which
    RowWiseCounter keeps after each step (1 + count 2^(-iterations since / halflife))."""
    model = ModelHelper(name="counted")
    w = model.param_init_net.ConstantFill([], "w", shape=[4, 2], value=1.0)
    model.params.append(w)
    loss = model.net.AveragedLoss(model.net.SumElements([model.net.Gather([w, "idx"], "picked")], "s"), "loss")
    model.AddGradientOperators([loss])
    opt = optimizer.build_adagrad(model, base_learning_rate=0.5, rowWise=True, epsilon=0.0, weight_decay=0.1,
                                  counter_halflife=4)
    assert "optimizer_iteration" in [str(b) for b in opt.get_auxiliary_parameters().shared]
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    want, h, count, prev = np.ones((4, 2)), np.zeros(4), np.zeros(4), np.zeros(4)
    for it, idx in enumerate([[1, 1, 3], [1, 2]], start=1):
        workspace.FeedBlob("idx", np.array(idx, np.int32))
        workspace.RunNetOnce(model.net)
        for r in idx:
            freq = 4 / count[r] if count[r] > 0 else 1.0
            g = 1.0 + 0.1 * freq * want[r]
            h[r] += np.mean(g * g)
            want[r] -= 0.5 * g / np.sqrt(h[r])
        for r in idx:
            count[r] = 1 + count[r] * 2.0 ** (-(it - prev[r]) / 4)
            prev[r] = it
    np.testing.assert_allclose(workspace.FetchBlob("w"), want, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("w_update_counter"), count, rtol=1e-12)
    assert workspace.FetchBlob("w_prev_update_iter").tolist() == prev.tolist()


def test_lars_scales_each_dense_parameters_learning_rate():
    """One SGD step with lars=0.5: fc_w's rate is times 1 / (|dW| / |W| + 0.5); fc_b starts at
    zero, so its factor is 1 (a zero norm). Worked out with numpy."""
    np.random.seed(7)
    x = np.random.rand(4, 3).astype(np.float32)
    label = np.random.rand(4, 1).astype(np.float32)
    model = ModelHelper(name="lars")
    out = brew.fc(model, "data", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.5}),
                  bias_init=("ConstantFill", {}))
    model.AddGradientOperators([model.net.AveragedLoss(model.net.SquaredL2Distance([out, "label"], "sq"), "loss")])
    optimizer.build_sgd(model, base_learning_rate=0.1, lars=0.5)
    w0, b0, dw, db = _one_sgd_step(model, x, label)
    factor = 1.0 / (np.linalg.norm(dw) / np.linalg.norm(w0) + 0.5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w0 - 0.1 * factor * dw, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b0 - 0.1 * db, rtol=1e-5)


@DEVICES
def test_smart_decay_sparse_adam_matches_caffe2(do):
    """Rows 0 and 2 read at step t = 10, last updated at 3 and 7: each catches up 7 and 3 steps."""
    ins = {"p": np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32),
           "m1": np.array([[0.1, -0.2], [0.3, 0.0], [0.05, 0.1]], np.float32),
           "m2": np.array([[0.01, 0.02], [0.03, 0.04], [0.5, 0.1]], np.float32),
           "ls": np.array([3, 0, 7], np.int64), "i": np.array([0, 2], np.int64),
           "g": np.array([[0.5, -0.5], [1.0, 2.0]], np.float32), "lr": LR, "it": np.array([9], np.int64)}
    got = _run(do, "SmartDecaySparseAdam", ins, ["p", "m1", "m2", "ls"], beta1=0.9, beta2=0.999, epsilon=1e-5)
    np.testing.assert_allclose(got[0], [[1.5148630142211914, 1.3025968074798584], [3.0, -1.0],
                                        [0.531403660774231, 0.637842059135437]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [[0.09782969951629639, -0.14565938711166382], [0.30000001192092896, 0.0],
                                        [0.13645002245903015, 0.2729000449180603]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[2], [[0.010180206969380379, 0.020110417157411575],
                                        [0.029999999329447746, 0.03999999910593033],
                                        [0.499501496553421, 0.10370025038719177]], rtol=1e-6)  # Caffe2
    assert got[3] == [10, 0, 10]


def test_adam_with_smart_decay_keeps_when_each_row_was_seen():
    model = ModelHelper(name="smart")
    w = model.param_init_net.ConstantFill([], "w", shape=[5, 2], value=1.0)
    model.params.append(w)
    loss = model.net.AveragedLoss(model.net.SumElements([model.net.Gather([w, "idx"], "picked")], "s"), "loss")
    model.AddGradientOperators([loss])
    opt = optimizer.build_adam(model, base_learning_rate=0.1, use_smart_decay=True)
    assert [str(b) for b in opt.get_auxiliary_parameters().local][0] == "w_last_seen"
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    for rows in ([1, 3], [3], [0, 3]):
        workspace.FeedBlob("idx", np.array(rows, np.int32))
        workspace.RunNetOnce(model.net)
    # (Iter counts the runs 1, 2, 3 before the update reads it; t = iter + 1: 2, 3, 4)
    assert workspace.FetchBlob("w_last_seen").tolist() == [4, 2, 0, 4, 0]
    assert (workspace.FetchBlob("w")[[2, 4]] == 1.0).all()  # (rows never read keep their values)


@DEVICES
def test_gftrl_matches_caffe2(do):
    """Group-lasso FTRL: columns of the [2, 3] parameter are the groups (lambda1 sqrt(2) the
    threshold). Figures read off the real Caffe2 (alpha 0.5, beta 0.1)."""
    w = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], np.float32)
    nz = np.zeros((2, 3, 2), np.float32)
    nz[..., 0] = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    nz[..., 1] = [[0.05, -0.1, 0.2], [0.3, 0.0, -0.4]]
    g = np.array([[0.2, -0.3, 0.1], [0.4, 0.5, -0.6]], np.float32)
    for l1, l2, want in [
            (0.0, 0.0, [[-0.2025262713432312, 0.170233815908432, -0.20081759989261627],
                        [-0.2076854556798935, -0.217665433883667, 0.36803287267684937]]),
            (0.5, 0.0, [[0.0, 0.0, -0.03125198185443878], [0.0, 0.0, 0.05727464333176613]]),
            (0.0, 0.7, [[-0.11651906371116638, 0.10995982587337494, -0.13100452721118927],
                        [-0.1470261961221695, -0.15977680683135986, 0.277942031621933]])]:
        got = _run(do, "GFtrl", {"w": w, "nz": nz, "g": g}, ["w", "nz"], alpha=0.5, beta=0.1, lambda1=l1, lambda2=l2)
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.array(got[1])[..., 1], [[0.19206203520298004, -0.21739420294761658, 0.2637845277786255],
                                                          [0.3523722290992737, 0.4205406904220581, -0.7948007583618164]],
                               rtol=1e-6)  # Caffe2's z
