"""Conv, MaxPool and AveragePool: values read off the real Caffe2, a direct-loop numpy
reference written here for other geometries, and gradients against finite differences
on both devices. ("Caffe2" figures: torch 1.10.2's caffe2, the same inputs through
workspace.RunOperatorOnce and GradientRegistry.GetBackwardPass, printed with .tolist().)"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from dslc import brew, core, workspace
from dslc import hypothesis_test_util as hu
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper

X = (np.arange(2 * 4 * 5 * 5, dtype=np.float32).reshape(2, 4, 5, 5) % 7) / 7 - 0.4
W = (np.arange(6 * 2 * 3 * 3, dtype=np.float32).reshape(6, 2, 3, 3) % 5) / 5 - 0.3
B = np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.1], np.float32)
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])


def _run(do, op_type, inputs, outputs=("y",), **args):
    return hu.runOpOnInput(do, core.CreateOperator(op_type, list(inputs), list(outputs), **args),
                           list(inputs.values()))


@DEVICES
def test_values_match_caffe2(do):
    (y,) = _run(do, "Conv", {"x": X, "w": W, "b": B}, kernel=3, stride=2, pad=1, group=2)
    assert y.shape == (2, 6, 3, 3)
    np.testing.assert_allclose(y.sum(), 14.025715827941895, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(y[1, 3], [[-0.1485714316368103, 0.7857142686843872, -0.237142875790596],
                                         [0.2028571367263794, -0.35428568720817566, -0.09428570419549942],
                                         [-0.27142858505249023, 0.18000003695487976, 0.2685714364051819]],
                               rtol=1e-5, atol=1e-7)  # Caffe2
    w2 = ((np.arange(3 * 4 * 3 * 2, dtype=np.float32) % 3) / 3 - 0.2).reshape(3, 4, 3, 2)
    (y,) = _run(do, "Conv", {"x": X, "w2": w2}, kernel_h=3, kernel_w=2, stride_h=1, stride_w=2, pad_t=1,
                pad_l=0, pad_b=0, pad_r=1, dilation=2)
    assert y.shape == (2, 3, 2, 2)
    np.testing.assert_allclose(y[0, 1], [[0.19428572058677673, 0.18476194143295288],
                                         [-0.09904758632183075, 0.21523815393447876]], rtol=1e-5)  # Caffe2
    pools = [("MaxPool", dict(kernel=2, stride=2), (2, 4, 2, 2), 10.485713958740234),
             ("AveragePool", dict(kernel=3, stride=2, pad=1), (2, 4, 3, 3), 1.8230164051055908),
             ("MaxPool", dict(kernel=3, stride=2, pad=1), (2, 4, 3, 3), 27.628570556640625),
             ("AveragePool", dict(global_pooling=1), (2, 4, 1, 1), 0.19428575038909912),
             ("MaxPool", dict(kernel=2, stride=2, legacy_pad=3), (2, 4, 3, 3), 16.91428565979004)]
    for op_type, args, shape, total in pools:  # Caffe2's shapes and sums
        (p,) = _run(do, op_type, {"x": X}, **args)
        assert p.shape == shape, (op_type, args)
        np.testing.assert_allclose(p.sum(), total, rtol=1e-6, err_msg=f"{op_type} {args}")
    (p,) = _run(do, "AveragePool", {"x": X}, kernel=3, stride=2, pad=1)
    np.testing.assert_allclose(p[1, 2, 0], [-0.042857132852077484, 0.1714285910129547, 0.13571429252624512],
                               rtol=1e-5)  # Caffe2: padding not counted


def test_gradients_match_caffe2():
    op = core.CreateOperator("Conv", ["x", "w", "b"], ["y"], kernel=3, stride=2, pad=1, group=2)
    ops, grads = core.GradientRegistry.GetBackwardPass([op], {"y": "y_grad"})
    assert [o.type for o in ops] == ["ConvGradient"] and list(ops[0].output) == ["w_grad", "b_grad", "x_grad"]
    for name, value in (("x", X), ("w", W), ("b", B)):
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("y_grad", np.ones((2, 6, 3, 3), np.float32) * np.arange(9, dtype=np.float32).reshape(3, 3) / 9)
    workspace.RunOperatorsOnce(ops)
    np.testing.assert_allclose(workspace.FetchBlob("w_grad").sum(), 13.600005149841309, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(workspace.FetchBlob("b_grad"), [8.0] * 6)  # Caffe2
    np.testing.assert_allclose(workspace.FetchBlob("x_grad").sum(), 51.06666564941406, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(workspace.FetchBlob("x_grad")[1, 2, 1],
                               [-0.03333333879709244, 0.2888888418674469, 0.011111102998256683,
                                0.37777775526046753, 0.055555541068315506], rtol=1e-5, atol=1e-7)  # Caffe2


@DEVICES
def test_conv_gradient_makes_dx_only_when_named(do):
    # Caffe2 (conv_op_impl.h; checked on torch 1.10.2's caffe2): ConvGradient with outputs
    # (dW, db) and no_bias=0, or (dW) with no_bias=1, writes no dX; (dW) alone without
    # no_bias fails there (its db output is missing): here a located error
    dy = np.ones((2, 6, 3, 3), np.float32) * np.arange(9, dtype=np.float32).reshape(3, 3) / 9
    args = dict(kernel=3, stride=2, pad=1, group=2)
    dw, db = _run(do, "ConvGradient", {"x": X, "w": W, "dy": dy}, ("dw", "db"), **args)
    np.testing.assert_allclose(dw.sum(), 13.600005149841309, rtol=1e-6)  # Caffe2 (as above)
    np.testing.assert_allclose(db, [8.0] * 6)  # Caffe2
    (dw1,) = _run(do, "ConvGradient", {"x": X, "w": W, "dy": dy}, ("dw1",), no_bias=1, **args)
    np.testing.assert_array_equal(dw1, dw)
    with pytest.raises(DSLError, match="no_bias=0 produces"):
        _run(do, "ConvGradient", {"x": X, "w": W, "dy": dy}, ("dw2",), **args)


def _loops(x, w, b, stride, pads, dilation, group):
    """Convolution by its definition, one output element at a time."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (pt, pb), (pl, pr) = pads
    ho = (h + pt + pb - dilation * (kh - 1) - 1) // stride + 1
    wo = (wd + pl + pr - dilation * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, ho, wo))
    for i, f, r, s in itertools.product(range(n), range(m), range(ho), range(wo)):
        grp = f // (m // group)
        total = b[f]
        for ch, a, e in itertools.product(range(cg), range(kh), range(kw)):
            rr, ss = r * stride - pt + a * dilation, s * stride - pl + e * dilation
            if 0 <= rr < h and 0 <= ss < wd:
                total += x[i, grp * cg + ch, rr, ss] * w[f, ch, a, e]
        y[i, f, r, s] = total
    return y


@pytest.mark.parametrize("stride, pad, dilation, group", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 2, 2, 1), (3, 1, 1, 4)])
def test_conv_is_its_definition(stride, pad, dilation, group):
    rng = np.random.default_rng(stride * 10 + pad)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // group, 3, 2)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    for do in hu.device_options:
        (y,) = _run(do, "Conv", {"x": x, "w": w, "b": b}, stride=stride, pad=pad, dilation=dilation, group=group)
        np.testing.assert_allclose(y, _loops(x, w, b, stride, ((pad, pad), (pad, pad)), dilation, group),
                                   rtol=1e-4, atol=1e-5)


def test_nhwc_is_nchw_transposed():
    x, w = np.moveaxis(X, 1, -1).copy(), np.moveaxis(W, 1, -1).copy()
    (y,) = _run(hu.cpu_do, "Conv", {"x": x, "w": w, "b": B}, kernel=3, stride=2, pad=1, group=2, order="NHWC")
    (ref,) = _run(hu.cpu_do, "Conv", {"x": X, "w": W, "b": B}, kernel=3, stride=2, pad=1, group=2)
    np.testing.assert_allclose(y, np.moveaxis(ref, 1, -1), rtol=1e-6)


class TestConvGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((1, 4, 5, 4)).astype(np.float32)
        w = rng.standard_normal((2, 2, 3, 2)).astype(np.float32) * 0.5
        b = rng.standard_normal(2).astype(np.float32)
        op = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], stride=2, pad=1, group=2)
        self.assertDeviceChecks(dc, op, [x, w, b], [0])
        for i in range(3):
            self.assertGradientChecks(gc, op, [x.copy(), w.copy(), b.copy()], i, [0], stepsize=1e-2, threshold=1e-2)
        distinct = (rng.permutation(80).reshape(1, 4, 5, 4) / 40 - 1).astype(np.float32)  # (no ties at a max)
        for op_type, args in (("MaxPool", dict(kernel=2, stride=1)), ("AveragePool", dict(kernel=3, stride=2, pad=1)),
                              ("MaxPool", dict(kernel=2, stride=2, legacy_pad=3))):
            op = core.CreateOperator(op_type, ["X"], ["Y"], **args)
            self.assertDeviceChecks(dc, op, [distinct], [0])
            self.assertGradientChecks(gc, op, [distinct.copy()], 0, [0], stepsize=1e-3, threshold=1e-2)


def test_mismatched_channels_are_a_located_error():
    workspace.FeedBlob("x", X)
    workspace.FeedBlob("w", W)
    with pytest.raises(DSLError) as e:
        workspace.RunOperatorOnce(core.CreateOperator("Conv", ["x", "w"], ["y"], kernel=3))  # 4 channels, W takes 2
    assert "channels" in str(e.value) and e.value.loc.file.endswith("test_conv.py")


@pytest.mark.numba  # (it trains on numba only: the compile is most of its time)
def test_a_lenet_shaped_model_trains():
    """conv-pool-conv-pool-fc on 8 images; 30 SGD steps lower the loss (a classifier that learns)."""
    from dslc import optimizer
    from dslc.session import LocalSession
    rng = np.random.default_rng(0)
    data = rng.standard_normal((8, 1, 12, 12)).astype(np.float32)
    label = (data[:, 0, :6].sum(axis=(1, 2)) > data[:, 0, 6:].sum(axis=(1, 2))).astype(np.int32)
    model = ModelHelper(name="lenet")
    c1 = brew.conv(model, "data", "c1", dim_in=1, dim_out=4, kernel=3)
    p1 = brew.max_pool(model, brew.relu(model, c1, "r1"), "p1", kernel=2, stride=2)
    c2 = brew.conv(model, p1, "c2", dim_in=4, dim_out=4, kernel=3)
    p2 = brew.average_pool(model, brew.relu(model, c2, "r2"), "p2", kernel=2, stride=2)
    fc = brew.fc(model, p2, "fc", dim_in=4, dim_out=2)  # (12 -> 10 -> 5 -> 3 -> 1)
    _, loss = model.net.SoftmaxWithLoss([fc, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=0.2)
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("label", label)
    losses = []
    with LocalSession(backend="numba") as s:
        s.run(model.param_init_net)
        for _ in range(30):
            s.run(model.net)
            losses.append(float(workspace.FetchBlob("loss")))
    assert losses[-1] < 0.5 * losses[0], losses


BN_X = (np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2) % 5) / 5 - 0.3
BN = dict(x=BN_X, s=np.array([1.0, 0.5, 2.0], np.float32), b=np.array([0.1, 0.0, -0.2], np.float32),
          rm=np.array([0.0, 0.1, 0.2], np.float32), rv=np.array([1.0, 2.0, 0.5], np.float32))


@DEVICES
def test_spatial_bn_matches_caffe2(do):
    y, rm, rv, sm, siv = _run(do, "SpatialBN", BN, ("y", "rm", "rv", "sm", "siv"), is_test=0, epsilon=1e-5,
                              momentum=0.9)
    np.testing.assert_allclose(y.reshape(-1)[:6], [-1.2749552726745605, -0.541645884513855, 0.19166365265846252,
                                                   0.92497318983078, 0.6874776482582092, -0.779141366481781],
                               rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(rm, [0.007500002160668373, 0.10249999910593033, 0.1849999874830246], rtol=1e-6)
    np.testing.assert_allclose(rv, [0.9084999561309814, 1.8084999322891235, 0.45885711908340454], rtol=1e-6)
    np.testing.assert_allclose(sm, [0.07500000298023224, 0.125, 0.04999999701976776], rtol=1e-6)
    np.testing.assert_allclose(siv, [3.6665475368499756, 3.6665475368499756, 3.591874361038208], rtol=1e-6)
    (yt,) = _run(do, "SpatialBN", BN, ("yt",), is_test=1, epsilon=1e-5)
    np.testing.assert_allclose(yt.reshape(-1)[:6], [-0.19999852776527405, 4.917383193969727e-07, 0.19999949634075165,
                                                    0.3999985158443451, 0.14142099022865295, -0.14142100512981415],
                               rtol=1e-5, atol=1e-7)  # Caffe2


def test_spatial_bn_gradient_matches_caffe2():
    op = core.CreateOperator("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"], is_test=0)
    ops, _ = core.GradientRegistry.GetBackwardPass([op], {"y": "y_grad"})
    assert [list(o.output) for o in ops] == [["x_grad", "s_grad", "b_grad"]]
    for k, v in BN.items():
        workspace.FeedBlob(k, v)
    workspace.FeedBlob("y_grad", (np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2) % 4) / 4 - 0.25)
    workspace.RunOperatorOnce(op)
    workspace.RunOperatorsOnce(ops)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad").reshape(-1)[:6],
                               [-1.0861380100250244, -0.32353702187538147, 0.4390639364719391,
                                1.2016648054122925, -0.831886351108551, -0.0654960349202156], rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(workspace.FetchBlob("s_grad"), [0.45831847190856934, 0.45831847190856934, 0.0],
                               rtol=1e-6, atol=1e-7)  # Caffe2
    np.testing.assert_allclose(workspace.FetchBlob("b_grad"), [1.0, 1.0, 1.0])  # Caffe2


class TestSpatialBNGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        rng = np.random.default_rng(2)
        ins = [rng.standard_normal((3, 2, 2, 3)).astype(np.float32), np.array([1.5, 0.5], np.float32),
               np.array([0.1, -0.3], np.float32), np.zeros(2, np.float32), np.ones(2, np.float32)]
        op = core.CreateOperator("SpatialBN", ["X", "S", "B", "RM", "RV"], ["Y", "RM", "RV", "SM", "SIV"])
        for i in range(3):
            self.assertGradientChecks(gc, op, [a.copy() for a in ins], i, [0], stepsize=1e-2, threshold=1e-2)


def test_brew_spatial_bn_trains_and_tests():
    model = ModelHelper(name="bn")
    y = brew.spatial_bn(model, "x", "bn", dim_in=3, epsilon=1e-5, momentum=0.9)
    assert [str(p) for p in model.params] == ["bn_s", "bn_b"]
    assert [str(p) for p in model.GetComputedParams()] == ["bn_rm", "bn_riv"]
    workspace.FeedBlob("x", BN_X)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    # scale 1, bias 0: every channel of y has mean 0 and (biased) variance var / (var + eps)
    yv = workspace.FetchBlob(str(y))
    np.testing.assert_allclose(yv.mean(axis=(0, 2, 3)), 0, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("bn_rm"), 0.1 * BN_X.mean(axis=(0, 2, 3)), rtol=1e-5)


LRN_X = ((np.arange(2 * 5 * 2 * 2, dtype=np.float32).reshape(2, 5, 2, 2) % 7) / 7 - 0.3)


@DEVICES
def test_lrn_matches_caffe2(do):
    y, s = _run(do, "LRN", {"x": LRN_X}, ("y", "s"), size=3, alpha=0.5, beta=0.75, bias=2.0)
    np.testing.assert_allclose(y.reshape(-1)[:4], [-0.17657782137393951, -0.09230735898017883,
                                                  -0.008333081379532814, 0.07594393193721771], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(y.sum(), 2.5851454734802246, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(s.reshape(-1)[:3], [2.0272789001464844, 2.0327210426330566, 2.0517687797546387],
                               rtol=1e-6)  # Caffe2
    (y1,) = _run(do, "LRN", {"x": LRN_X}, ("y",), size=3, alpha=0.5, beta=0.75, bias=2.0)
    np.testing.assert_array_equal(y1, y)
    dy = (np.arange(40, dtype=np.float32).reshape(2, 5, 2, 2) % 3) - 1.0
    (dx,) = _run(do, "LRNGradient", {"x": LRN_X, "y": y, "dy": dy}, ("dx",), size=3, alpha=0.5, beta=0.75, bias=2.0)
    np.testing.assert_allclose(dx.reshape(-1)[:3], [-0.5820601582527161, 0.004703117068856955, 0.5827368497848511],
                               rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(dx.sum(), -0.5537382960319519, rtol=1e-5)  # Caffe2


class TestLRNGradient(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradient(self, gc, dc):
        op = core.CreateOperator("LRN", ["X"], ["Y"], size=3, alpha=0.5, beta=0.75, bias=2.0)
        self.assertGradientChecks(gc, op, [LRN_X.copy()], 0, [0], stepsize=1e-3, threshold=1e-2)


@DEVICES
def test_conv_transpose_matches_caffe2(do):
    x = (np.arange(27, dtype=np.float32).reshape(1, 3, 3, 3) % 5) / 5 - 0.3
    w = (np.arange(54, dtype=np.float32).reshape(3, 2, 3, 3) % 7) / 7 - 0.4
    b = np.array([0.1, -0.2], np.float32)
    (y,) = _run(do, "ConvTranspose", {"x": x, "w": w, "b": b}, kernel=3, stride=2, pad=1)
    assert y.shape == (1, 2, 5, 5)  # Caffe2
    np.testing.assert_allclose(y.sum(), -1.9085713624954224, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(y[0, 1, 1], [0.022857114672660828, -0.4057142734527588, -0.40000003576278687,
                                            0.2914285659790039, -0.4228571653366089], rtol=1e-5, atol=1e-7)
    dy = (np.arange(50, dtype=np.float32).reshape(1, 2, 5, 5) % 4) / 4 - 0.3
    dw, db, dx = _run(do, "ConvTransposeGradient", {"x": x, "w": w, "dy": dy}, ("dw", "db", "dx"), kernel=3,
                      stride=2, pad=1)
    np.testing.assert_allclose(dw.sum(), 2.164999485015869, rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(db, [1.4999995231628418, 1.750000238418579], rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(dx.reshape(-1)[:4], [-0.21142858266830444, 0.46857142448425293,
                                                   -0.28285714983940125, 0.5042857527732849], rtol=1e-5)  # Caffe2


class TestConvTransposeGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        rng = np.random.default_rng(6)
        ins = [rng.standard_normal((1, 2, 3, 3)).astype(np.float32),
               rng.standard_normal((2, 3, 2, 2)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"], kernel=2, stride=2, pad=0)
        for i in range(3):
            self.assertGradientChecks(gc, op, [a.copy() for a in ins], i, [0], stepsize=1e-2, threshold=1e-2)


@DEVICES
def test_the_rank_named_conv_spellings_are_conv(do):
    """Conv1D/2D/3D and ConvND are Caffe2's other names of Conv (the rank comes from X)."""
    (want,) = _run(do, "Conv", {"x": X, "w": W, "b": B}, kernel=3, pad=1, group=2)
    for name in ("Conv2D", "ConvND"):
        (got,) = _run(do, name, {"x": X, "w": W, "b": B}, kernel=3, pad=1, group=2)
        np.testing.assert_array_equal(got, want)
    x1 = X[:, :, 0, :].copy()
    (y1,) = _run(do, "Conv1D", {"x1": x1, "w1": W[:, :, 0, :].copy()}, kernel=3, group=2)
    assert y1.shape == (2, 6, 3)


@DEVICES
def test_lp_pool_matches_caffe2(do):
    x = (np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4) % 5) - 2.0
    (y,) = _run(do, "LpPool", {"x": x}, kernel=2, stride=2, p=3.0)
    np.testing.assert_allclose(y.ravel(), [2.9240176677703857, 1.2599210739135742, 2.1544346809387207,  # Caffe2
                                           2.9240176677703857, 2.1544346809387207, 2.1544346809387207,
                                           2.9240176677703857, 2.1544346809387207], rtol=1e-6)
    (y,) = _run(do, "LpPool", {"x": x}, kernel=3, stride=1, pad=1)
    np.testing.assert_allclose(y.ravel()[:6], [3.605551242828369, 3.7416574954986572, 2.6457512378692627,  # Caffe2
                                               1.4142135381698608, 4.242640495300293, 4.795831680297852], rtol=1e-6)


class TestLpPoolGradient(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradient(self, gc, dc):
        x = np.linspace(-1.5, 2.0, 2 * 2 * 4 * 4, dtype=np.float32).reshape(2, 2, 4, 4)
        for args in ({"kernel": 2, "stride": 2, "p": 3.0}, {"kernel": 3, "pad": 1}):
            op = core.CreateOperator("LpPool", ["x"], ["y"], **args)
            self.assertDeviceChecks(dc, op, [x], [0])
            self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=1e-3, threshold=0.01)


@DEVICES
def test_global_pooling_ignores_a_kernel_given_with_it(do):
    x = np.linspace(-1, 1, 2 * 3 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3, 3)
    (y,) = _run(do, "AveragePool", {"x": x}, kernels=[4, 4, 4], global_pooling=True)
    np.testing.assert_allclose(y.reshape(2, 3), x.mean(axis=(2, 3, 4)), rtol=1e-5, atol=1e-7)
