"""Caffe2 operators dslc lacked (issue 43): Mish, Logit, ReplaceNaN, Where, IsMemberOf,
ElementwiseLinear, Perplexity, DotProductWithPadding (ir/ops/pointwise.py, activations.py);
PadImage, SpaceToBatch, BatchToSpace, InstanceNorm (ir/ops/spatial.py); their gradients.

Every figure below was read off the real Caffe2 (torch 1.10.2's caffe2.python through
shared/tools/caffe2-ref/run.sh): each op run in a net ``loss = SumElements(op(inputs) * w)``
with ``AddGradientOperators([loss])``, printing Y and each input's gradient (rounded to 1e-6).
Hand checks are in the comments; the gradients are also held to finite differences.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError

f32 = np.float32
X = np.array([[[[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]]]], f32)  # [1, 1, 2, 3]


def _grads(backend, op_type, ins, args, w, n_grads):
    workspace.ResetWorkspace()
    names = [f"in{i}" for i in range(len(ins))]
    for n, v in zip(names, ins):
        workspace.FeedBlob(n, v)
    workspace.FeedBlob("w", w)
    net = core.Net("n")
    y = getattr(net, op_type)(names, ["Y"], **args)
    loss = net.SumElements([net.Mul([y, "w"], "yw")], "loss")
    net.AddGradientOperators([loss])
    workspace.current().run(net, backend=backend)
    return [workspace.FetchBlob("Y")] + [workspace.FetchBlob(f"in{i}_grad") for i in range(n_grads)]


CASES = [
    ("PadImage", [X], {"pad_t": 1, "pad_l": 2, "pad_b": 1, "pad_r": 2, "mode": "reflect"},
     np.arange(28, dtype=f32).reshape(1, 1, 4, 7),
     [[[[-0.5, 0.0, 1.5, 0.0, -0.5, 0.0, 1.5], [2.0, -1.0, 0.5, -1.0, 2.0, -1.0, 0.5],
        [-0.5, 0.0, 1.5, 0.0, -0.5, 0.0, 1.5], [2.0, -1.0, 0.5, -1.0, 2.0, -1.0, 0.5]]]],
     [[[[[72.0, 102.0, 64.0], [44.0, 60.0, 36.0]]]]]),
    ("PadImage", [X], {"pad_t": 1, "pad_l": 1, "pad_b": 0, "pad_r": 1, "mode": "edge"},
     np.arange(15, dtype=f32).reshape(1, 1, 3, 5),
     [[[[0.5, 0.5, -1.0, 2.0, 2.0], [0.5, 0.5, -1.0, 2.0, 2.0], [1.5, 1.5, 0.0, -0.5, -0.5]]]],
     [[[[[12.0, 9.0, 24.0], [21.0, 12.0, 27.0]]]]]),  # dX[0,0] = w[0,0]+w[0,1]+w[1,0]+w[1,1] = 0+1+5+6
    ("PadImage", [X], {"pad": 1, "mode": "constant", "value": 9.0}, np.arange(20, dtype=f32).reshape(1, 1, 4, 5),
     [[[[9.0] * 5, [9.0, 0.5, -1.0, 2.0, 9.0], [9.0, 1.5, 0.0, -0.5, 9.0], [9.0] * 5]]],
     [[[[[6.0, 7.0, 8.0], [11.0, 12.0, 13.0]]]]]),  # the inner window of w
    ("Mish", [np.array([-2.0, -0.5, 0.0, 1.0, 3.0], f32)], {}, np.ones(5, f32),
     [-0.252501, -0.220744, 0.0, 0.865098, 2.986535],
     [[-0.108355, 0.289511, 0.6, 1.049036, 1.021107]]),
    ("Logit", [np.array([0.0, 0.2, 0.5, 0.9, 1.0], f32)], {"eps": 0.01}, np.ones(5, f32),
     [-4.59512, -1.386294, 0.0, 2.197224, 4.595121],
     [[0.0, 6.25, 4.0, 11.111109, 0.0]]),  # 1 / (x (1 - x)) inside [eps, 1 - eps]
    ("ElementwiseLinear", [np.array([[1, 2], [3, 4], [5, 6]], f32), np.array([2, -1], f32), np.array([0.5, 1], f32)],
     {}, np.array([[1, 0], [0, 1], [1, 1]], f32),
     [[2.5, -1.0], [6.5, -3.0], [10.5, -5.0]],
     [[[2.0, 0.0], [0.0, -1.0], [2.0, -1.0]], [6.0, 10.0], [2.0, 2.0]]),
    ("DotProductWithPadding", [np.array([[1, 2], [3, 4]], f32), np.array([[1, 1, 1], [2, 0, 1]], f32)],
     {"pad_value": 0.5}, np.array([1, 2], f32), [3.5, 6.5],  # 1 + 2 + 0.5; 6 + 0 + 0.5
     [[[1.0, 1.0], [4.0, 0.0]], [[1.0, 2.0, 0.5], [6.0, 8.0, 1.0]]]),
    ("DotProductWithPadding", [np.array([[1, 2], [3, 4]], f32), np.array([[1, 1, 1, 2], [2, 0, 1, 3]], f32)],
     {"replicate": 1}, np.array([1, 2], f32), [8.0, 21.0],  # [1 2 1 2].[1 1 1 2]
     [[[2.0, 3.0], [6.0, 6.0]], [[1.0, 2.0, 1.0, 2.0], [6.0, 8.0, 6.0, 8.0]]]),
    ("SpaceToBatch", [np.arange(16, dtype=f32).reshape(1, 1, 4, 4)], {"pad": 0, "block_size": 2},
     np.arange(16, dtype=f32).reshape(4, 1, 2, 2),
     [[[[0.0, 2.0], [8.0, 10.0]]], [[[1.0, 3.0], [9.0, 11.0]]], [[[4.0, 6.0], [12.0, 14.0]]], [[[5.0, 7.0], [13.0, 15.0]]]],
     [[[[[0.0, 4.0, 1.0, 5.0], [8.0, 12.0, 9.0, 13.0], [2.0, 6.0, 3.0, 7.0], [10.0, 14.0, 11.0, 15.0]]]]]),
    ("InstanceNorm", [np.array([[[1, 2, 4], [0, 3, 3]]], f32), np.array([2, 1], f32), np.array([0.5, -1], f32)],
     {"epsilon": 0.01}, np.array([[[1, 0, 2], [1, 1, -1]]], f32),
     [[[-1.63125, -0.032813, 3.164063], [-2.410691, -0.294654, -0.294654]]],
     [[[[0.907559, -1.371548, 0.463989], [0.002339, 0.704176, -0.706515]]], [1.598438, -1.410691], [3.0, 1.0]]),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_values_and_gradients_are_caffe2s(backend, case):
    op_type, ins, args, w, want_y, want_grads = case
    got = _grads(backend, op_type, ins, args, w, len(want_grads))
    np.testing.assert_allclose(got[0], np.array(want_y, f32), rtol=1e-5, atol=2e-6)
    assert got[0].dtype == np.float32
    for g, want in zip(got[1:], want_grads):
        np.testing.assert_allclose(g, np.array(want, f32), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_gradients_are_finite_differences(case):
    op_type, ins, args, w, _, want_grads = case
    if op_type == "Logit":  # (the clipped ends have no slope; keep to the inside)
        ins = [np.array([0.2, 0.3, 0.5, 0.7, 0.9], f32)]
    base = _grads("interp", op_type, ins, args, w, len(want_grads))
    for i in range(len(want_grads)):
        x = ins[i].astype(np.float64)
        num = np.zeros_like(x)
        for k in np.ndindex(x.shape):
            vals = []
            for h in (1e-2, -1e-2):
                moved = [v.copy() for v in ins]
                moved[i] = (x + h * (np.arange(x.size).reshape(x.shape) == np.ravel_multi_index(k, x.shape))).astype(f32)
                vals.append(float((_grads("interp", op_type, moved, args, w, 0)[0].astype(np.float64) * w).sum()))
            num[k] = (vals[0] - vals[1]) / 2e-2
        np.testing.assert_allclose(base[1 + i], num, rtol=2e-2, atol=2e-2)


def _one(backend, op_type, ins, **args):
    workspace.ResetWorkspace()
    names = [f"in{i}" for i in range(len(ins))]
    for n, v in zip(names, ins):
        workspace.FeedBlob(n, v)
    net = core.Net("one")
    net.Proto().op.extend([core.CreateOperator(op_type, names, ["Y"], **args)])
    workspace.current().run(net, backend=backend)
    return workspace.FetchBlob("Y")


def test_selections_and_reductions_are_caffe2s(backend):
    assert _one(backend, "Perplexity", [np.array([0.5, 0.25, 0.8], f32)]) == pytest.approx(2.154435, rel=1e-6)  # 1/0.1^(1/3)
    assert _one(backend, "IsMemberOf", [np.array([[1, 2], [3, 9]], np.int32)], value=[2, 9]).tolist() == \
        [[False, True], [False, True]]
    assert _one(backend, "ReplaceNaN", [np.array([np.nan, -1, np.nan], f32)], value=7.0).tolist() == [7.0, -1.0, 7.0]
    assert _one(backend, "Where", [np.array([True, False]), np.array([[1, 2], [3, 4]], f32),
                                   np.array([[5, 6], [7, 8]], f32)], broadcast_on_rows=1).tolist() == [[1, 2], [7, 8]]
    assert _one(backend, "Where", [np.array([True, False]), np.array([1, 2], f32),
                                   np.array([3, 4], f32)]).tolist() == [1, 4]


def test_nhwc_padding_and_space_to_batch_round_trip(backend):
    x = np.random.RandomState(3).rand(2, 4, 6, 3).astype(f32)
    y = _one(backend, "PadImage", [x], pad_t=2, pad_l=1, pad_b=1, pad_r=2, mode="reflect", order="NHWC")
    np.testing.assert_array_equal(y, np.pad(x, ((0, 0), (2, 1), (1, 2), (0, 0)), "reflect"))
    z = np.random.RandomState(4).rand(2, 3, 4, 6).astype(f32)
    b = _one(backend, "SpaceToBatch", [z], pad=1, block_size=2)
    assert b.shape == (8, 3, 3, 4)
    np.testing.assert_array_equal(_one(backend, "BatchToSpace", [b], pad=1, block_size=2), z)


def test_bad_arguments_are_located_errors():
    with pytest.raises(DSLError, match="mode must be one of constant, reflect, edge"):
        _one("interp", "PadImage", [X], pad=1, mode="wrap")
    with pytest.raises(DSLError, match="not a multiple of block_size 2"):
        _one("interp", "SpaceToBatch", [np.ones((1, 1, 3, 4), f32)], pad=0, block_size=2)
    with pytest.raises(DSLError, match="condition must be bool"):
        _one("interp", "Where", [np.ones(2, f32), np.ones(2, f32), np.ones(2, f32)])


def test_brew_instance_norm_makes_caffe2s_params_and_outputs():
    from dslc import brew
    from dslc.model_helper import ModelHelper
    workspace.ResetWorkspace()
    model = ModelHelper(name="in")
    out = brew.instance_norm(model, "x", "y", 2, epsilon=0.01)
    assert str(out) == "y" and [str(p) for p in model.params] == ["y_s", "y_b"]
    assert list(model.net.Proto().op[-1].output) == ["y", "y_sm", "y_siv"]
    workspace.FeedBlob("x", np.array([[[1, 2, 4], [0, 3, 3]]], f32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    # scale 1, bias 0: the InstanceNorm case above without its scale and bias (Caffe2: (Y - bias) / scale)
    np.testing.assert_allclose(workspace.FetchBlob("y")[0, 0], [-1.065625, -0.266406, 1.332031], atol=2e-5)
