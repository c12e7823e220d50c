"""The xla backend's convolution, pooling and batch-normalization kernels.

Geometry is Caffe2's, from the op table's ``Geometry`` (``legacy_pad`` included): its
``pads`` are the frame the windows read, begin and end per spatial dim, negative where
the windows stop short of the input's edge, which XLA's padding takes as it is. Layout
is NCHW at the interface (NHWC operands are moved to it and back); inside, XLA picks
its own.

Gradients: Conv's are the transposed convolutions jax derives (``jax.vjp``); pooling's
are written out, because Caffe2 gives a max-pooling window's gradient to every element
equal to its maximum (all of them where several tie: a window of zeros after a ReLU),
where XLA's own gives it to one.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dslc.ir.ops.conv import POOL, Geometry
from dslc.ir.ops.conv_math import _counts

from .kernels import Refused, dtype, kernel, shape


def _nchw(op):
    order = op.attrs.get("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise Refused(f"{op.name}: order {order!r}")
    return order == "NCHW"


def _to_nchw(x, nchw):
    return x if nchw else jnp.moveaxis(x, -1, 1)


def _from_nchw(y, nchw):
    return y if nchw else jnp.moveaxis(y, 1, -1)


def _spatial(v, nchw):
    s = shape(v)
    return list(s[2:] if nchw else s[1:-1])


def _conv_geometry(op):
    nchw = _nchw(op)
    w = shape(op.operands[1])
    kernel_dims = list(w[2:] if nchw else w[1:-1])
    return nchw, Geometry(op.name.replace("Gradient", ""), op.attrs, _spatial(op.operands[0], nchw), kernel=kernel_dims)


# A convolution with at most this many output positions (batch times image) is a GEMM of
# the weights with the window patches: XLA's CPU convolution is up to 2x slower there (a
# 3x3 conv of 512 channels on 7x7 at batch 1: 11.5 ms against 6.0 as patches and a dot,
# one thread; even at 196 positions, slower from 784 on; bench/xla.py)
SMALL_OUTPUT = 150


def _conv_fn(g, group, nd, dt, batch=None, w_shape=None):
    """The convolution as a jax function of (x, w), NCHW; ``w_shape`` (NCHW's) says whether
    it is depthwise."""
    spec = ("NC" + "DHW"[-nd:], "OI" + "DHW"[-nd:], "NC" + "DHW"[-nd:])
    pads = [tuple(p) for p in g.pads]

    def conv(x, w):
        return lax.conv_general_dilated(x, w, tuple(g.stride), pads, rhs_dilation=tuple(g.dilation),
                                        feature_group_count=group, dimension_numbers=spec,
                                        preferred_element_type=dt).astype(dt)

    def as_gemm(x, w):
        patches = lax.conv_general_dilated_patches(x, tuple(g.kernel), tuple(g.stride), pads,
                                                   rhs_dilation=tuple(g.dilation), dimension_numbers=spec)
        n, k = patches.shape[0], w.shape[0]  # (patches: [n, C kernel..., out...], C-major as W's rows)
        y = jnp.einsum("kc,ncp->nkp", w.reshape(k, -1), patches.reshape(n, patches.shape[1], -1),
                       preferred_element_type=dt)
        return y.reshape((n, k) + tuple(g.out)).astype(dt)

    def depthwise(x, w):
        """One filter per channel (MobileNet's): a sum over the kernel's offsets of the
        strided window slices times each channel's weight, which XLA fuses into one pass;
        its grouped convolution is several times slower on the CPU."""
        xp = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0) for lo, hi in pads])
        y = None
        for at, cut in zip(np.ndindex(*g.kernel), _offsets(g)):
            part = _take(xp, cut) * w[(slice(None), 0) + at].reshape((1, -1) + (1,) * nd)
            y = part if y is None else y + part
        return y.astype(dt)

    small = batch is not None and group == 1 and batch * int(np.prod(g.out)) <= SMALL_OUTPUT
    if group > 1 and w_shape is not None and w_shape[0] == group and w_shape[1] == 1:
        return depthwise
    return as_gemm if small else conv


def _w_nchw(op, nchw):
    w = shape(op.operands[1])
    return tuple(w) if nchw else (w[0], w[-1]) + tuple(w[1:-1])


def _bias(b, nd):
    return b.reshape((1, -1) + (1,) * nd)


@kernel("Conv")
def _conv(op):
    nchw, g = _conv_geometry(op)
    nd, dt = len(g.kernel), dtype(op.result)
    conv = _conv_fn(g, int(op.attrs.get("group", 1)), nd, dt, batch=shape(op.operands[0])[0], w_shape=_w_nchw(op, nchw))

    def run(x, w, *b):
        y = conv(_to_nchw(x, nchw), _to_nchw(w, nchw))
        if b:
            y = y + _bias(b[0], nd)
        return _from_nchw(y.astype(dt), nchw)
    return run


@kernel("ConvFused")
def _conv_fused(op):
    """Y = relu?((conv(X, W) + b) s + shift + R) (ir/ops/conv_fused.py): the norm applied to
    the convolution's output, which XLA fuses with the bias, the residual and the ReLU into
    one pass (the weights are inputs of the call: folding s into them would cost a pass
    over W every call)."""
    if not _nchw(op):
        raise Refused("ConvFused: NHWC")
    _, g = _conv_geometry(op)
    nd, dt = len(g.kernel), dtype(op.result)
    conv = _conv_fn(g, int(op.attrs.get("group", 1)), nd, dt, batch=shape(op.operands[0])[0],
                    w_shape=_w_nchw(op, True))
    bias, bn, residual, relu = (int(op.attrs[k]) for k in ("bias", "bn", "residual", "relu"))
    epsilon = float(op.attrs["epsilon"])

    def run(x, w, *rest):
        rest = list(rest)
        y = conv(x, w)
        if bias:
            y = y + _bias(rest.pop(0), nd)
        if bn:
            scale, shift, mean, var = (rest.pop(0) for _ in range(4))
            s = scale / jnp.sqrt(var + jnp.asarray(epsilon, var.dtype))
            y = y * _bias(s, nd) + _bias(shift - mean * s, nd)
        if residual:
            y = y + rest.pop(0)
        if relu:
            y = jnp.maximum(y, jnp.zeros((), y.dtype))
        return y.astype(dt)
    return run


# A stride-1 convolution whose input has at least this many times its output's positions
# (LeNet's 5x5 without pads: 144 / 64) gets dX as one GEMM of dY with W, then each
# kernel offset's columns added into place (col2im): XLA's transposed convolution
# computes every position of the zero-padded dY, this many times the GEMM's work (LeNet's
# second conv, batch 64: 22 ms against 11 as columns, one thread)
COLUMNS_DX = 1.5


def _dx_by_columns(g, x_shape, dt):
    """dX of a stride-1, ungrouped convolution (NCHW) from (W, dY), or None where
    XLA's own is as cheap: dW^T dY's columns [N, C, kernel..., out...], each kernel
    offset's slice padded into the frame at its offset (no interior padding) and summed,
    the frame cut back to X's shape."""
    if any(s != 1 for s in g.stride) or np.prod(x_shape[2:]) < COLUMNS_DX * np.prod(g.out):
        return None
    n, c = x_shape[:2]
    frame = [int(d) + lo + hi for d, (lo, hi) in zip(x_shape[2:], g.pads)]

    def dx(w, dy):
        m = w.shape[0]
        cols = jnp.einsum("nmp,mq->nqp", dy.reshape(n, m, -1), w.reshape(m, -1), preferred_element_type=dt)
        cols = cols.reshape((n, c) + tuple(g.kernel) + tuple(g.out))
        total = None
        for at in np.ndindex(*g.kernel):
            pads = [(0, 0, 0), (0, 0, 0)] + [(a * d, f - o - a * d, 0) for a, d, f, o in
                                             zip(at, g.dilation, frame, g.out)]
            part = lax.pad(cols[(slice(None), slice(None)) + at], jnp.zeros((), dt), pads)
            total = part if total is None else total + part
        return _unframed(total, g, x_shape).astype(dt)
    return dx


@kernel("ConvGradient")
def _conv_grad(op):
    nchw, g = _conv_geometry(op)
    nd, dt = len(g.kernel), dtype(op.operands[0])
    group = int(op.attrs.get("group", 1))
    conv = _conv_fn(g, group, nd, dt, w_shape=_w_nchw(op, nchw))
    no_bias = int(op.attrs.get("no_bias", 0))
    n = len(op.results)
    x_shape = _nchw_shape(shape(op.operands[0]), nchw)
    columns = _dx_by_columns(g, x_shape, dt) if group == 1 and op.opdef.optional(op) else None

    def run(x, w, dy):
        x, w, dy = _to_nchw(x, nchw), _to_nchw(w, nchw), _to_nchw(dy, nchw)
        if columns is None:
            _, back = jax.vjp(conv, x, w)
            dx, dw = back(dy)
        else:
            _, back = jax.vjp(lambda w: conv(x, w), w)
            (dw,), dx = back(dy), columns(w, dy)
        dw, dx = _from_nchw(dw, nchw), _from_nchw(dx, nchw)
        if no_bias:
            return (dw, dx)[:n] if n > 1 else dw  # (dX not named: XLA drops its computation)
        db = dy.sum(axis=(0,) + tuple(range(2, dy.ndim))).astype(dt)
        return (dw, db, dx)[:n]
    return run


# ----------------------------------------------------------------------------- pooling
def _pool_geometry(op):
    nchw = _nchw(op)
    name = op.name.replace("Gradient", "")
    return nchw, Geometry(name, op.attrs, _spatial(op.operands[0], nchw))


def _window(g):
    return (1, 1) + tuple(g.kernel), (1, 1) + tuple(g.stride), (1, 1) + tuple(g.dilation)


def _framed(x, g, fill):
    """x padded (or cut) to the frame the windows read (Geometry.pads)."""
    return lax.pad(x, jnp.asarray(fill, x.dtype), [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0) for lo, hi in g.pads])


def _offsets(g):
    """For each kernel offset, the strided slice of the frame its window elements are."""
    for at in np.ndindex(*g.kernel):
        yield [(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in zip(at, g.dilation, g.stride, g.out)]


def _take(xp, cut):
    return lax.slice(xp, (0, 0) + tuple(c[0] for c in cut), xp.shape[:2] + tuple(c[1] for c in cut),
                     (1, 1) + tuple(c[2] for c in cut))


def _add_at(frame, cut, part):
    """``frame`` with ``part`` added at the strided slice ``cut`` (a scatter-add: written as
    interior padding of ``part`` and a sum, XLA's CPU compiler gave wrong sums for some
    channels once fused into a training step)."""
    return frame.at[(slice(None), slice(None)) + tuple(slice(*c) for c in cut)].add(part)


def _unframed(dxp, g, x_shape):
    """The frame's gradient cut (or padded) back to x's shape."""
    return lax.pad(dxp, jnp.zeros((), dxp.dtype), [(0, 0, 0), (0, 0, 0)] + [(-lo, -hi, 0) for lo, hi in g.pads])


def _tiles(g, frame) -> bool:
    """Whether the windows tile the frame without overlap (stride = kernel, no dilation:
    LeNet's 2x2 pooling), so that a gradient is a reshape and a select, with no adds."""
    return all(s == k for s, k in zip(g.stride, g.kernel)) and all(d == 1 for d in g.dilation) and \
        all(o * k <= f for o, k, f in zip(g.out, g.kernel, frame))


def _as_tiles(xp, g):
    """The frame's windows as [N, C, o1, k1, o2, k2, ...] (cut to the span they cover)."""
    span = tuple(o * k for o, k in zip(g.out, g.kernel))
    cut = lax.slice(xp, (0,) * xp.ndim, tuple(xp.shape[:2]) + span)
    return cut.reshape(tuple(xp.shape[:2]) + tuple(d for o, k in zip(g.out, g.kernel) for d in (o, k)))


def _per_tile(v):
    """[N, C, o1, o2, ...] as [N, C, o1, 1, o2, 1, ...]: one value per window, spread by broadcasting."""
    return v.reshape(tuple(v.shape[:2]) + tuple(d for o in v.shape[2:] for d in (o, 1)))


def _from_tiles(d, frame):
    """[N, C, o1, k1, ...] back to the frame's shape, zeros past the windows' span."""
    flat = d.reshape(tuple(d.shape[:2]) + tuple(d.shape[2 + 2 * i] * d.shape[3 + 2 * i] for i in range(len(frame))))
    return lax.pad(flat, jnp.zeros((), d.dtype), [(0, 0, 0), (0, 0, 0)] + [(0, f - n, 0) for f, n in
                                                                            zip(frame, flat.shape[2:])])


def _whole(g) -> bool:
    """Whether the only window is the whole image (global pooling, or a kernel its size)."""
    return all(o == 1 for o in g.out) and all(p == (0, 0) for p in g.pads) and all(d == 1 for d in g.dilation)


def _refuse_empty(op, g, x_shape):
    if 0 in x_shape or 0 in g.out:
        raise Refused(f"{op.name} of an empty tensor")


@kernel("MaxPool")
def _max_pool(op):
    nchw, g = _pool_geometry(op)
    _refuse_empty(op, g, shape(op.operands[0]))
    dims, strides, dil = _window(g)

    def run(x):
        x = _to_nchw(x, nchw)
        y = lax.reduce_window(_framed(x, g, -np.inf), jnp.asarray(-np.inf, x.dtype), lax.max, dims, strides,
                              "VALID", window_dilation=dil)
        return _from_nchw(y, nchw)
    return run


@kernel("AveragePool")
def _average_pool(op):
    nchw, g = _pool_geometry(op)
    x_shape = shape(op.operands[0])
    _refuse_empty(op, g, x_shape)
    dims, strides, dil = _window(g)
    counts = _counts(_nchw_shape(x_shape, nchw), g, op.attrs.get("count_include_pad"))
    dt = dtype(op.result)

    def run(x):
        x = _to_nchw(x, nchw)
        total = lax.reduce_window(_framed(x, g, 0.0), jnp.zeros((), x.dtype), lax.add, dims, strides, "VALID",
                                  window_dilation=dil)
        return _from_nchw((total / jnp.asarray(counts, dt)).astype(dt), nchw)
    return run


def _nchw_shape(s, nchw):
    return tuple(s) if nchw else (s[0], s[-1]) + tuple(s[1:-1])


@kernel("MaxPoolGradient")
def _max_pool_grad(op):
    nchw, g = _pool_geometry(op)
    x_shape = _nchw_shape(shape(op.operands[0]), nchw)
    _refuse_empty(op, g, x_shape)

    dims, strides, dil = _window(g)
    owner = getattr(op.operands[1], "owner", None)
    pooled_here = owner is not None and owner.name == "MaxPool" and owner.operands[0] is op.operands[0] and \
        all(owner.attrs.get(k) == op.attrs.get(k) for k in POOL)

    if _whole(g):
        def whole(x, y, dy):  # (one window: the elements equal to its max)
            x, y, dy = _to_nchw(x, nchw), _to_nchw(y, nchw), _to_nchw(dy, nchw)
            x, y = lax.optimization_barrier((x, y))
            if pooled_here:
                y = x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
            return _from_nchw(jnp.where(x == y, dy, jnp.zeros((), dy.dtype)), nchw)
        return whole

    frame = tuple(n + lo + hi for n, (lo, hi) in zip(x_shape[2:], g.pads))
    tiles = _tiles(g, frame)

    def run(x, y, dy):
        # x is read as one materialized value (the barrier), and Y, where it is this x's
        # max pooling, is pooled again from it: XLA may compute x again inside each fusion
        # that reads it, and a recomputation rounded otherwise would miss its maxima
        x, y, dy = _to_nchw(x, nchw), _to_nchw(y, nchw), _to_nchw(dy, nchw)
        x, y = lax.optimization_barrier((x, y))
        xp = _framed(x, g, -np.inf)
        if pooled_here:
            y = lax.reduce_window(xp, jnp.asarray(-np.inf, x.dtype), lax.max, dims, strides, "VALID",
                                  window_dilation=dil)
        if tiles:  # (each element in one window at most: a select, 1.2 against 6.6 ms for LeNet's first)
            dxp = _from_tiles(jnp.where(_as_tiles(xp, g) == _per_tile(y), _per_tile(dy), jnp.zeros((), dy.dtype)),
                              frame)
        else:
            dxp = jnp.zeros(xp.shape, dy.dtype)
            for cut in _offsets(g):
                dxp = _add_at(dxp, cut, jnp.where(_take(xp, cut) == y, dy, jnp.zeros((), dy.dtype)))
        return _from_nchw(_unframed(dxp, g, x_shape).astype(x.dtype), nchw)
    return run


@kernel("AveragePoolGradient")
def _average_pool_grad(op):
    nchw, g = _pool_geometry(op)
    x_shape = _nchw_shape(shape(op.operands[0]), nchw)
    _refuse_empty(op, g, x_shape)
    counts = _counts(x_shape, g, op.attrs.get("count_include_pad"))
    dt = dtype(op.result)
    frame = x_shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(x_shape[2:], g.pads))

    if _whole(g):
        return lambda x, y, dy: _from_nchw(jnp.broadcast_to((_to_nchw(dy, nchw) / jnp.asarray(counts, dt)).astype(dt),
                                                            x_shape), nchw)

    def run(x, y, dy):
        share = (_to_nchw(dy, nchw) / jnp.asarray(counts, dt)).astype(dt)
        if _tiles(g, frame[2:]):
            tile = (1, 1) + tuple(d for k in g.kernel for d in (1, k))
            return _from_nchw(_unframed(_from_tiles(jnp.tile(_per_tile(share), tile), frame[2:]), g, x_shape), nchw)
        dxp = jnp.zeros(frame, dt)
        for cut in _offsets(g):
            dxp = _add_at(dxp, cut, share)
        return _from_nchw(_unframed(dxp, g, x_shape), nchw)
    return run


# ----------------------------------------------------------------------------- batch normalization
def _bn(op):
    if len(op.operands) > 5:
        raise Refused(f"{op.name} over several batches' sums (num_batches)")
    nchw = _nchw(op)
    rank = len(shape(op.operands[0]))
    axes = (0,) + tuple(range(2, rank)) if nchw else tuple(range(rank - 1))
    per = (1, -1) + (1,) * (rank - 2) if nchw else (1,) * (rank - 1) + (-1,)
    count = int(np.prod([shape(op.operands[0])[k] for k in axes]))
    if count == 0:
        raise Refused(f"{op.name} of an empty batch")
    return axes, per, count


@kernel("SpatialBN")
def _spatial_bn(op):
    axes, per, count = _bn(op)
    dt = dtype(op.results[0])
    eps = float(op.attrs.get("epsilon", 1e-5))
    momentum = float(op.attrs.get("momentum", 0.9))
    if op.attrs.get("is_test"):
        def test(x, scale, bias, mean, var):
            inv = (1.0 / jnp.sqrt(var + dt.type(eps)) * scale).astype(dt)
            return ((x - mean.reshape(per)) * inv.reshape(per) + bias.reshape(per)).astype(dt)
        return test
    n = len(op.results)

    def train(x, scale, bias, mean, var):
        mu = x.mean(axis=axes)
        v = jnp.square(x - mu.reshape(per)).mean(axis=axes)
        inv = 1.0 / jnp.sqrt(v + dt.type(eps))
        y = ((x - mu.reshape(per)) * (inv * scale).reshape(per) + bias.reshape(per)).astype(dt)
        unbiased = v * dt.type(count / max(count - 1, 1))
        running_mean = (dt.type(momentum) * mean + dt.type(1 - momentum) * mu).astype(dt)
        running_var = (dt.type(momentum) * var + dt.type(1 - momentum) * unbiased).astype(dt)
        return (y, running_mean, running_var, mu.astype(dt), inv.astype(dt))[:n]
    return train


@kernel("SpatialBNGradient")
def _spatial_bn_grad(op):
    axes, per, count = _bn(op)
    dt = dtype(op.operands[0])

    def grad(x, scale, dy, saved_mean, saved_inv_std):
        inv = saved_inv_std
        xhat = (x - saved_mean.reshape(per)) * inv.reshape(per)
        dbias = dy.sum(axis=axes)
        dscale = (dy * xhat).sum(axis=axes)
        dx = (scale * inv / dt.type(count)).reshape(per) * (dt.type(count) * dy - dbias.reshape(per)
                                                            - xhat * dscale.reshape(per))
        return dx.astype(dt), dscale.astype(dt), dbias.astype(dt)
    return grad
