"""Caffe2's ``legacy_pad`` in Conv and the pooling ops, forward and gradient, on both
backends: 0 NOTSET (the pads given), 1 VALID (no padding), 2 SAME (ceil(size / stride)
outputs, the padding split with the smaller half before; a stride past the kernel skips
input instead), 3 CAFFE_LEGACY_POOLING (Caffe's ceil mode: the begin pad counted twice,
the tail pad grown to fit).

Every figure is the real Caffe2's (torch 1.10.2's caffe2): the same inputs through
workspace.RunOperatorOnce, then the ops of core.GradientRegistry.GetBackwardPass with
dY = (1, 2, 3, ...) / 4 in Y's shape, printed with .tolist(). The inputs are small
integers, so most figures are exact. Beyond those runs, a grid of 1,500 random geometries
(every mode, strides past the kernel, NHWC, groups) was compared with Caffe2 the same way;
it agreed everywhere but where Caffe2 reads outside the image (docs/differences.md)."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc import hypothesis_test_util as hu
from dslc.ir.diagnostics import DSLError

X5 = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
X6 = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
W2 = np.array([[[[1, 2], [3, 4]]]], np.float32)
W3 = np.array([[[[1, 0, 2], [0, 1, 0], [3, 0, 1]]]], np.float32)
B = np.array([0.5], np.float32)
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])

# (op, inputs, args, Caffe2's Y[0, 0], Caffe2's dX[0, 0], Caffe2's dW flattened)
CASES = [
    # the case: SAME on 5 rows, kernel 2, stride 2: 3 outputs, the one pad row after
    ("Conv", {"x": X5, "w": W2, "b": B}, dict(kernel=2, stride=2, legacy_pad=2),
     [[41.5, 61.5, 31.5], [141.5, 161.5, 71.5], [62.5, 68.5, 24.5]],
     [[0.25, 0.5, 0.5, 1.0, 0.75], [0.75, 1.0, 1.5, 2.0, 2.25], [1.0, 2.0, 1.25, 2.5, 1.5],
      [3.0, 4.0, 3.75, 5.0, 4.5], [1.75, 3.5, 2.0, 4.0, 2.25]], [183.0, 111.75, 76.25, 44.0]),
    ("MaxPool", {"x": X5}, dict(kernel=2, stride=2, legacy_pad=2),
     [[6.0, 8.0, 9.0], [16.0, 18.0, 19.0], [21.0, 23.0, 24.0]],
     [[0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.25, 0.0, 0.5, 0.75], [0.0, 0.0, 0.0, 0.0, 0.0],
      [0.0, 1.0, 0.0, 1.25, 1.5], [0.0, 1.75, 0.0, 2.0, 2.25]], None),
    # SAME, kernel 3: one pad row each side; the padding counted only with count_include_pad
    ("AveragePool", {"x": X5}, dict(kernel=3, stride=2, legacy_pad=2),
     [[3.0, 4.5, 6.0], [10.5, 12.0, 13.5], [18.0, 19.5, 21.0]],
     [[0.0625, 0.1458333432674408, 0.0833333358168602, 0.2708333432674408, 0.1875],
      [0.2291666716337204, 0.4513888955116272, 0.222222238779068, 0.6597222089767456, 0.4375],
      [0.1666666716337204, 0.3055555820465088, 0.1388888955116272, 0.3888888955116272, 0.25],
      [0.6041666865348816, 1.076388955116272, 0.472222238779068, 1.2847222089767456, 0.8125],
      [0.4375, 0.7708333730697632, 0.3333333432674408, 0.8958333730697632, 0.5625]], None),
    ("AveragePool", {"x": X5}, dict(kernel=3, stride=2, legacy_pad=2, count_include_pad=1),
     [[1.3333333730697632, 3.0, 2.6666667461395264], [7.0, 12.0, 9.0], [8.0, 13.0, 9.333333015441895]],
     [[0.02777777798473835, 0.0833333358168602, 0.0555555559694767, 0.1388888955116272, 0.0833333358168602],
      [0.1388888955116272, 0.3333333432674408, 0.1944444477558136, 0.444444477558136, 0.25],
      [0.1111111119389534, 0.25, 0.1388888955116272, 0.3055555820465088, 0.1666666716337204],
      [0.3055555522441864, 0.6666666865348816, 0.3611111044883728, 0.7777777910232544, 0.4166666865348816],
      [0.1944444477558136, 0.4166666865348816, 0.2222222238779068, 0.4722222089767456, 0.25]], None),
    ("LpPool", {"x": X5 + 1}, dict(kernel=2, stride=2, legacy_pad=2, p=2.0),
     [[9.486832618713379, 13.03840446472168, 11.180339813232422], [28.460498809814453, 32.40370178222656, 25.0],
      [30.4138126373291, 33.241539001464844, 25.0]],
     [[0.02635231427848339, 0.05270462855696678, 0.11504475027322769, 0.1533930003643036, 0.3354102075099945],
      [0.15811388194561005, 0.1844661980867386, 0.3067860007286072, 0.34513425827026367, 0.670820415019989],
      [0.38650059700012207, 0.42163702845573425, 0.5014858841896057, 0.5400617718696594, 0.8999999761581421],
      [0.5621827244758606, 0.5973191261291504, 0.6943650841712952, 0.7329409718513489, 1.2000000476837158],
      [1.2083325386047363, 1.2658722400665283, 1.3838107585906982, 1.4439765214920044, 2.25]], None),
    # SAME with a stride past the kernel: a negative pad, the windows start inside the image
    ("MaxPool", {"x": X6}, dict(kernel=1, stride=3, legacy_pad=2), [[7.0, 10.0], [25.0, 28.0]],
     [[0.0] * 6, [0.0, 0.25, 0.0, 0.0, 0.5, 0.0], [0.0] * 6, [0.0] * 6, [0.0, 0.75, 0.0, 0.0, 1.0, 0.0],
      [0.0] * 6], None),
    ("Conv", {"x": X6, "w": W2, "b": B}, dict(kernel=2, stride=3, legacy_pad=2), [[48.5, 78.5], [228.5, 258.5]],
     [[0.25, 0.5, 0.0, 0.5, 1.0, 0.0], [0.75, 1.0, 0.0, 1.5, 2.0, 0.0], [0.0] * 6,
      [0.75, 1.5, 0.0, 1.0, 2.0, 0.0], [2.25, 3.0, 0.0, 3.0, 4.0, 0.0], [0.0] * 6], [36.0, 38.5, 51.0, 53.5]),
    # VALID: no padding, the last row no window reaches left out
    ("Conv", {"x": X6, "w": W3}, dict(kernel=3, stride=2, legacy_pad=1), [[61.0, 77.0], [157.0, 173.0]],
     [[0.25, 0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.25, 0.0, 0.5, 0.0, 0.0], [1.5, 0.0, 4.25, 0.0, 2.5, 0.0],
      [0.0, 0.75, 0.0, 1.0, 0.0, 0.0], [2.25, 0.0, 3.75, 0.0, 1.0, 0.0], [0.0] * 6],
     [24.0, 26.5, 29.0, 39.0, 41.5, 44.0, 54.0, 56.5, 59.0]),
    ("AveragePool", {"x": X5}, dict(kernel=2, stride=2, legacy_pad=1), [[3.0, 5.0], [13.0, 15.0]],
     [[0.0625, 0.0625, 0.125, 0.125, 0.0], [0.0625, 0.0625, 0.125, 0.125, 0.0], [0.1875, 0.1875, 0.25, 0.25, 0.0],
      [0.1875, 0.1875, 0.25, 0.25, 0.0], [0.0] * 5], None),
    # Caffe's pooling: the begin pads count twice (the end pads given are replaced)
    ("MaxPool", {"x": X5}, dict(kernel=2, stride=2, pads=[1, 1, 0, 0], legacy_pad=3),
     [[0.0, 2.0, 4.0], [10.0, 12.0, 14.0], [20.0, 22.0, 24.0]],
     [[0.25, 0.0, 0.5, 0.0, 0.75], [0.0] * 5, [1.0, 0.0, 1.25, 0.0, 1.5], [0.0] * 5,
      [1.75, 0.0, 2.0, 0.0, 2.25]], None),
    ("AveragePool", {"x": X5}, dict(kernel=3, stride=2, pad=1, legacy_pad=3, count_include_pad=1),
     [[1.3333333730697632, 3.0, 2.6666667461395264], [7.0, 12.0, 9.0], [8.0, 13.0, 9.333333015441895]],
     [[0.02777777798473835, 0.0833333358168602, 0.0555555559694767, 0.1388888955116272, 0.0833333358168602],
      [0.1388888955116272, 0.3333333432674408, 0.1944444477558136, 0.444444477558136, 0.25],
      [0.1111111119389534, 0.25, 0.1388888955116272, 0.3055555820465088, 0.1666666716337204],
      [0.3055555522441864, 0.6666666865348816, 0.3611111044883728, 0.7777777910232544, 0.4166666865348816],
      [0.1944444477558136, 0.4166666865348816, 0.2222222238779068, 0.4722222089767456, 0.25]], None),
    ("Conv", {"x": X5, "w": W2, "b": B}, dict(kernel=2, stride=2, legacy_pad=3),
     [[41.5, 61.5, 31.5], [141.5, 161.5, 71.5], [62.5, 68.5, 24.5]],
     [[0.25, 0.5, 0.5, 1.0, 0.75], [0.75, 1.0, 1.5, 2.0, 2.25], [1.0, 2.0, 1.25, 2.5, 1.5],
      [3.0, 4.0, 3.75, 5.0, 4.5], [1.75, 3.5, 2.0, 4.0, 2.25]], [183.0, 111.75, 76.25, 44.0]),
]


def _ids():
    return [f"{op}-legacy{args['legacy_pad']}-{k}" for k, (op, _, args, *_) in enumerate(CASES)]


@DEVICES
@pytest.mark.parametrize("case", range(len(CASES)), ids=_ids())
def test_legacy_pad_matches_caffe2(do, case):
    op_type, inputs, args, want_y, want_dx, want_dw = CASES[case]
    op = core.CreateOperator(op_type, list(inputs), ["y"], **args)
    (y,) = hu.runOpOnInput(do, op, list(inputs.values()))
    np.testing.assert_allclose(y[0, 0], want_y, rtol=1e-6)
    (grad_op,), grads = core.GradientRegistry.GetBackwardPass([op], {"y": "y_grad"})
    dy = (np.arange(y.size, dtype=np.float32).reshape(y.shape) + 1) / 4
    fed = dict(inputs, y=y, y_grad=dy)
    got = dict(zip(grad_op.output, hu.runOpOnInput(do, grad_op, [fed[n] for n in grad_op.input])))
    np.testing.assert_allclose(got[str(grads["x"])][0, 0], want_dx, rtol=1e-5, atol=1e-7)
    if want_dw is not None:
        np.testing.assert_allclose(got[str(grads["w"])].reshape(-1), want_dw, rtol=1e-6)
    if "b" in inputs:
        np.testing.assert_allclose(got[str(grads["b"])], [dy.sum()], rtol=1e-6)


@DEVICES
def test_same_padding_in_nhwc_is_nchw_transposed(do):
    (want,) = hu.runOpOnInput(do, core.CreateOperator("MaxPool", ["x"], ["y"], kernel=2, stride=2, legacy_pad=2),
                              [X5])
    (got,) = hu.runOpOnInput(do, core.CreateOperator("MaxPool", ["x"], ["y"], kernel=2, stride=2, legacy_pad=2,
                                                     order="NHWC"), [np.moveaxis(X5, 1, -1).copy()])
    np.testing.assert_array_equal(got[0, :, :, 0], [[6.0, 8.0, 9.0], [16.0, 18.0, 19.0], [21.0, 23.0, 24.0]])
    np.testing.assert_array_equal(np.moveaxis(got, -1, 1), want)


@pytest.mark.parametrize("op_type, args, words", [
    # Caffe2: "If you use legacy padding VALID or SAME, you should not specify any specific padding values."
    ("Conv", dict(kernel=2, legacy_pad=2, pad=1), "computes the pads itself"),
    ("MaxPool", dict(kernel=2, legacy_pad=1, pads=[0, 0, 0, 0]), "computes the pads itself"),
    # Caffe2: "Dilation not supported for legacy padding."
    ("Conv", dict(kernel=2, legacy_pad=2, dilation=2), "no dilation"),
    ("MaxPool", dict(kernel=2, legacy_pad=4), "none of Caffe2's paddings"),
    # Caffe2: "This should never happen" (Caffe's windows fewer than the pads allow)
    ("MaxPool", dict(kernel_h=1, kernel_w=1, pad=1, legacy_pad=3), "fewer than its pads allow"),
])
def test_geometry_caffe2_refuses_is_a_located_error(op_type, args, words):
    inputs = [X5, W2[:, :, :1, :1] if args.get("kernel_h") else W2][:1 + (op_type == "Conv")]
    op = core.CreateOperator(op_type, ["x", "w"][:len(inputs)], ["y"], **args)
    with pytest.raises(DSLError) as e:
        hu.runOpOnInput(hu.cpu_do, op, inputs)
    assert words in str(e.value) and e.value.loc.file.endswith("test_conv_padding.py")
