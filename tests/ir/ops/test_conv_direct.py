"""The convolutions that take their own road (ir/ops/conv_direct.py, conv_math): depthwise
(numba's direct loops; numpy's window GEMMs), grouped (the GEMM over the batch's windows
for small images), 1x1 (one GEMM straight on the image), forward and gradient, on both
backends, against the real Caffe2.

The figures: torch 1.10.2's caffe2 (/tmp/caffe2-venv), ``Conv`` and ``ConvGradient``
through workspace.RunOperatorOnce on the inputs ``_inputs`` makes (the same formulas
there), each output reduced to sum(a * cos(arange(a.size))) in float64 and printed with
repr: a weighted sum that a wrong element, a transposed axis or a lost border changes.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc import hypothesis_test_util as hu
from dslc.backends.numba import conv as compiled

DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])

# (name, X's shape, M, group, kernel, arguments, Y's shape, then Caffe2's weighted sums of Y, dW, dX)
CAFFE2 = [
    ('depthwise pad 1', (2, 4, 6, 5), 4, 4, 3, {'pad': 1}, [2, 4, 6, 5],
     2.155725639831537, -5.047298349612728, -1.2515412112530646),
    ('depthwise stride 2 pad_t', (2, 4, 7, 6), 4, 4, 3, {'stride': 2, 'pad_t': 1, 'pad_l': 0, 'pad_b': 2, 'pad_r': 1},
     [2, 4, 4, 3], 0.7370831978736534, -0.5078248638837712, 1.4981212904645014),
    ('depthwise VALID', (1, 3, 7, 6), 3, 3, 3, {'stride': 2, 'legacy_pad': 1}, [1, 3, 3, 2],
     0.9874403116513281, 1.1983333729264718, -0.3934211737518704),
    ('depthwise SAME', (1, 3, 7, 6), 3, 3, 3, {'stride': 2, 'legacy_pad': 2}, [1, 3, 4, 3],
     0.1972307537905691, -0.2941712995321968, 0.8423166842458324),
    ('depthwise dilation', (2, 3, 8, 7), 3, 3, 3, {'dilation': 2, 'pad': 2}, [2, 3, 8, 7],
     -0.9121171077553394, -0.6202807932190685, -0.28063745342037516),
    ('grouped 3x3', (2, 6, 5, 5), 4, 2, 3, {'pad': 1}, [2, 4, 5, 5],
     0.893292178629217, -1.2624140900819167, 0.13422583643247354),
    ('grouped 1x1', (2, 6, 5, 4), 9, 3, 1, {}, [2, 9, 5, 4],
     -1.637058073270035, 0.10025576604886643, -0.8220464039332417),
    ('1x1', (3, 5, 4, 4), 7, 1, 1, {}, [3, 7, 4, 4],
     -2.5067778621865595, 2.7978176466250706, -0.3044786207553264),
    ('1x1 stride 2', (2, 5, 5, 6), 3, 1, 1, {'stride': 2}, [2, 3, 3, 3],
     0.5615422708210597, -0.3126743618834479, -0.771607166214069),
    ('1x1 SAME stride 2', (2, 5, 5, 6), 3, 1, 1, {'stride': 2, 'legacy_pad': 2}, [2, 3, 3, 3],
     0.5615422708210597, -0.3126743618834479, -0.771607166214069),
]


def _inputs(n, c, h, w, m, cg, k):
    x = ((np.arange(n * c * h * w) % 11) / 11 - 0.45).astype(np.float32).reshape(n, c, h, w)
    wt = ((np.arange(m * cg * k * k) % 7) / 7 - 0.4).astype(np.float32).reshape(m, cg, k, k)
    return x, wt


def _weighted(a):
    return float((a.astype(np.float64) * np.cos(np.arange(a.size)).reshape(a.shape)).sum())


@DEVICES
@pytest.mark.parametrize("case", CAFFE2, ids=[c[0] for c in CAFFE2])
def test_forward_and_gradient_match_caffe2(do, case):
    name, xs, m, group, k, args, y_shape, y_sum, dw_sum, dx_sum = case
    x, w = _inputs(*xs, m, xs[1] // group, k)
    b = np.linspace(-0.5, 0.5, m).astype(np.float32)
    (y,) = hu.runOpOnInput(do, core.CreateOperator("Conv", ["x", "w", "b"], ["y"], kernel=k, group=group, **args),
                           [x, w, b])
    assert list(y.shape) == y_shape and y.dtype == np.float32
    dy = ((np.arange(y.size) % 5) / 5 - 0.3).astype(np.float32).reshape(y.shape)
    dw, db, dx = hu.runOpOnInput(do, core.CreateOperator("ConvGradient", ["x", "w", "dy"], ["dw", "db", "dx"],
                                                         kernel=k, group=group, **args), [x, w, dy])
    assert dw.shape == w.shape and dx.shape == x.shape
    for got, want in ((y, y_sum), (dw, dw_sum), (dx, dx_sum)):
        assert _weighted(got) == pytest.approx(want, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-6)


def test_numba_runs_depthwise_as_direct_loops():
    """A depthwise Conv on numba is the compiled loop (the numpy fallback would give the
    same figures): its signatures say it ran."""
    case = CAFFE2[0]
    x, w = _inputs(*case[1], case[2], 1, case[4])
    hu.runOpOnInput(hu.device_options[1], core.CreateOperator("Conv", ["x", "w"], ["y"], kernel=3, group=4, pad=1),
                    [x, w])
    assert compiled._depthwise_2d.signatures


def _depthwise_reference(x, w, stride, pads, dilation):
    """Y of a depthwise convolution in float64, straight from its definition: x zero-padded
    by np.pad, each kernel offset's strided slice times that offset's per-channel weight."""
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, pads, dilation
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - (dh * (kh - 1) + 1)) // sh + 1
    ow = (xp.shape[3] - (dw * (kw - 1) + 1)) // sw + 1
    y = np.zeros(x.shape[:2] + (oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            y += w[:, 0, ky, kx].astype(np.float64)[None, :, None, None] * \
                xp[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh, kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
    return y


# (X's shape, kernel (h, w), strides, pads (t, l, b, r), dilations): unit strides (one run over
# the padded frame per kernel offset), mixed and non-unit strides (row by row), odd kernels
# and dilations, pads that leave rows and columns of X unread
DEPTHWISE = [((2, 3, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 4, 7, 12), (5, 3), (1, 1), (2, 0, 1, 2), (1, 2)),
             ((2, 2, 10, 9), (3, 3), (1, 2), (1, 1, 0, 1), (1, 1)),
             ((1, 3, 11, 8), (3, 2), (2, 1), (0, 1, 2, 0), (2, 1)),
             ((2, 5, 8, 8), (3, 3), (2, 2), (1, 1, 0, 0), (1, 1)),
             ((1, 2, 9, 9), (3, 3), (3, 3), (0, 0, 0, 0), (1, 1))]


@DEVICES
@pytest.mark.parametrize("case", DEPTHWISE, ids=[f"{c[1]}s{c[2]}p{c[3]}d{c[4]}" for c in DEPTHWISE])
def test_depthwise_matches_its_definition(do, case):
    xs, (kh, kw), stride, pads, dilation = case
    rng = np.random.default_rng(sum(xs))
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((xs[1], 1, kh, kw)).astype(np.float32)
    args = dict(zip(("pad_t", "pad_l", "pad_b", "pad_r"), pads), stride_h=stride[0], stride_w=stride[1],
                dilation_h=dilation[0], dilation_w=dilation[1], kernel_h=kh, kernel_w=kw)
    (y,) = hu.runOpOnInput(do, core.CreateOperator("Conv", ["x", "w"], ["y"], group=xs[1], **args), [x, w])
    np.testing.assert_allclose(y, _depthwise_reference(x, w, stride, pads, dilation), rtol=1e-5, atol=1e-5)


def test_numpy_depthwise_blocks_of_planes_match_its_definition(monkeypatch):
    """The interpreter's unit-stride depthwise pass (conv_direct.depthwise_frame) over blocks
    of a few planes (a block boundary inside an image, a short last block), as over the
    whole batch."""
    from dslc.ir.ops import conv_direct

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5, 6, 7)).astype(np.float32)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    want = _depthwise_reference(x, w, (1, 1), (1, 2, 0, 1), (1, 1))
    args = dict(pad_t=1, pad_l=2, pad_b=0, pad_r=1, kernel=3, group=5)
    for block in (conv_direct.PLANE_BLOCK_BYTES, 4 * 8 * 9 * 4):  # (all 15 planes; 3 planes a block)
        monkeypatch.setattr(conv_direct, "PLANE_BLOCK_BYTES", block)
        (y,) = hu.runOpOnInput(hu.device_options[0], core.CreateOperator("Conv", ["x", "w"], ["y"], **args), [x, w])
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
