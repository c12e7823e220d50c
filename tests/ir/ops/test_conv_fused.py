"""ConvFused (ir/ops/conv_fused.py), the op fuse-conv makes of Conv -> test-mode SpatialBN
-> Sum -> Relu, on both backends, against the chain computed in plain numpy: a direct-loop
convolution written here, then Caffe2's SpatialBN formula (Y = (X - mean) / sqrt(var +
epsilon) scale + bias), the sum and max(., 0)."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc import hypothesis_test_util as hu

DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])


def _conv(x, w, pad, group):
    n, c, h, wd = x.shape
    m, cg, k, _ = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, wd + 2 * pad - k + 1
    y = np.zeros((n, m, oh, ow))
    for f in range(m):
        g = f // (m // group)
        for i in range(oh):
            for j in range(ow):
                y[:, f, i, j] = (xp[:, g * cg:(g + 1) * cg, i:i + k, j:j + k] * w[f]).sum(axis=(1, 2, 3))
    return y


@DEVICES
@pytest.mark.parametrize("group", [1, 4], ids=["dense", "depthwise"])
@pytest.mark.parametrize("parts", ["bias,bn,residual,relu", "bn,relu", "bias,relu", "residual"])
def test_fused_chain_equals_the_ops_one_by_one(do, group, parts):
    parts = parts.split(",")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // group, 3, 3)).astype(np.float32)
    b, scale, shift, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(4))
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    r = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    want = _conv(x, w, 1, group)
    inputs, names = [x, w], ["x", "w"]
    if "bias" in parts:
        want += b.reshape(1, 4, 1, 1)
        inputs.append(b), names.append("b")
    if "bn" in parts:
        at = (1, 4, 1, 1)
        want = (want - mean.reshape(at)) / np.sqrt(var.astype(np.float64) + 1e-3).reshape(at) * scale.reshape(at) \
            + shift.reshape(at)
        inputs += [scale, shift, mean, var]
        names += ["s", "t", "m", "v"]
    if "residual" in parts:
        want += r
        inputs.append(r), names.append("r")
    if "relu" in parts:
        want = np.maximum(want, 0)
    op = core.CreateOperator("ConvFused", names, ["y"], kernel=3, pad=1, group=group, epsilon=1e-3,
                             **{p: 1 for p in parts})
    (y,) = hu.runOpOnInput(do, op, inputs)
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    if "relu" in parts:
        assert (y == 0).any() and (y >= 0).all()


@DEVICES
def test_batch_norm_is_folded_into_weights_nothing_can_write_once(do, monkeypatch):
    """Read-only weights (a deploy model's filled ones are): the norm is folded into W once
    per weight array (runtime/derived.py), and a new weight array is folded again."""
    from dslc.ir.ops import conv_fused

    folds = []
    real = conv_fused.fold_bn
    monkeypatch.setattr(conv_fused, "fold_bn", lambda *a: folds.append(1) or real(*a))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    scale, shift, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    at = (1, 4, 1, 1)
    op = core.CreateOperator("ConvFused", ["x", "w", "s", "t", "m", "v"], ["y"], kernel=3, pad=1, epsilon=1e-3,
                             bn=1, relu=1)
    for a in (scale, shift, mean, var):
        a.setflags(write=False)
    for k in range(2):  # two weight arrays ("writes"), each run three times
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        w.setflags(write=False)
        want = np.maximum((_conv(x, w, 1, 1) - mean.reshape(at)) / np.sqrt(var.astype(np.float64) + 1e-3).reshape(at)
                          * scale.reshape(at) + shift.reshape(at), 0)
        for _ in range(3):
            (y,) = hu.runOpOnInput(do, op, [x, w, scale, shift, mean, var])
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        assert len(folds) == k + 1
    (y,) = hu.runOpOnInput(do, op, [x, w.copy(), scale, shift, mean, var])  # (writeable: scaled per call)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert len(folds) == 2
