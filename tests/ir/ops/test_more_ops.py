"""BatchMatMul, SigmoidCrossEntropyWithLogits, MakeTwoClass, Pow and Max/Min gradients.

Figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2, the same
inputs through workspace.RunOperatorOnce, printed with .tolist()); gradients are checked
against finite differences by the op-test harness on both devices.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from dslc import core, workspace
from dslc import hypothesis_test_util as hu

A = np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 10
B = np.arange(12, dtype=np.float32).reshape(2, 3, 2) / 10
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])


def _one(do, op_type, inputs, **args):
    return hu.runOpOnInput(do, core.CreateOperator(op_type, list(inputs), ["y"], **args), list(inputs.values()))[0]


@DEVICES
def test_values_match_caffe2(do):
    bmm = [[[0.10000000894069672, 0.12999999523162842], [0.2800000011920929, 0.4000000059604645]],
           [[1.7200000286102295, 1.9300000667572021], [2.440000057220459, 2.740000009536743]]]  # Caffe2
    np.testing.assert_allclose(_one(do, "BatchMatMul", {"a": A, "b": B}), bmm, rtol=1e-6)
    np.testing.assert_allclose(_one(do, "BatchMatMul", {"a": A, "bt": B.transpose(0, 2, 1).copy()}, trans_b=1),
                               bmm, rtol=1e-6)
    np.testing.assert_allclose(_one(do, "BatchMatMul", {"a": A, "b2": B[0].copy()}, broadcast=1),
                               [[[0.10000000894069672, 0.12999999523162842], [0.2800000011920929, 0.4]],
                                [[0.46000003814697266, 0.6700000166893005], [0.64000004529953, 0.940000057220459]]],
                               rtol=1e-6)  # Caffe2
    x = np.array([[-1.0, 0.5, 2.0], [0.0, -3.0, 1.0]], np.float32)
    t = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]], np.float32)
    np.testing.assert_allclose(_one(do, "SigmoidCrossEntropyWithLogits", {"x": x, "t": t}),
                               [0.3047555685043335, 0.5183320641517639], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(_one(do, "MakeTwoClass", {"p": np.array([0.25, 0.9], np.float32)}),
                               [[0.75, 0.25], [0.10000002384185791, 0.8999999761581421]], rtol=1e-7)  # Caffe2
    np.testing.assert_allclose(_one(do, "Pow", {"x": np.array([1.5, 2.0, 0.5], np.float32)}, exponent=2.5),
                               [2.755676031112671, 5.656854152679443, 0.1767766922712326], rtol=1e-6)  # Caffe2


class TestGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 2, 3)
        b = np.linspace(-0.5, 1, 12, dtype=np.float32).reshape(2, 3, 2)
        for args, ins in [({}, [a, b]), ({"trans_a": 1}, [a.transpose(0, 2, 1).copy(), b]),
                          ({"trans_b": 1}, [a, b.transpose(0, 2, 1).copy()]),
                          ({"broadcast": 1}, [a, b[0].copy()])]:
            op = core.CreateOperator("BatchMatMul", ["A", "B"], ["Y"], **args)
            self.assertDeviceChecks(dc, op, ins, [0])
            for i in range(2):
                self.assertGradientChecks(gc, op, [x.copy() for x in ins], i, [0])
        x = np.array([[-1.0, 0.5, 2.0], [0.3, -1.5, 1.0]], np.float32)
        t = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]], np.float32)
        self.assertGradientChecks(gc, core.CreateOperator("SigmoidCrossEntropyWithLogits", ["X", "T"], ["Y"]),
                                  [x, t], 0, [0])
        self.assertGradientChecks(gc, core.CreateOperator("MakeTwoClass", ["P"], ["Y"]),
                                  [np.array([0.25, 0.75], np.float32)], 0, [0])
        self.assertGradientChecks(gc, core.CreateOperator("Pow", ["X"], ["Y"], exponent=2.5),
                                  [np.array([0.5, 1.5, 2.0], np.float32)], 0, [0])
        u, v = np.array([0.1, 0.9, -0.4], np.float32), np.array([0.5, 0.2, -0.8], np.float32)
        for op_type in ("Max", "Min"):
            for i in range(2):
                self.assertGradientChecks(gc, core.CreateOperator(op_type, ["U", "V"], ["Y"]), [u.copy(), v.copy()],
                                          i, [0])


def test_max_gradient_goes_to_the_larger_input_as_caffe2():
    """Caffe2: Max(a, a reversed along the batch); the gradient of a is 1 where a is the larger."""
    net = core.Net("g")
    net.Max(["a", "r"], "m")
    net.SumElements("m", "l")
    grads = net.AddGradientOperators(["l"])
    workspace.FeedBlob("a", A)
    workspace.FeedBlob("r", A[::-1].copy())
    workspace.RunNetOnce(net)
    assert workspace.FetchBlob(grads["a"]).tolist() == [[[0.0] * 3] * 2, [[1.0] * 3] * 2]  # Caffe2


REDUCE_X = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 7) / 7
CAFFE2_REDUCTIONS = [  # (op, num_reduce_dim, expected): read off the real Caffe2
    ("ReduceFrontSum", 2, [2.571429, 2.428571, 2.285714, 2.142857]),
    ("ReduceFrontMean", 2, [0.428571, 0.404762, 0.380952, 0.357143]),
    ("ReduceFrontMax", 2, [0.857143, 0.857143, 0.857143, 0.714286]),
    ("ReduceBackSum", 1, [[0.857143, 2.142857, 1.428571], [1.714286, 2.0, 1.285714]]),
    ("ReduceBackMean", 1, [[0.214286, 0.535714, 0.357143], [0.428571, 0.5, 0.321429]]),
    ("ReduceBackMax", 1, [[0.428571, 0.857143, 0.571429], [0.857143, 0.714286, 0.857143]]),
]


@DEVICES
@pytest.mark.parametrize("op_type, k, want", CAFFE2_REDUCTIONS, ids=[c[0] for c in CAFFE2_REDUCTIONS])
def test_front_and_back_reductions_match_caffe2(do, op_type, k, want):
    np.testing.assert_allclose(_one(do, op_type, {"x": REDUCE_X}, num_reduce_dim=k), want, rtol=1e-5)


AXES_X = np.array([[1., -2., 3.], [0., 0., 0.], [4., 4., -1.]], np.float32)
AXES_DY = np.array([[1.], [2.], [3.]], np.float32)
CAFFE2_AXES_REDUCTIONS = [  # (op, Y over axes=[1], dX for AXES_DY): read off the real Caffe2
    ("ReduceMax", [[3.0], [0.0], [4.0]], [[0.0, 0.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 0.0]]),
    ("ReduceMin", [[-2.0], [0.0], [-1.0]], [[0.0, 1.0, 0.0], [2.0, 2.0, 2.0], [0.0, 0.0, 3.0]]),
    ("ReduceL1", [[6.0], [0.0], [9.0]], [[1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [3.0, 3.0, -3.0]]),
    ("ReduceL2", [[3.7416574954986572], [0.0], [5.74456262588501]],
     [[0.26726123690605164, -0.5345224738121033, 0.8017836809158325], [2.0, 2.0, 2.0],  # (Y = 0: dY)
      [2.0889317989349365, 2.0889317989349365, -0.5222329497337341]]),
]


@DEVICES
@pytest.mark.parametrize("op_type, y, dx", CAFFE2_AXES_REDUCTIONS, ids=[c[0] for c in CAFFE2_AXES_REDUCTIONS])
def test_reductions_over_axes_match_caffe2(do, op_type, y, dx):
    got = _one(do, op_type, {"x": AXES_X}, axes=[1], keepdims=1)
    np.testing.assert_allclose(got, y, rtol=1e-6)
    got_dx = _one(do, op_type + "Gradient", {"dy": AXES_DY, "x": AXES_X, "yy": np.asarray(y, np.float32)},
                  axes=[1], keepdims=1)
    np.testing.assert_allclose(got_dx, dx, rtol=1e-6)
    flat = _one(do, op_type, {"x": AXES_X}, keepdims=0)  # (every axis: a scalar)
    assert flat.shape == () and flat == pytest.approx(
        {"ReduceMax": 4.0, "ReduceMin": -2.0, "ReduceL1": 15.0, "ReduceL2": np.sqrt(47.0)}[op_type])


class TestAxesReductionGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        x = np.random.default_rng(5).permutation(24).reshape(2, 3, 4).astype(np.float32) / 10 + 0.05  # (no ties, no 0)
        for op_type in ("ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2"):
            op = core.CreateOperator(op_type, ["X"], ["Y"], axes=[0, 2], keepdims=0)
            self.assertGradientChecks(gc, op, [x.copy()], 0, [0], stepsize=1e-3, threshold=1e-2)


RL_X = (np.arange(24, dtype=np.float32).reshape(3, 2, 4) % 5) / 4
RL_LENGTHS = {"Front": np.array([1, 3, 2, 0, 3, 1, 2, 2], np.int32),  # one per column of X as [3, 8]
              "Back": np.array([4, 1, 0, 3, 2, 4], np.int32)}         # one per row of X as [6, 4]
# (side, what, Y, dX for dY = 1, 2, ...): read off the real Caffe2 (the same inputs through
# workspace.RunOperatorOnce), except at the length-0 slices (Front: column 3; Back: row 2),
# where Caffe2 returns the slice's first element 0.75 (the mean: inf) and dslc 0
# (docs/differences.md).
CAFFE2_LENGTH_REDUCTIONS = [
    ("Front", "Sum",
     [[0.0, 1.75, 0.5, 0.75], [1.5, 0.0, 1.25, 0.5]],
     [[[1.0, 2.0, 3.0, 0.0], [5.0, 6.0, 7.0, 8.0]], [[0.0, 2.0, 3.0, 0.0], [5.0, 0.0, 7.0, 8.0]], [[0.0, 2.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]]]),
    ("Front", "Mean",
     [[0.0, 0.5833330154418945, 0.25, np.inf], [0.5, 0.0, 0.625, 0.25]],
     [[[1.0, 0.6666669845581055, 1.5, 0.0], [1.6666669845581055, 6.0, 3.5, 4.0]], [[0.0, 0.6666669845581055, 1.5, 0.0], [1.6666669845581055, 0.0, 3.5, 4.0]], [[0.0, 0.6666669845581055, 0.0, 0.0], [1.6666669845581055, 0.0, 0.0, 0.0]]]),
    ("Front", "Max",
     [[0.0, 1.0, 0.5, 0.75], [1.0, 0.0, 1.0, 0.5]],
     [[[1.0, 0.0, 3.0, 0.0], [5.0, 6.0, 0.0, 8.0]], [[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 7.0, 0.0]], [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]),
    ("Back", "Sum",
     [[1.5, 1.0], [0.75, 2.25], [0.75, 1.5]],
     [[[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0], [4.0, 4.0, 4.0, 0.0]], [[5.0, 5.0, 0.0, 0.0], [6.0, 6.0, 6.0, 6.0]]]),
    ("Back", "Mean",
     [[0.375, 1.0], [np.inf, 0.75], [0.375, 0.375]],
     [[[0.25, 0.25, 0.25, 0.25], [2.0, 0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0], [1.3333330154418945, 1.3333330154418945, 1.3333330154418945, 0.0]], [[2.5, 2.5, 0.0, 0.0], [1.5, 1.5, 1.5, 1.5]]]),
    ("Back", "Max",
     [[0.75, 1.0], [0.75, 1.0], [0.5, 0.75]],
     [[[0.0, 0.0, 0.0, 1.0], [2.0, 0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0]], [[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 6.0]]]),
]


@DEVICES
@pytest.mark.parametrize("side, what, y, dx", CAFFE2_LENGTH_REDUCTIONS,
                         ids=[c[0] + c[1] for c in CAFFE2_LENGTH_REDUCTIONS])
def test_front_and_back_reductions_with_lengths_match_caffe2(do, side, what, y, dx):
    lengths = RL_LENGTHS[side]
    y = np.array(y, np.float32)
    if side == "Front":
        y[0, 3] = 0.0  # (the empty column)
    else:
        y[1, 0] = 0.0  # (the empty row)
    got = _one(do, f"Reduce{side}{what}", {"x": RL_X, "l": lengths}, num_reduce_dim=1)
    np.testing.assert_allclose(got, y, rtol=1e-5)
    dy = np.arange(1, y.size + 1, dtype=np.float32).reshape(y.shape)
    # the gradient takes X, or (Sum, Mean) X's shape
    second = {"x": RL_X, "yy": y} if what == "Max" else {"shape": np.array(RL_X.shape, np.int64)}
    got = _one(do, f"Reduce{side}{what}Gradient", {"dy": dy, **second, "l": lengths}, num_reduce_dim=1)
    np.testing.assert_allclose(got, dx, rtol=1e-5)


class TestReductionGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        x = np.random.default_rng(4).permutation(24).reshape(2, 3, 4).astype(np.float32) / 10  # (no ties)
        for op_type, k in [(c[0], c[1]) for c in CAFFE2_REDUCTIONS]:
            op = core.CreateOperator(op_type, ["X"], ["Y"], num_reduce_dim=k)
            self.assertGradientChecks(gc, op, [x.copy()], 0, [0], stepsize=1e-3, threshold=1e-2)


def test_pool_aliases_are_the_pools():
    """MaxPool2D is MaxPool under another of Caffe2's names (op and gradient)."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    for alias, name in (("MaxPool2D", "MaxPool"), ("AveragePool1D", "AveragePool")):
        args = dict(kernel=2, stride=2) if alias.endswith("2D") else dict(kernel=2, stride=2)
        xx = x if alias.endswith("2D") else x.reshape(1, 1, 16)
        got = _one(hu.cpu_do, alias, {"x": xx}, **args)
        np.testing.assert_array_equal(got, _one(hu.cpu_do, name, {"x": xx}, **args))
        ops, _ = core.GradientRegistry.GetGradientForOp(core.CreateOperator(alias, ["x"], ["y"], **args), ["y_grad"])
        assert [o.type for o in ops] == [name + "Gradient"]


@DEVICES
def test_utilities_match_caffe2(do):
    assert _one(do, "OneHot", {"i": np.array([2, 0, 3], np.int64), "n": np.array([4], np.int64)}).tolist() == \
        [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]  # Caffe2
    got = _one(do, "BatchOneHot", {"x": np.array([[5, 7], [6, 7], [5, 8]], np.int64),
                                   "lens": np.array([2, 1], np.int32), "vals": np.array([5, 6, 7], np.int64)})
    assert got.tolist() == [[1, 0, 1], [0, 1, 1], [1, 0, 0]] and got.dtype == np.int64  # Caffe2
    got = _one(do, "Size", {"d": np.zeros((2, 3), np.float32)})
    assert got.dtype == np.int64 and got.shape == () and int(got) == 6  # Caffe2
    got = _one(do, "Shape", {"d": np.zeros((4, 3, 2), np.float32)})
    assert got.tolist() == [4, 3, 2] and got.dtype == np.int64  # Caffe2
    got = _one(do, "Range", {"a": np.array(2, np.int32), "b": np.array(9, np.int32), "c": np.array(3, np.int32)})
    assert got.tolist() == [2, 5, 8] and got.dtype == np.int32  # Caffe2
    assert _one(do, "Range", {"b": np.array(9, np.int32)}).tolist() == list(range(9))  # Caffe2
    np.testing.assert_array_equal(_one(do, "Alias", {"x": A}), A)


@DEVICES
def test_prelu_and_cross_entropy_match_caffe2(do):
    x = np.array([[[[-1.0, 2.0]], [[-3.0, 0.5]]]], np.float32)
    s = np.array([0.1, 0.5], np.float32)
    np.testing.assert_allclose(_one(do, "PRelu", {"x": x, "s": s}), [[[[-0.1, 2.0]], [[-1.5, 0.5]]]], rtol=1e-6)
    dy = np.ones_like(x) * np.array([1.0, 2.0], np.float32)
    dx, ds = hu.runOpOnInput(do, core.CreateOperator("PReluGradient", ["y", "dy", "x", "s"], ["dx", "ds"]),
                             [x, dy, x, s])
    np.testing.assert_allclose(dx, [[[[0.1, 2.0]], [[0.5, 2.0]]]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(ds, [-1.0, -3.0])  # Caffe2
    p = np.array([[0.2, 0.8], [0.5, 0.5]], np.float32)
    t = np.array([[0.0, 1.0], [0.3, 0.7]], np.float32)
    np.testing.assert_allclose(_one(do, "CrossEntropy", {"p": p, "t": t}), [0.2231435328722, 0.6931471824645996],
                               rtol=1e-6)  # Caffe2


class TestPReluCrossEntropyGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        x = np.array([[[[-1.0, 2.0, 0.3]], [[-3.0, 0.5, -0.2]]]], np.float32)
        op = core.CreateOperator("PRelu", ["X", "S"], ["Y"])
        for i in range(2):
            self.assertGradientChecks(gc, op, [x.copy(), np.array([0.1, 0.5], np.float32)], i, [0])
        p = np.array([[0.2, 0.8], [0.4, 0.6]], np.float32)
        t = np.array([[0.0, 1.0], [0.3, 0.7]], np.float32)
        self.assertGradientChecks(gc, core.CreateOperator("CrossEntropy", ["P", "T"], ["Y"]), [p, t], 0, [0],
                                  stepsize=1e-3, threshold=1e-2)


@DEVICES
def test_reshape_to_a_shape_given_as_an_input(do):
    """Caffe2 (the same inputs through RunOperatorOnce): [4, 0, -1] makes (2, 3, 4) into (4, 3, 2);
    (0, 0, 0) makes an empty (0, 0) into (0, 0, 0)."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y, old = hu.runOpOnInput(do, core.CreateOperator("Reshape", ["x", "s"], ["y", "old"]),
                             [x, np.array([4, 0, -1], np.int32)])
    np.testing.assert_array_equal(y, x.reshape(4, 3, 2))
    assert old.tolist() == [2, 3, 4] and old.dtype == np.int64
    y = _one(do, "Reshape", {"e": np.zeros((0, 0), np.float32), "s": np.array([0, 0, 0], np.int64)})
    assert y.shape == (0, 0, 0)
    with pytest.raises(Exception, match=r"cannot make shape \[5, -1\] from \[2, 3, 4\]"):
        _one(do, "Reshape", {"x": x, "s": np.array([5, -1], np.int64)})


def test_reshape_takes_its_shape_once():
    from dslc.ir.diagnostics import DSLError
    net = core.Net("twice")
    net.Reshape(["x", "s"], ["y", "old"], shape=[4, -1])
    workspace.FeedBlob("x", np.zeros(4, np.float32))
    workspace.FeedBlob("s", np.array([4], np.int64))
    with pytest.raises(DSLError, match="both a shape input and the `shape` argument"):
        workspace.RunNetOnce(net)


class TestReshapeByInputGradient(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradient(self, gc, dc):
        op = core.CreateOperator("Reshape", ["X", "S"], ["Y", "old"])
        x = np.random.default_rng(6).standard_normal((2, 3, 4)).astype(np.float32)
        self.assertGradientChecks(gc, op, [x, np.array([3, -1], np.int64)], 0, [0])


@DEVICES
def test_lengths_and_diagonal_fills_match_caffe2(do):
    """Figures read off the real Caffe2 (the same inputs through RunOperatorOnce)."""
    got = _one(do, "LengthsRangeFill", {"l": np.array([2, 0, 3], np.int64)})
    assert got.tolist() == [0, 1, 0, 1, 2] and got.dtype == np.int32  # Caffe2
    got = _one(do, "LengthsToShape", {"l": np.array([2, 2, 2], np.int32)})
    assert got.tolist() == [3, 2] and got.dtype == np.int32  # Caffe2
    with pytest.raises(Exception, match="the lengths differ"):
        _one(do, "LengthsToShape", {"l": np.array([2, 3], np.int32)})
    got = _one(do, "DiagonalFill", {}, shape=[3, 4], value=2.5)
    assert got.tolist() == [[2.5, 0, 0, 0], [0, 2.5, 0, 0], [0, 0, 2.5, 0]] and got.dtype == np.float32  # Caffe2
    got = _one(do, "DiagonalFill", {}, shape=[2, 2, 2], value=1.0)
    assert got.tolist() == [[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]]]  # Caffe2
    got = _one(do, "DiagonalFill", {}, shape=[2, 3], value=7, dtype=core.DataType.INT64)
    assert got.tolist() == [[7, 0, 0], [0, 7, 0]] and got.dtype == np.int64  # Caffe2


@pytest.mark.parametrize("op_type, inputs", [
    ("LengthsRangeFill", {"l": np.array([10 ** 14], np.int64)}),
    ("OneHot", {"i": np.array([0], np.int64), "n": np.array([10 ** 14], np.int64)}),
    ("Range", {"n": np.array(10 ** 14, np.int64)}),
])
def test_a_size_read_from_an_input_is_bounded(op_type, inputs):
    """A length or size in the data that asks for more memory than the machine has is refused
    before anything is allocated."""
    with pytest.raises(Exception, match="one value may take .this machine's memory"):
        _one(hu.cpu_do, op_type, inputs)


@DEVICES
def test_uniform_int_fill_draws_int32_in_both_ends(do):
    """Caffe2's UniformIntFill: int32 draws in [min, max], max included (checked on the real
    Caffe2: 1000 draws in [-2, 3] hit both -2 and 3)."""
    y = _one(do, "UniformIntFill", {}, shape=[3000], min=-2, max=3)
    assert y.dtype == np.int32 and y.shape == (3000,)
    counts = np.bincount(y + 2, minlength=6)
    assert y.min() == -2 and y.max() == 3 and len(counts) == 6
    assert (np.abs(counts - 500) < 5 * np.sqrt(500)).all()  # (uniform: each value about 1/6 of the draws)
    with pytest.raises(Exception, match="int32"):
        _one(do, "UniformIntFill", {}, shape=[3], dtype=core.DataType.FLOAT)
