"""ConvTranspose in groups, forward and gradient, on both backends: X [N, C, H, W], W
[C, M / group, kh, kw], Y [N, M, H', W'], group g's input channels feed group g's output
channels only (Caffe2 1.10's ConvTranspose).

The figures are the real Caffe2's (torch 1.10.2's caffe2): the same inputs through
workspace.RunOperatorOnce, then the ops of core.GradientRegistry.GetBackwardPass with
dY = ((0, 1, 2, ...) % 5) / 4 in Y's shape, printed with .tolist(). A grid of 300 random
ConvTransposes (groups 1-3, pads, adj, legacy_pad 0-2) agreed with Caffe2 but where
adj equals the stride (docs/differences.md)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings

from dslc import core
from dslc import hypothesis_test_util as hu
from dslc.ir.diagnostics import DSLError, UnusedArgumentWarning

X = (np.arange(24, dtype=np.float32).reshape(1, 4, 2, 3) % 5) - 2
W1 = (np.arange(16, dtype=np.float32).reshape(4, 1, 2, 2) % 3) - 1
W2 = (np.arange(72, dtype=np.float32).reshape(4, 2, 3, 3) % 7) - 3
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])

# (inputs, args, Caffe2's Y as [M, H' W'], dX as [C, H W], dW as [C, M / group kh kw], db)
CASES = [
    ({"x": X, "w": W1, "b": np.array([0.5, -1.0], np.float32)}, dict(kernel=2, stride=2, group=2),
     [[2.5, -0.5, 1.5, 0.5, 0.5, 1.5, -0.5, 2.5, -0.5, 1.5, -0.5, 0.5, -0.5, 2.5, -1.5, -1.5, 2.5, -0.5, -0.5, -0.5,
       4.5, -1.5, -0.5, 2.5],
      [-2.0, -1.0, -2.0, -2.0, 3.0, -3.0, 0.0, -2.0, 1.0, -2.0, -3.0, 3.0, -2.0, 1.0, -2.0, 0.0, -2.0, -1.0, -2.0,
       -2.0, -1.0, -2.0, 0.0, -2.0]],
     [[-0.25, -0.75, -1.25, -0.75, -1.25, -0.5], [0.0] * 6, [1.25, 0.5, -0.25, 0.5, -0.25, 0.25],
      [-1.25, -0.5, 0.25, -0.5, 0.25, -0.25]],
     [[1.5, -1.5, -1.5, -2.0], [-0.25, 0.75, 0.75, 0.5], [0.5, 0.5, 0.5, -0.75], [-0.25, -1.25, -1.25, 1.5]],
     [11.5, 11.75]),
    ({"x": X, "w": W2}, dict(kernel=3, stride=2, pad=1, adj=1, group=2),
     [[0.0, -3.0, -1.0, -5.0, -2.0, -1.0, 7.0, -4.0, -5.0, -1.0, 3.0, 1.0, -3.0, 6.0, 6.0, 9.0, 0.0, -3.0, -1.0, 8.0,
       -8.0, -14.0, 5.0, 2.0],
      [-6.0, 3.0, -3.0, 2.0, 0.0, 1.0, -7.0, -6.0, 7.0, 7.0, 6.0, -3.0, 3.0, 5.0, 6.0, -11.0, -6.0, 5.0, 5.0, -14.0,
       -8.0, 8.0, -1.0, 3.0],
      [-1.0, -3.0, 0.0, 9.0, 6.0, 6.0, 1.0, 7.0, 3.0, -1.0, -5.0, -11.0, -3.0, -7.0, -2.0, -5.0, -1.0, 0.0, 2.0,
       2.0, 2.0, 2.0, 2.0, 3.0],
      [1.0, 5.0, -1.0, 8.0, -8.0, -8.0, -3.0, 0.0, -7.0, -16.0, 4.0, 5.0, 5.0, -1.0, 3.0, 2.0, 1.0, 2.0, 3.0, 1.0,
       0.0, 2.0, -3.0, -2.0]],
     [[1.75, -2.5, 1.25, -4.25, -2.25, -4.0], [0.25, 0.5, 1.25, 2.25, 4.0, 0.5],
      [0.5, -0.75, -1.75, -1.25, -1.5, -3.75], [-1.0, 3.5, 3.0, 3.0, -1.0, -1.0]],
     [[-1.0, 1.75, 2.0, 1.25, 1.5, -1.5, 1.0, -1.5, -2.0, -1.0, -1.0, 1.75, -1.0, -0.5, 1.5, 1.25, 1.5, -1.5],
      [-2.0, -1.0, -1.25, -0.75, -0.25, 0.75, -1.25, 0.75, 0.5, -1.25, -2.0, -1.0, -1.5, -1.25, -0.25, -0.75, -0.25,
       0.75],
      [0.0, -2.25, -0.5, 1.25, 0.5, 0.5, 0.5, 0.5, 0.5, -1.0, -1.5, -2.25, 0.75, -0.75, 0.5, 1.25, 0.5, 0.5],
      [0.5, -0.25, 1.0, 2.25, 0.75, -0.25, 0.0, -0.25, -1.25, 0.25, -0.25, -0.25, 2.0, 1.75, 0.75, 2.25, 0.75,
       -0.25]], None),
    # legacy_pad SAME (and VALID): no padding, as Caffe2's ConvTranspose
    ({"x": X, "w": W1}, dict(kernel=2, stride=1, group=2, legacy_pad=2),
     [[2.0, 0.0, 0.0, 1.0, -2.0, 1.0, 0.0, -1.0, -1.0, 3.0, -3.0, 2.0],
      [-1.0, -1.0, 3.0, -2.0, 0.0, 2.0, -3.0, 4.0, -1.0, -1.0, 0.0, -1.0]],
     [[1.0, -0.5, -0.75, -1.25, 1.0, -0.5], [-0.75, 0.5, 0.5, -0.75, -0.75, 0.5],
      [0.25, 0.5, 2.0, 0.0, 0.25, 0.5], [-0.75, -1.0, -1.25, -0.5, -0.75, -1.0]],
     [[0.25, -1.5, 0.75, 0.25], [2.25, -0.5, -1.25, 2.25], [1.75, -0.75, 1.75, 1.75], [0.5, 3.25, 0.25, 0.5]], None),
]


@DEVICES
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grouped_conv_transpose_matches_caffe2(do, case):
    inputs, args, want_y, want_dx, want_dw, want_db = CASES[case]
    op = core.CreateOperator("ConvTranspose", list(inputs), ["y"], **args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedArgumentWarning)  # (group is read, not ignored)
        (y,) = hu.runOpOnInput(do, op, list(inputs.values()))
    np.testing.assert_array_equal(y.reshape(y.shape[1], -1), want_y)
    (grad_op,), grads = core.GradientRegistry.GetBackwardPass([op], {"y": "y_grad"})
    dy = (np.arange(y.size, dtype=np.float32).reshape(y.shape) % 5) / 4
    fed = dict(inputs, y=y, y_grad=dy)
    got = dict(zip(grad_op.output, hu.runOpOnInput(do, grad_op, [fed[n] for n in grad_op.input])))
    np.testing.assert_allclose(got[str(grads["x"])].reshape(4, -1), want_dx, rtol=1e-6)
    np.testing.assert_allclose(got[str(grads["w"])].reshape(4, -1), want_dw, rtol=1e-6)
    if want_db is not None:
        np.testing.assert_allclose(got[str(grads["b"])], want_db, rtol=1e-6)


def _by_definition(x, w, b, stride, pad, adj, group):
    """ConvTranspose by its definition: each input pixel adds its kernel-weighted value to
    its group's output channels, then the pads are cropped."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    full = np.zeros((n, mg * group, (h - 1) * stride + kh + adj, (wd - 1) * stride + kw + adj))
    for i, ch, r, s in np.ndindex(n, c, h, wd):
        g = ch // (c // group)
        full[i, g * mg:(g + 1) * mg, r * stride:r * stride + kh, s * stride:s * stride + kw] += x[i, ch, r, s] * w[ch]
    out = full[:, :, pad:full.shape[2] - pad, pad:full.shape[3] - pad]
    return out + b.reshape(1, -1, 1, 1)


@pytest.mark.parametrize("stride, pad, adj, group", [(1, 0, 0, 3), (2, 1, 1, 3), (3, 1, 2, 1), (2, 0, 1, 6)])
def test_conv_transpose_is_its_definition(stride, pad, adj, group):
    rng = np.random.default_rng(stride * 7 + group)
    x = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(2 * group).astype(np.float32)
    want = _by_definition(x, w, b, stride, pad, adj, group)
    for do in hu.device_options:
        (y,) = hu.runOpOnInput(do, core.CreateOperator("ConvTranspose", ["x", "w", "b"], ["y"], kernel_h=3,
                                                       kernel_w=2, stride=stride, pad=pad, adj=adj, group=group),
                               [x, w, b])
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


class TestGroupedConvTransposeGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        rng = np.random.default_rng(8)
        ins = [rng.standard_normal((1, 4, 3, 2)).astype(np.float32),
               rng.standard_normal((4, 3, 2, 2)).astype(np.float32), rng.standard_normal(6).astype(np.float32)]
        op = core.CreateOperator("ConvTranspose", ["X", "W", "b"], ["Y"], kernel=2, stride=2, pad=1, adj=1, group=2)
        self.assertDeviceChecks(dc, op, ins, [0])
        for i in range(3):
            self.assertGradientChecks(gc, op, [a.copy() for a in ins], i, [0], stepsize=1e-2, threshold=1e-2)


@pytest.mark.parametrize("args, inputs, words", [
    (dict(kernel=2, group=3), [X, W1], "do not split into 3 groups"),
    (dict(kernel=2, group=2), [X, W1, np.zeros(4, np.float32)], "not [2]"),
    (dict(kernel=2, legacy_pad=3), [X, W1], "CAFFE_LEGACY_POOLING"),  # (Caffe2 aborts the process)
    (dict(kernel=2, stride=2, adj=3), [X, W1], "adj"),
])
def test_conv_transpose_geometry_errors_are_located(args, inputs, words):
    op = core.CreateOperator("ConvTranspose", ["x", "w", "b"][:len(inputs)], ["y"], **args)
    with pytest.raises(DSLError) as e:
        hu.runOpOnInput(hu.cpu_do, op, inputs)
    assert words in str(e.value) and e.value.loc.file.endswith("test_conv_transpose.py")
