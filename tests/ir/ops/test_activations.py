"""Caffe2's activation ops (ir/ops/activations.py) through the op-test harness, on both devices.

References are numpy written here from each op's definition (Caffe2's operator docs);
gradients are checked against finite differences by the harness; a few values are
worked by hand.
"""
from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from dslc import core, workspace
from dslc import hypothesis_test_util as hu

FEW = settings(max_examples=3, deadline=None, derandomize=True)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


REFERENCES = {  # name -> (numpy reference of X and the op's arguments, arguments, inputs kept away from kinks)
    "LeakyRelu": (lambda x, alpha: np.where(x > 0, x, alpha * x), {"alpha": 0.3}),
    "Elu": (lambda x, alpha: np.where(x > 0, x, alpha * (np.exp(x) - 1)), {"alpha": 1.5}),
    "ReluN": (lambda x, n: np.minimum(np.maximum(x, 0), n), {"n": 0.5}),
    "Softsign": (lambda x: x / (1 + np.abs(x)), {}),
    "Softplus": (lambda x: np.log(1 + np.exp(x)), {}),
    "Swish": (lambda x: x / (1 + np.exp(-x)), {}),
    "HardSigmoid": (lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), {"alpha": 0.4, "beta": 0.5}),
    "Cube": (lambda x: x ** 3, {}),
    "Sin": (np.sin, {}),
    "Cos": (np.cos, {}),
    "Gelu": (lambda x: x * (1 + _erf(x / math.sqrt(2))) / 2, {}),
}
POSITIVE = {  # defined (or differentiable) only away from 0: drawn from [0.2, 1]
    "Reciprocal": (lambda x: 1 / x, {}),
    "Rsqrt": (lambda x: 1 / np.sqrt(x), {}),
    "Cbrt": (np.cbrt, {}),
}
# inputs stay this far from each op's kinks (0, and HardSigmoid's +-1.25 at alpha 0.4)
AWAY = hu.floats(min_value=0.1, max_value=1.0).flatmap(lambda m: st.sampled_from([m, -m]))


class TestActivations(hu.HypothesisTestCase):

    def _check(self, name, x, gc, dc, table):
        ref, args = table[name]
        op = core.CreateOperator(name, ["X"], ["Y"], **args)
        self.assertReferenceChecks(gc, op, [x], lambda x: (ref(x.astype(np.float64), **args).astype(np.float32),),
                                   threshold=1e-5)
        self.assertDeviceChecks(dc, op, [x], [0], threshold=1e-5)
        self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=1e-2, threshold=2e-2)

    @FEW
    @given(name=st.sampled_from(sorted(REFERENCES)), data=st.data(), **hu.gcs)
    def test_signed_inputs(self, name, data, gc, dc):
        x = np.array(data.draw(st.lists(AWAY, min_size=1, max_size=6)), dtype=np.float32)
        if name == "HardSigmoid":
            x = x * np.float32(0.5)  # inside (-1.25, 1.25) the op is linear: away from its kinks
        self._check(name, x, gc, dc, REFERENCES)

    @FEW
    @given(name=st.sampled_from(sorted(POSITIVE)),
           x=hu.tensor(max_dim=2, elements=hu.floats(min_value=0.2, max_value=1.0)), **hu.gcs)
    def test_positive_inputs(self, name, x, gc, dc):
        self._check(name, x, gc, dc, POSITIVE)


def test_every_activation_on_both_devices():
    """One run of each op and each of its gradients, interp and numba against the references."""
    for name, (ref, args) in {**REFERENCES, **POSITIVE}.items():
        x = np.array([0.3, 0.7, -0.4, -0.9], dtype=np.float32)
        if name in POSITIVE:
            x = np.abs(x)
        for do in hu.device_options:
            got = hu.runOpOnInput(do, core.CreateOperator(name, ["X"], ["Y"], **args), [x])[0]
            np.testing.assert_allclose(got, ref(x.astype(np.float64), **args), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
            assert got.dtype == np.float32


def test_values_worked_by_hand():
    """LeakyRelu(-2, alpha 0.5) = -1; Elu(-ln 2, alpha 2) = 2 (1/2 - 1) = -1; ReluN(7, n 6) = 6;
    HardSigmoid(1) = 0.2 + 0.5 = 0.7; Softsign(3) = 3/4; and Elu's gradient at y = -1, alpha 2,
    dY = 1: y + alpha = 1."""
    cases = [("LeakyRelu", -2.0, {"alpha": 0.5}, -1.0), ("Elu", -math.log(2), {"alpha": 2.0}, -1.0),
             ("ReluN", 7.0, {"n": 6.0}, 6.0), ("HardSigmoid", 1.0, {}, 0.7), ("Softsign", 3.0, {}, 0.75)]
    for do in hu.device_options:
        for name, x, args, want in cases:
            got = hu.runOpOnInput(do, core.CreateOperator(name, ["X"], ["Y"], **args),
                                  [np.array([x], np.float32)])[0]
            np.testing.assert_allclose(got, [want], rtol=1e-6, err_msg=name)
        workspace.ResetWorkspace()
        grad = hu.runOpOnInput(do, core.CreateOperator("EluGradient", ["Y", "dY"], ["dX"], alpha=2.0),
                               [np.array([-1.0], np.float32), np.array([1.0], np.float32)])[0]
        np.testing.assert_allclose(grad, [1.0], rtol=1e-6)


def test_relu_gradient_masks_non_finite_dy_and_keeps_signed_zeros_as_caffe2():
    # Caffe2 (torch 1.10.2's caffe2, ReluGradient through RunOperatorOnce, .tolist() and np.signbit):
    # [0.0, 0.0, 0.0, -0.0, nan, 0.0, 5.0], only the fourth negative
    y = np.array([0, 0, 0, 2, 3, 0, 1], np.float32)
    dy = np.array([np.nan, np.inf, -np.inf, -0.0, np.nan, -2, 5], np.float32)
    for do in hu.device_options:
        for shape in ((7,), (7, 1)):
            workspace.ResetWorkspace()
            workspace.FeedBlob("y", y.reshape(shape))
            workspace.FeedBlob("dy", dy.reshape(shape))
            workspace.RunOperatorOnce(core.CreateOperator("ReluGradient", ["y", "dy"], ["dx"], device_option=do))
            dx = workspace.FetchBlob("dx").reshape(-1)
            assert dx.dtype == np.float32 and dx.shape == (7,)
            np.testing.assert_array_equal(dx, [0, 0, 0, 0, np.nan, 0, 5])
            assert np.signbit(dx).tolist() == [False, False, False, True, False, False, False]
