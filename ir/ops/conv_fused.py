"""``ConvFused``: a convolution with its epilogue, as the ``fuse-conv`` pass makes it from
a deploy net's Conv -> SpatialBN (test mode) -> Sum (a residual join) -> Relu.

    ConvFused(X, W[, b][, scale, bias, mean, var][, R]) -> Y      (attributes say which)
    Y = relu?((conv(X, W) + b) s + (bias - mean s) + R),   s = scale / sqrt(var + epsilon)

The batch normalization is folded into W once when nothing can write W or the norm's
vectors (frozen arrays: a deploy model's filled weights, IR constants; the backend's
``once``, runtime/derived.py, keeps W s per array), so each call is the convolution plus
one shift. Otherwise it is a per-channel scale and shift applied to the convolution's
output in place (O(M) work on the parameters, one pass over Y): scaling W on every call
costs more than the output at batch 1 in late layers (512 x 512 x 3 x 3 weights against
512 x 7 x 7 outputs), and a copy of W kept for weights that may change could go stale,
since a training net's fused kernels update a shared weight in place. The two ways agree
up to float32 rounding (every backend takes the same one for the same inputs). The sum
and the ReLU run in place on the same output: no intermediate arrays.

Inference-only by construction, so it declares no gradient: passes run on lowered IR,
after autodiff has written every gradient op, and ``fuse-conv`` takes a Conv only when
nothing but the chain reads its output (a gradient op reading Conv's or BN's output keeps
them apart); SpatialBN in training mode is never fused.
"""
from __future__ import annotations

import numpy as np

from ..gradients import no_gradient
from ..opdef import PURE, SIZED_BY_VALUES, declare, type_error
from ..types import TensorType
from . import conv_math
from .conv import CONV, _conv
from .nn import floats

EPILOGUE = {"bias": 0, "bn": 0, "epsilon": 1e-5, "residual": 0, "relu": 0}


def _parts(n_inputs, attrs):
    """How many inputs the attributes say: X, W, the bias, BN's four vectors, R."""
    return 2 + int(attrs["bias"]) + 4 * int(attrs["bn"]) + int(attrs["residual"])


def _conv_fused(types, attrs, n):
    if len(types) != _parts(len(types), attrs):
        type_error(f"ConvFused has {len(types)} inputs, its attributes say {_parts(len(types), attrs)}",
                   "X, W, then the bias (bias=1), scale/bias/mean/var (bn=1), the residual (residual=1)")
    ts = floats("ConvFused", types)
    if attrs["order"] != "NCHW":
        type_error("ConvFused is NCHW only", "fuse-conv leaves NHWC convolutions alone")
    (y,) = _conv(ts[:2] + (ts[2:3] if attrs["bias"] else []), attrs, 1)
    m = None if ts[1].shape is None else ts[1].shape[0]
    for t in ts[2:2 + int(attrs["bias"]) + 4 * int(attrs["bn"])]:
        if t.shape is not None and m is not None and tuple(t.shape) != (m,):
            type_error(f"ConvFused: a per-channel input has shape {list(t.shape)}, not [{m}]", "one value per filter")
    if attrs["residual"] and ts[-1].shape is not None and y.shape is not None and tuple(ts[-1].shape) != y.shape:
        type_error(f"ConvFused: the residual has shape {list(ts[-1].shape)}, not {list(y.shape)}",
                   "the residual is added to Y elementwise")
    return [TensorType(y.dtype, y.shape)]


declare("ConvFused", (2, 8), _conv_fused, attrs=dict(CONV, **EPILOGUE), traits={PURE, SIZED_BY_VALUES},
        doc="Y = relu?((conv(X, W) + b) s + shift + R): a Conv with its bias, a test-mode SpatialBN "
            "(s = scale / sqrt(var + epsilon), shift = bias - mean s), a residual Sum and a ReLU fused by "
            "fuse-conv; inputs X, W[, b][, scale, bias, mean, var][, R] as bias/bn/residual say")
no_gradient("ConvFused")  # (made after autodiff, on inference chains only: see the module's docstring)


def fold_bn(w, scale, shift, mean, var, *b_and_epsilon):
    """(W', t): the weights with test-mode batch norm's scale s = scale / sqrt(var + epsilon)
    folded in (W' = W s per filter, rounded once from float64), and what remains of the
    norm and of the conv's bias b, if given: t = shift - mean s + b s. Conv(X, W') + t is
    the chain's Y, up to float32 rounding."""
    *b, epsilon = b_and_epsilon
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    t = shift.astype(np.float64) - mean.astype(np.float64) * s
    if b:
        t = t + b[0].astype(np.float64) * s
    folded = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    return folded, t.astype(w.dtype)


def conv_fused(x, w, *rest, windows=None, once=None, bias=0, bn=0, epsilon=1e-5, residual=0, relu=0, **attrs):
    """``windows``: as conv_math.conv's. ``once(make, *sources, extra=...)``: a backend's
    keeper of values derived from weights nothing can write (runtime/derived.py): given,
    batch norm is folded into such weights once (``fold_bn``), and each call runs the
    convolution on them and adds one shift; else (or for weights that may change) each
    call scales the convolution's output."""
    rest = list(rest)
    b = rest.pop(0) if bias else None
    if bn and once is not None:
        got = once(fold_bn, w, *rest[:4], *([] if b is None else [b]), extra=(float(epsilon),))
        if got is not None:
            folded, shift = got
            y = conv_math.conv(x, folded, windows=windows, op_name="ConvFused", **attrs)
            y += shift.reshape((1, -1) + (1,) * (y.ndim - 2))
            return _tail(y, rest, residual, relu)
    y = conv_math.conv(x, w, windows=windows, op_name="ConvFused", **attrs)  # (a fresh array: the epilogue runs in place)
    shape = (1, -1) + (1,) * (y.ndim - 2)
    if bn:
        scale, shift, mean, var = rest[:4]
        s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
        t = shift.astype(np.float64) - mean.astype(np.float64) * s
        if b is not None:
            t = t + b.astype(np.float64) * s
        y *= s.astype(y.dtype).reshape(shape)
        y += t.astype(y.dtype).reshape(shape)
    elif b is not None:
        y += b.reshape(shape)
    return _tail(y, rest, residual, relu)


def _tail(y, rest, residual, relu):
    """The epilogue's residual sum and ReLU, in place."""
    if residual:
        y += rest[-1]
    if relu:
        np.maximum(y, 0, out=y)
    return y


FUNCTIONS = {"ConvFused": conv_fused}
