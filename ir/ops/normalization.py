"""Batch normalization of images (Caffe2's SpatialBN) and its gradient.

    training: Y = (X - mean_b) / sqrt(var_b + epsilon) scale + bias, per channel, with the
              batch's mean and (biased) variance; the running mean and variance move by
              momentum toward the batch's (the variance unbiased: n / (n - 1)), and the
              batch's mean and 1 / std are saved for the gradient.
    is_test:  the running mean and variance instead of the batch's.
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, REQUIRED, declare, type_error
from ..types import TensorType
from .nn import floats

_BN = {"is_test": 0, "epsilon": 1e-5, "momentum": 0.9, "order": "NCHW", "engine": "", "num_batches": 1}


def _channels(x, order):
    if x.shape is None:
        return None
    if len(x.shape) < 2:
        type_error(f"SpatialBN needs X of rank >= 2, got {list(x.shape)}", "X is [N, C, ...] (NCHW)")
    return x.shape[1] if order == "NCHW" else x.shape[-1]


def _spatial_bn(types, attrs, n):
    x, scale, bias, mean, var, *sums = floats("SpatialBN", types)
    if len(sums) not in (0, 2):
        type_error(f"SpatialBN takes 5 inputs, or 7 with the batches' channel sums and sums of squares, "
                   f"got {len(types)}", "pass (X, scale, bias, mean, var[, sums, sumsq])")
    if sums and attrs["is_test"]:
        type_error("SpatialBN with is_test=1 takes no batch sums", "drop the sums and sumsq inputs")
    c = _channels(x, attrs["order"])
    for what, t in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)) + tuple(zip(("sums", "sumsq"), sums)):
        if c is not None and t.shape is not None and tuple(t.shape) != (c,):
            type_error(f"SpatialBN's {what} has shape {list(t.shape)}, not [{c}]", "one value per channel")
    if attrs["is_test"]:
        if n != 1:
            type_error(f"SpatialBN with is_test=1 has one output, got {n}", "name only Y")
        return [x]
    if n != 5:
        type_error(f"SpatialBN in training has 5 outputs, got {n}",
                   "name Y, the running mean and variance (in place), the saved mean and 1 / std")
    vec = TensorType(x.dtype, None if c is None else (c,))
    return [x, vec, vec, vec, vec]


declare("SpatialBN", (5, 7), _spatial_bn, results=(1, 5), attrs=dict(_BN), traits={PURE},
        doc="(X, scale, bias, running mean, running var) -> Y (is_test), or (Y, running mean, running "
            "var, saved mean, saved 1 / std) in training: per-channel batch normalization; with the "
            "channel sums and sums of squares of num_batches batches as 2 more inputs, their statistics")
declare("SpatialBNGradient", (5, 7), lambda t, a, n: [floats("SpatialBNGradient", t)[0],
                                                      floats("SpatialBNGradient", t)[1],
                                                      floats("SpatialBNGradient", t)[1]],
        results=3, attrs=dict(_BN), traits={PURE},
        doc="(dX, dscale, dbias) from (X, scale, dY, saved mean, saved 1 / std[, dscale and dbias summed "
            "over num_batches batches]) of SpatialBN")
no_gradient("SpatialBNGradient")


# Batch normalization over several batches (data-parallel replicas): each computes its
# channel statistics, they are summed, and SpatialBN normalizes with the total.
def _channel_stats(types, attrs, n, name="ChannelStats"):
    x = floats(name, types)[0]
    c = _channels(x, attrs["order"])
    vec = TensorType(x.dtype, None if c is None else (c,))
    return [vec, vec]


declare("ChannelStats", 1, _channel_stats, results=2, attrs={"order": "NCHW"}, traits={PURE},
        doc="(the sum, the sum of squares) of each channel of X")
declare("ChannelBackpropStats", 4, lambda t, a, n: _channel_stats(t, a, n, "ChannelBackpropStats"),
        results=2, attrs={"order": "NCHW"}, traits={PURE},
        doc="(dscale, dbias) of one batch from (X, saved mean, saved 1 / std, dY): the sums over each "
            "channel of dY (X - mean) / std and of dY")
no_gradient("ChannelStats")
no_gradient("ChannelBackpropStats")


@gradient("SpatialBN")
def _(g):
    if g.args.get("is_test"):
        type_error("SpatialBN with is_test=1 has no gradient here", "train with is_test=0")
    return [GradOp("SpatialBNGradient", [g.I[0], g.I[1], g.GO[0], g.O[3], g.O[4]], [g.GI[0], g.GI[1], g.GI[2]],
                   {k: v for k, v in g.args.items() if k in _BN})]


def _axes(x, order):
    """(the reduction axes, a shape that broadcasts a per-channel vector against x)."""
    c_axis = 1 if order == "NCHW" else x.ndim - 1
    shape = [1] * x.ndim
    shape[c_axis] = x.shape[c_axis]
    return tuple(k for k in range(x.ndim) if k != c_axis), tuple(shape)


def spatial_bn(x, scale, bias, mean, var, *sums, is_test=0, epsilon=1e-5, momentum=0.9, order="NCHW",
               num_batches=1, **_):
    axes, shape = _axes(x, order)
    dt = x.dtype
    if is_test:
        inv = 1.0 / np.sqrt(var.astype(np.float64) + epsilon)
        return ((x - mean.reshape(shape)) * (inv * scale).reshape(shape).astype(dt) + bias.reshape(shape)).astype(dt)
    count = int(np.prod([x.shape[k] for k in axes]))
    if count == 0:  # (an empty batch, as Caffe2: nothing normalized, the running statistics kept)
        zero = np.zeros_like(mean)
        return x.copy(), mean.copy(), var.copy(), zero, zero
    if sums:  # the statistics of num_batches batches of this one's size, from their sums
        count *= int(num_batches)
        mu = sums[0].astype(np.float64) / count
        v = sums[1].astype(np.float64) / count - mu * mu
    else:
        mu = x.mean(axis=axes, dtype=np.float64)
        v = x.var(axis=axes, dtype=np.float64)
    inv = 1.0 / np.sqrt(v + epsilon)
    y = ((x - mu.reshape(shape)) * (inv * scale).reshape(shape) + bias.reshape(shape)).astype(dt)
    unbiased = v * count / max(count - 1, 1)
    running_mean = (momentum * mean + (1 - momentum) * mu).astype(dt)
    running_var = (momentum * var + (1 - momentum) * unbiased).astype(dt)
    return y, running_mean, running_var, mu.astype(dt), inv.astype(dt)


def spatial_bn_grad(x, scale, dy, saved_mean, saved_inv_std, *sums, order="NCHW", num_batches=1, **_):
    axes, shape = _axes(x, order)
    count = int(np.prod([x.shape[k] for k in axes]))
    inv = saved_inv_std.astype(np.float64)
    xhat = (x - saved_mean.reshape(shape)) * inv.reshape(shape)
    if sums:  # dscale and dbias summed over num_batches batches: their mean per batch
        if count == 0:
            zero = np.zeros_like(scale)
            return x.copy(), zero, zero
        dscale, dbias = (s.astype(np.float64) / int(num_batches) for s in sums)
    else:
        dbias = dy.sum(axis=axes, dtype=np.float64)
        dscale = (dy * xhat).sum(axis=axes, dtype=np.float64)
    dx = (scale * inv / count).reshape(shape) * (count * dy - dbias.reshape(shape) - xhat * dscale.reshape(shape))
    return dx.astype(x.dtype), dscale.astype(scale.dtype), dbias.astype(scale.dtype)


def channel_stats(x, order="NCHW"):
    axes, _ = _axes(x, order)
    x64 = x.astype(np.float64)
    return x64.sum(axis=axes).astype(x.dtype), (x64 * x64).sum(axis=axes).astype(x.dtype)


def channel_backprop_stats(x, saved_mean, saved_inv_std, dy, order="NCHW"):
    axes, shape = _axes(x, order)
    xhat = (x - saved_mean.reshape(shape)) * saved_inv_std.astype(np.float64).reshape(shape)
    return ((dy * xhat).sum(axis=axes, dtype=np.float64).astype(x.dtype),
            dy.sum(axis=axes, dtype=np.float64).astype(x.dtype))


FUNCTIONS = {"SpatialBN": spatial_bn, "SpatialBNGradient": spatial_bn_grad, "ChannelStats": channel_stats,
             "ChannelBackpropStats": channel_backprop_stats}


# ----------------------------------------------------------------------------- LRN
_LRN = {"size": REQUIRED, "alpha": 0.0, "beta": 0.0, "bias": 1.0, "order": "NCHW", "engine": ""}


def _lrn(types, attrs, n):
    (x,) = floats("LRN", types)
    if int(attrs["size"]) < 1:
        type_error("LRN needs size >= 1", "pass size=<channels in the window>")
    return [x] * n


declare("LRN", 1, _lrn, results=(1, 2), attrs=dict(_LRN), traits={PURE},
        doc="Y = X scale^-beta, scale = bias + alpha / size * (the sum of X^2 over the size channels "
            "around each); the scale is the second output, if named")
declare("LRNGradient", (3, 4), lambda t, a, n: [floats("LRNGradient", t)[0]], attrs=dict(_LRN), traits={PURE},
        doc="dX from (X, Y, dY) of LRN")
no_gradient("LRNGradient")


@gradient("LRN")
def _(g):
    return [GradOp("LRNGradient", [g.I[0], g.O[0], g.GO[0]], [g.GI[0]],
                   {k: v for k, v in g.args.items() if k in _LRN})]


def _window_sums(v, size, axis):
    """Each channel's sum of ``v`` over the ``size`` channels centred on it (zeros past the ends)."""
    before = (size - 1) // 2
    pad = [(0, 0)] * v.ndim
    pad[axis] = (before, size - 1 - before)
    c = np.cumsum(np.pad(v, pad), axis=axis, dtype=np.float64)
    c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), c], axis=axis)
    n = v.shape[axis]
    return np.take(c, np.arange(size, size + n), axis=axis) - np.take(c, np.arange(0, n), axis=axis)


def lrn(x, size, alpha=0.0, beta=0.0, bias=1.0, order="NCHW", **_):
    axis = 1 if order == "NCHW" else x.ndim - 1
    scale = bias + alpha / size * _window_sums(x.astype(np.float64) ** 2, int(size), axis)
    y = (x * scale ** -beta).astype(x.dtype)
    return y, scale.astype(x.dtype)


def lrn_grad(x, y, dy, *scale, size, alpha=0.0, beta=0.0, bias=1.0, order="NCHW", **_):
    axis = 1 if order == "NCHW" else x.ndim - 1
    x64 = x.astype(np.float64)
    s = bias + alpha / size * _window_sums(x64 ** 2, int(size), axis)
    ratio = dy * y / s  # each output's part, spread to the channels its window covers
    # the window centred on c' covers c iff c' is within the mirrored window of c
    spread = _window_sums(ratio[tuple(slice(None, None, -1) if k == axis else slice(None) for k in range(x.ndim))],
                          int(size), axis)[tuple(slice(None, None, -1) if k == axis else slice(None)
                                                 for k in range(x.ndim))]
    return (dy * s ** -beta - 2.0 * alpha * beta / size * x64 * spread).astype(x.dtype)


FUNCTIONS.update({"LRN": lrn, "LRNGradient": lrn_grad})


# --- LayerNorm: each example normalized over its dims from `axis` on
def _layer_norm(types, attrs, n):
    (x,) = floats("LayerNorm", types)
    if x.shape is None:
        return [x, TensorType(x.dtype, None), TensorType(x.dtype, None)]
    axis = int(attrs["axis"]) % max(len(x.shape), 1)
    stats = TensorType(x.dtype, tuple(x.shape[:axis]) + (1,))
    return [x, stats, stats]


declare("LayerNorm", 1, _layer_norm, attrs={"axis": 1, "epsilon": 1e-5}, results=3, traits={PURE},
        doc="(Y, MEAN, STD): X normalized over its dims from `axis` on, STD = sqrt(var + epsilon); MEAN and STD "
            "shaped dims[:axis] + [1]")
declare("LayerNormGradient", 5, lambda t, a, n: [floats("LayerNormGradient", t)[4]], attrs={"axis": 1, "epsilon": 1e-5},
        traits={PURE}, doc="dX from (dY, Y, MEAN, STD, X) of LayerNorm (through Y only)")
no_gradient("LayerNormGradient")


@gradient("LayerNorm")
def _(g):
    return [GradOp("LayerNormGradient", [g.GO[0], g.O[0], g.O[1], g.O[2], g.I[0]], [g.GI[0]],
                   g.pick("axis", "epsilon"))]


def _rows_of(x, axis):
    axis = axis % max(x.ndim, 1)
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), tuple(x.shape[:axis]) + (1,)


def layer_norm(x, axis=1, epsilon=1e-5):
    rows, stat_shape = _rows_of(x, axis)
    r = rows.astype(np.float64)
    mean = r.mean(axis=1, keepdims=True)
    std = np.sqrt(r.var(axis=1, keepdims=True) + epsilon)
    y = ((r - mean) / std).reshape(x.shape)
    return y.astype(x.dtype), mean.reshape(stat_shape).astype(x.dtype), std.reshape(stat_shape).astype(x.dtype)


def layer_norm_grad(dy, y, mean, std, x, axis=1, epsilon=1e-5):
    d, _ = _rows_of(dy.astype(np.float64), axis)
    yr, _ = _rows_of(y.astype(np.float64), axis)
    s = std.reshape(-1, 1).astype(np.float64)
    dx = (d - d.mean(axis=1, keepdims=True) - yr * (d * yr).mean(axis=1, keepdims=True)) / s
    return dx.reshape(x.shape).astype(x.dtype)


FUNCTIONS.update({"LayerNorm": layer_norm, "LayerNormGradient": layer_norm_grad})
