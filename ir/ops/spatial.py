"""Image padding, moving space into the batch and back, and instance normalization, as
Caffe2 has them, with their gradients. ``FUNCTIONS`` holds the numpy semantics the
interpreter runs.

    PadImage(X [N, C, H, W], pad_t, pad_l, pad_b, pad_r, mode) -> [N, C, H + t + b, W + l + r]
        mode "constant" (fill `value`), "reflect" (mirror, edge not repeated), "edge" (repeat it)
    SpaceToBatch(X [N, C, H, W], pad, block_size=b) -> [b b N, C, (H + 2 pad) / b, (W + 2 pad) / b]
        Y[(i b + j) N + n, c, h, w] = Xpadded[n, c, h b + i, w b + j]; BatchToSpace undoes it
    InstanceNorm(X, scale [C], bias [C]) -> per (n, c): (x - mean) / sqrt(var + epsilon) scale + bias
    ChannelShuffle(X [N, C, ...], group=G) -> channel k G + g of Y is channel g K + k of X (K = C / G);
        its gradient is the shuffle with G and K swapped (ShuffleNet's channel mixing)
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import floats

_PAD_MODES = ("constant", "reflect", "edge")


# ----------------------------------------------------------------------------- PadImage
def _pads(attrs) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from pads=[t, l, b, r], pad, or pad_t/pad_l/pad_b/pad_r."""
    if attrs.get("pads"):
        pads = [int(p) for p in attrs["pads"]]
        if len(pads) != 4:
            type_error(f"PadImage's pads takes 4 values (top, left, bottom, right), got {len(pads)}")
        return tuple(pads)
    if attrs.get("pad"):
        return (int(attrs["pad"]),) * 4
    return tuple(int(attrs.get(k) or 0) for k in ("pad_t", "pad_l", "pad_b", "pad_r"))


def _spatial_axes(order: str) -> tuple[int, int]:
    return (2, 3) if order == "NCHW" else (1, 2)


def _check_pad_attrs(name, attrs):
    if attrs["mode"] not in _PAD_MODES:
        type_error(f"{name}'s mode must be one of {', '.join(_PAD_MODES)}, got {attrs['mode']!r}")
    if attrs["order"] not in ("NCHW", "NHWC"):
        type_error(f"{name}'s order must be NCHW or NHWC, got {attrs['order']!r}")
    pads = _pads(attrs)
    if min(pads) < 0:
        type_error(f"{name}'s pads must be >= 0, got {list(pads)}")
    return pads


def _grow(shape, order, pads, sign):
    if shape is None:
        return None
    if len(shape) != 4:
        type_error(f"PadImage takes a 4-D image ({order}), got rank {len(shape)}")
    t, left, b, r = pads
    h, w = _spatial_axes(order)
    out = list(shape)
    out[h] = None if shape[h] is None else shape[h] + sign * (t + b)
    out[w] = None if shape[w] is None else shape[w] + sign * (left + r)
    return tuple(out)


def _pad_image(types, attrs, n):
    (x,) = floats("PadImage", types)
    return [TensorType(x.dtype, _grow(x.shape, attrs["order"], _check_pad_attrs("PadImage", attrs), 1))]


def _pad_image_grad(types, attrs, n):
    (dy,) = floats("PadImageGradient", types)
    return [TensorType(dy.dtype, _grow(dy.shape, attrs["order"], _check_pad_attrs("PadImageGradient", attrs), -1))]


_PAD_ATTRS = {"pad": 0, "pad_t": 0, "pad_l": 0, "pad_b": 0, "pad_r": 0, "pads": None, "mode": "constant",
              "value": 0.0, "order": "NCHW", "kernel": None, "kernels": None, "stride": None, "strides": None}
declare("PadImage", 1, _pad_image, attrs=dict(_PAD_ATTRS), traits={PURE},
        doc="Y = X padded on its spatial dims (pad_t/l/b/r, pad or pads); mode constant (fill value), "
            "reflect (mirror without the edge) or edge (repeat the edge)")
declare("PadImageGradient", 1, _pad_image_grad, attrs=dict(_PAD_ATTRS), traits={PURE},
        doc="dX from dY of PadImage: each output's gradient added to the input element it copies")
no_gradient("PadImageGradient")


@gradient("PadImage")
def _(g):
    return [GradOp("PadImageGradient", [g.GO[0]], [g.GI[0]], g.pick(*_PAD_ATTRS))]


def _sources(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each padded position along one axis, the input index it copies (-1: the fill value)."""
    p = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(p, 0, n - 1)
    if mode == "reflect":
        if n == 1:
            return np.zeros_like(p)
        period = 2 * (n - 1)
        q = np.mod(p, period)
        return np.where(q < n, q, period - q)
    return np.where((p >= 0) & (p < n), p, -1)


def pad_image(x, mode="constant", value=0.0, order="NCHW", **pad_attrs):
    t, left, b, r = _pads(pad_attrs)
    ha, wa = _spatial_axes(order)
    y = x
    for axis, before, after in ((ha, t, b), (wa, left, r)):
        src = _sources(x.shape[axis], before, after, mode)
        y = np.take(y, np.maximum(src, 0), axis=axis)
        if mode == "constant" and (src < 0).any():
            shape = [1] * y.ndim
            shape[axis] = src.size
            y = np.where((src < 0).reshape(shape), np.asarray(value, dtype=x.dtype), y)
    return np.ascontiguousarray(y, dtype=x.dtype)


def pad_image_grad(dy, mode="constant", value=0.0, order="NCHW", **pad_attrs):
    t, left, b, r = _pads(pad_attrs)
    ha, wa = _spatial_axes(order)
    g = dy
    for axis, before, after in ((ha, t, b), (wa, left, r)):
        n = dy.shape[axis] - before - after
        src = _sources(n, before, after, mode)
        keep = src >= 0
        moved = np.moveaxis(g, axis, 0)[keep]
        out = np.zeros((n,) + moved.shape[1:], dtype=np.float64)
        np.add.at(out, src[keep], moved)
        g = np.moveaxis(out, 0, axis)
    return np.ascontiguousarray(g, dtype=dy.dtype)


# ----------------------------------------------------------------------------- SpaceToBatch / BatchToSpace
def _block_pads(name, attrs):
    b = int(attrs["block_size"])
    if b < 1:
        type_error(f"{name}'s block_size must be >= 1, got {b}")
    pad = int(attrs.get("pad") or 0)
    pads = [int(attrs.get(k) if attrs.get(k) is not None else pad) for k in ("pad_t", "pad_l", "pad_b", "pad_r")]
    return b, pads


def _s2b_shape(name, types, attrs, to_batch):
    (x,) = floats(name, types)
    if x.shape is None:
        return [x]
    if len(x.shape) != 4:
        type_error(f"{name} takes a 4-D NCHW tensor, got rank {len(x.shape)}")
    b, (t, left, bo, r) = _block_pads(name, attrs)
    n, c, h, w = x.shape

    def known(f, *dims):
        return None if any(d is None for d in dims) else f(*dims)
    if to_batch:
        for d, extra, what in ((h, t + bo, "height"), (w, left + r, "width")):
            if d is not None and (d + extra) % b:
                type_error(f"{name}: padded {what} {d + extra} is not a multiple of block_size {b}")
        return [TensorType(x.dtype, (known(lambda v: v * b * b, n), c, known(lambda v: (v + t + bo) // b, h),
                                     known(lambda v: (v + left + r) // b, w)))]
    if n is not None and n % (b * b):
        type_error(f"{name}: batch {n} is not a multiple of block_size^2 = {b * b}")
    return [TensorType(x.dtype, (known(lambda v: v // (b * b), n), c, known(lambda v: v * b - t - bo, h),
                                 known(lambda v: v * b - left - r, w)))]


_S2B_ATTRS = {"pad": 0, "pad_t": None, "pad_l": None, "pad_b": None, "pad_r": None, "block_size": 2, "order": "NCHW"}
declare("SpaceToBatch", 1, lambda t, a, n: _s2b_shape("SpaceToBatch", t, a, True), attrs=dict(_S2B_ATTRS),
        traits={PURE}, doc="Y[(i b + j) N + n, c, h, w] = Xpadded[n, c, h b + i, w b + j] (zero padding; b = block_size)")
declare("BatchToSpace", 1, lambda t, a, n: _s2b_shape("BatchToSpace", t, a, False), attrs=dict(_S2B_ATTRS),
        traits={PURE}, doc="the inverse of SpaceToBatch: blocks of the batch back into space, padding cropped")


@gradient("SpaceToBatch")
def _(g):
    return [GradOp("BatchToSpace", [g.GO[0]], [g.GI[0]], g.pick(*_S2B_ATTRS))]


@gradient("BatchToSpace")
def _(g):
    return [GradOp("SpaceToBatch", [g.GO[0]], [g.GI[0]], g.pick(*_S2B_ATTRS))]


def space_to_batch(x, block_size=2, order="NCHW", **pad_attrs):
    b, (t, left, bo, r) = _block_pads("SpaceToBatch", dict(pad_attrs, block_size=block_size))
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (t, bo), (left, r)))
    hp, wp = xp.shape[2] // b, xp.shape[3] // b
    # [n, c, hp, i, wp, j] -> [i, j, n, c, hp, wp]
    y = xp.reshape(n, c, hp, b, wp, b).transpose(3, 5, 0, 1, 2, 4)
    return np.ascontiguousarray(y.reshape(b * b * n, c, hp, wp))


def batch_to_space(y, block_size=2, order="NCHW", **pad_attrs):
    b, (t, left, bo, r) = _block_pads("BatchToSpace", dict(pad_attrs, block_size=block_size))
    nb, c, hp, wp = y.shape
    n = nb // (b * b)
    xp = y.reshape(b, b, n, c, hp, wp).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, hp * b, wp * b)
    return np.ascontiguousarray(xp[:, :, t:hp * b - bo, left:wp * b - r])


# ----------------------------------------------------------------------------- InstanceNorm
def _instance_norm(types, attrs, n):
    x, scale, bias = floats("InstanceNorm", types)
    if x.shape is not None and len(x.shape) < 3:
        type_error(f"InstanceNorm takes X of rank 3 or more ([N, C, ...] or [N, ..., C]), got {len(x.shape)}")
    if attrs["order"] not in ("NCHW", "NHWC"):
        type_error(f"InstanceNorm's order must be NCHW or NHWC, got {attrs['order']!r}")
    nc = None
    if x.shape is not None:
        c = x.shape[1] if attrs["order"] == "NCHW" else x.shape[-1]
        nc = (x.shape[0], c)
    return [x] + [TensorType(x.dtype, nc)] * (n - 1)


declare("InstanceNorm", 3, _instance_norm, results=(1, 3), attrs={"epsilon": 1e-5, "order": "NCHW"}, traits={PURE},
        doc="Y = (X - mean) / sqrt(var + epsilon) scale[c] + bias[c], mean and var over each (n, c)'s "
            "spatial elements; optional outputs: mean and 1 / sqrt(var + epsilon), [N, C]")
declare("InstanceNormGradient", 4, lambda t, a, n: [floats("InstanceNormGradient", t)[0],
                                                    floats("InstanceNormGradient", t)[1],
                                                    floats("InstanceNormGradient", t)[1]],
        results=3, attrs={"epsilon": 1e-5, "order": "NCHW"}, traits={PURE},
        doc="(dX, dscale, dbias) from (X, scale, bias, dY) of InstanceNorm")
no_gradient("InstanceNormGradient")


@gradient("InstanceNorm")
def _(g):
    return [GradOp("InstanceNormGradient", [g.I[0], g.I[1], g.I[2], g.GO[0]], [g.GI[0], g.GI[1], g.GI[2]],
                   g.pick("epsilon", "order"))]


def _channels_second(x, order):
    """X as [N, C, S] (float64), whatever its order."""
    if order == "NHWC":
        x = np.moveaxis(x, -1, 1)
    return x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)


def _back(v, like, order):
    if order == "NHWC":
        shape = (like.shape[0], like.shape[-1]) + like.shape[1:-1]
        return np.moveaxis(v.reshape(shape), 1, -1)
    return v.reshape(like.shape)


def instance_norm(x, scale, bias, epsilon=1e-5, order="NCHW", n_out=1):
    v = _channels_second(x, order)
    mean = v.mean(axis=2, keepdims=True)
    inv = 1.0 / np.sqrt(v.var(axis=2, keepdims=True) + epsilon)
    y = (v - mean) * inv * scale.reshape(1, -1, 1) + bias.reshape(1, -1, 1)
    out = [np.ascontiguousarray(_back(y, x, order), dtype=x.dtype)]
    if n_out > 1:
        out.append(mean[:, :, 0].astype(x.dtype))
    if n_out > 2:
        out.append(inv[:, :, 0].astype(x.dtype))
    return out[0] if n_out == 1 else tuple(out)


def instance_norm_grad(x, scale, bias, dy, epsilon=1e-5, order="NCHW"):
    v, d = _channels_second(x, order), _channels_second(dy, order)
    s = v.shape[2]
    mean = v.mean(axis=2, keepdims=True)
    inv = 1.0 / np.sqrt(v.var(axis=2, keepdims=True) + epsilon)
    xhat = (v - mean) * inv
    dbias = d.sum(axis=(0, 2))
    dscale = (d * xhat).sum(axis=(0, 2))
    dxhat = d * scale.reshape(1, -1, 1)
    dx = inv * (dxhat - dxhat.mean(axis=2, keepdims=True) - xhat * (dxhat * xhat).sum(axis=2, keepdims=True) / s)
    return (np.ascontiguousarray(_back(dx, x, order), dtype=x.dtype), dscale.astype(scale.dtype),
            dbias.astype(bias.dtype))


# ----------------------------------------------------------------------------- ChannelShuffle
def _channel_shuffle(name):
    def infer(types, attrs, n):
        (x,) = tensors(name, types)
        if attrs["order"] not in ("NCHW", "NHWC"):
            type_error(f"{name}'s order must be NCHW or NHWC, got {attrs['order']!r}")
        g = int(attrs["group"])
        if g < 1:
            type_error(f"{name}'s group must be >= 1, got {g}")
        if x.shape is not None:
            if len(x.shape) < 2:
                type_error(f"{name} takes X of rank 2 or more ([N, C, ...] or [N, ..., C]), got rank {len(x.shape)}")
            c = x.shape[1 if attrs["order"] == "NCHW" else -1]
            if c is not None and c % g:
                type_error(f"{name}: {c} channels do not split into group={g} equal groups",
                           "pass a group that divides the channel count")
        return [x]
    return infer


_SHUFFLE_ATTRS = {"group": 1, "order": "NCHW", "kernel": None}  # (kernel: ShuffleNet's builder passes it; unused)
declare("ChannelShuffle", 1, _channel_shuffle("ChannelShuffle"), attrs=dict(_SHUFFLE_ATTRS), traits={PURE},
        doc="Y[:, k G + g] = X[:, g K + k] (G = group, K = C / G; channels last with order NHWC)")
declare("ChannelShuffleGradient", 1, _channel_shuffle("ChannelShuffleGradient"), attrs=dict(_SHUFFLE_ATTRS),
        traits={PURE}, doc="dX[:, g K + k] = dY[:, k G + g]: ChannelShuffle undone")
no_gradient("ChannelShuffleGradient")


@gradient("ChannelShuffle")
def _(g):
    return [GradOp("ChannelShuffleGradient", [g.GO[0]], [g.GI[0]], g.pick("group", "order"))]


def _shuffle(x, groups, order):
    """X's channels seen as [groups, C / groups], transposed: channel k groups + g <- g (C/groups) + k."""
    n = x.shape[0]
    if order == "NCHW":  # (the spatial size spelled out: an empty batch has no -1 to infer)
        c = x.shape[1]
        y = x.reshape(n, groups, c // groups, int(np.prod(x.shape[2:]))).transpose(0, 2, 1, 3)
    else:
        c = x.shape[-1]
        y = x.reshape(n, int(np.prod(x.shape[1:-1])), groups, c // groups).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(y).reshape(x.shape)


def _shuffle_groups(x, group, order):
    c = x.shape[1 if order == "NCHW" else -1]
    if group < 1 or c % group:
        raise ValueError(f"ChannelShuffle: {c} channels do not split into group={group} equal groups")
    return c


def channel_shuffle(x, group=1, order="NCHW", kernel=None):
    _shuffle_groups(x, group, order)
    return _shuffle(x, group, order)


def channel_shuffle_grad(dy, group=1, order="NCHW", kernel=None):
    c = _shuffle_groups(dy, group, order)
    return _shuffle(dy, c // group, order)


FUNCTIONS = {
    "ChannelShuffle": channel_shuffle, "ChannelShuffleGradient": channel_shuffle_grad,
    "PadImage": pad_image, "PadImageGradient": pad_image_grad,
    "SpaceToBatch": space_to_batch, "BatchToSpace": batch_to_space,
    "InstanceNormGradient": instance_norm_grad,
}
