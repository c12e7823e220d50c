"""Convolution and pooling over N-D images (Caffe2's Conv, MaxPool, AveragePool), their
gradients, and their geometry arguments as Caffe2 spells them.

    Conv(X [N, C, H, W], W [M, C / group, kh, kw], b [M]) -> Y [N, M, H', W']
    H' = (H + pad_t + pad_b - dilation (kh - 1) - 1) / stride + 1

Geometry: ``kernel`` / ``kernels`` / ``kernel_h, kernel_w`` (Conv takes it from W when
absent), ``stride(s)``, ``pad`` / ``pads`` (begins, then ends) / ``pad_t, pad_l, pad_b,
pad_r``, ``dilation(s)``, ``legacy_pad`` (3: Caffe's ceil-mode pooling), ``global_pooling``.
``order`` is NCHW or NHWC. The numpy semantics the interpreter runs are in ``conv_math``.
"""
from __future__ import annotations

import math

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import OPS, PURE, declare, type_error
from ..types import TensorType
from .nn import floats

GEOMETRY = {"kernel": None, "kernels": None, "kernel_h": None, "kernel_w": None, "stride": None,
            "strides": None, "stride_h": None, "stride_w": None, "pad": None, "pads": None, "pad_t": None,
            "pad_l": None, "pad_b": None, "pad_r": None, "dilation": None, "dilations": None,
            "dilation_h": None, "dilation_w": None, "legacy_pad": 0, "global_pooling": 0,
            "order": "NCHW", "engine": "", "exhaustive_search": 0, "ws_nbytes_limit": None,
            "shared_buffer": 0, "float16_compute": 0}
CONV = dict(GEOMETRY, group=1)
POOL = dict(GEOMETRY, count_include_pad=0)
LEGACY_CAFFE_POOLING = 3


class Geometry:
    """Kernel, strides, pads (begin, end) and dilations of each spatial dim, and the output size."""

    def __init__(self, name, attrs, spatial, kernel=None):
        nd = len(spatial)
        self.name = name

        def per_dim(single, plural, h, w, default):
            if attrs.get(plural) is not None:
                got = [int(v) for v in attrs[plural]]
            elif attrs.get(single) is not None:
                got = [int(attrs[single])] * nd
            elif nd == 2 and (attrs.get(h) is not None or attrs.get(w) is not None):
                got = [int(attrs.get(h) if attrs.get(h) is not None else default),
                       int(attrs.get(w) if attrs.get(w) is not None else default)]
            else:
                return None if default is None else [default] * nd
            if len(got) != nd:
                type_error(f"{name}: {plural} has {len(got)} values for {nd} spatial dims",
                           f"give one {single} per spatial dim")
            return got

        if attrs.get("global_pooling"):  # (the whole image: a kernel given too is ignored, as in Caffe2)
            self.kernel = list(spatial)
        else:
            self.kernel = per_dim("kernel", "kernels", "kernel_h", "kernel_w", None) or kernel
        if self.kernel is None:
            type_error(f"{name} needs a kernel size", "pass kernel=k (or kernels=[...], kernel_h/kernel_w)")
        self.stride = per_dim("stride", "strides", "stride_h", "stride_w", 1)
        self.dilation = per_dim("dilation", "dilations", "dilation_h", "dilation_w", 1)
        if attrs.get("pads") is not None:
            pads = [int(v) for v in attrs["pads"]]
            if len(pads) != 2 * nd:
                type_error(f"{name}: pads has {len(pads)} values for {nd} spatial dims",
                           "give the begin pads, then the end pads")
            self.pads = [(pads[k], pads[k + nd]) for k in range(nd)]
        elif attrs.get("pad") is not None:
            self.pads = [(int(attrs["pad"]),) * 2] * nd
        elif nd == 2 and any(attrs.get(k) is not None for k in ("pad_t", "pad_l", "pad_b", "pad_r")):
            top, left, bottom, right = (int(attrs.get(k) or 0) for k in ("pad_t", "pad_l", "pad_b", "pad_r"))
            self.pads = [(top, bottom), (left, right)]
        else:
            self.pads = [(0, 0)] * nd
        if attrs.get("global_pooling"):
            self.stride, self.pads, self.dilation = [1] * nd, [(0, 0)] * nd, [1] * nd
        if any(v <= 0 for v in self.kernel + self.stride + self.dilation) or any(min(p) < 0 for p in self.pads):
            type_error(f"{name}: kernel, stride and dilation must be positive and pads non-negative",
                       "check the geometry arguments")
        self.out = []
        for k, size in enumerate(spatial):
            self.out.append(None if size is None else self._out(k, size, int(attrs.get("legacy_pad") or 0)))

    def _out(self, k, size, legacy):
        span = self.dilation[k] * (self.kernel[k] - 1) + 1
        head, tail = self.pads[k]
        if legacy == LEGACY_CAFFE_POOLING:  # Caffe's ceil mode; the tail pad grows to fit
            out = int(math.ceil((size + head + tail - span) / self.stride[k])) + 1
            if head > 0 and (out - 1) * self.stride[k] >= size + head:
                out -= 1
            self.pads[k] = (head, max(tail, (out - 1) * self.stride[k] + span - size - head))
        else:
            out = (size + head + tail - span) // self.stride[k] + 1
        if out <= 0:
            type_error(f"{self.name}: a spatial dim of {size} (pads {self.pads[k]}) is smaller than the "
                       f"kernel's span {span}", "pad the input or use a smaller kernel")
        return out


def _layout(order, name):
    if order not in ("NCHW", "NHWC"):
        type_error(f"{name}: order {order!r} is neither NCHW nor NHWC", "pass order='NCHW' or 'NHWC'")
    return order == "NCHW"


def _conv(types, attrs, n):
    ts = floats("Conv", types)
    x, w = ts[0], ts[1]
    nchw = _layout(attrs["order"], "Conv")
    if x.shape is None or w.shape is None:
        return [TensorType(x.dtype, None)]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        type_error(f"Conv of X {list(x.shape)} with W {list(w.shape)}: both need N + C + spatial dims",
                   "X is [N, C, H, W] and W [M, C / group, kh, kw] (NCHW)")
    spatial = x.shape[2:] if nchw else x.shape[1:-1]
    channels, kdims = (x.shape[1], w.shape[2:]) if nchw else (x.shape[-1], w.shape[1:-1])
    wc = w.shape[1] if nchw else w.shape[-1]
    group = int(attrs["group"])
    if None not in (channels, wc) and channels != wc * group:
        type_error(f"Conv: X has {channels} channels, W takes {wc} per group of {group}",
                   "W's second dim is C / group")
    if len(ts) == 3 and ts[2].shape is not None and w.shape[0] is not None and tuple(ts[2].shape) != (w.shape[0],):
        type_error(f"Conv: the bias has shape {list(ts[2].shape)}, not [{w.shape[0]}]", "one bias per filter")
    g = Geometry("Conv", attrs, spatial, kernel=list(kdims))
    if list(kdims) != g.kernel and None not in kdims:
        type_error(f"Conv: W's kernel {list(kdims)} is not the kernel argument {g.kernel}",
                   "leave out kernel= (W gives it)")
    out = (x.shape[0], w.shape[0], *g.out) if nchw else (x.shape[0], *g.out, w.shape[0])
    return [TensorType(x.dtype, out)]


declare("Conv", (2, 3), _conv, attrs=dict(CONV), traits={PURE},
        doc="Y = the convolution of X with filters W (+ bias b), in groups; stride, pads, dilation")
def _conv_grad(types, attrs, n):
    x, w, dy = floats("ConvGradient", types)
    bias = TensorType(w.dtype, None if w.shape is None else (w.shape[0],))
    return [w, bias, x] if n == 3 else [w, x]


declare("ConvGradient", 3, _conv_grad, results=(2, 3), attrs=dict(CONV, no_bias=0), traits={PURE},
        doc="(dW, db, dX) from (X, W, dY) of Conv; (dW, dX) with no_bias")
no_gradient("ConvGradient")


@gradient("Conv")
def _(g):
    args = {k: v for k, v in g.args.items() if k in CONV}
    if len(g.I) == 3:
        return [GradOp("ConvGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[2], g.GI[0]], args)]
    return [GradOp("ConvGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[0]], dict(args, no_bias=1))]


# ConvTranspose: the gradient of a convolution as an op (every input pixel scatters its
# kernel-weighted channels into the output), output H' = (H - 1) stride - pads + kernel + adj
def _conv_transpose(types, attrs, n):
    ts = floats("ConvTranspose", types)
    x, w = ts[0], ts[1]
    if not _layout(attrs["order"], "ConvTranspose"):
        type_error("ConvTranspose supports NCHW only", "transpose to NCHW first")
    if x.shape is None or w.shape is None:
        return [TensorType(x.dtype, None)]
    if len(x.shape) != 4 or len(w.shape) != 4:
        type_error(f"ConvTranspose of X {list(x.shape)} with W {list(w.shape)}: 2-D images only",
                   "X is [N, C, H, W], W [C, M, kh, kw]")
    if None not in (x.shape[1], w.shape[0]) and x.shape[1] != w.shape[0]:
        type_error(f"ConvTranspose: X has {x.shape[1]} channels, W takes {w.shape[0]}", "W is [C, M, kh, kw]")
    g = transposed_geometry(attrs, list(w.shape[2:]), x.shape[2:])
    return [TensorType(x.dtype, (x.shape[0], w.shape[1], *g.out_t))]


def transposed_geometry(attrs, kernel, spatial):
    g = Geometry("ConvTranspose", dict(attrs, legacy_pad=0, dilation=None, dilations=None), [None] * len(kernel),
                 kernel=kernel)
    adj = [int(attrs.get("adj") or 0)] * len(kernel)
    g.out_t = [None if s is None else (s - 1) * st - p0 - p1 + k + a
               for s, st, (p0, p1), k, a in zip(spatial, g.stride, g.pads, g.kernel, adj)]
    return g


declare("ConvTranspose", (2, 3), _conv_transpose, attrs=dict(GEOMETRY, adj=0), traits={PURE},
        doc="Y = the transposed convolution of X with W [C, M, kh, kw] (+ bias b [M]); stride, pads, adj")
declare("ConvTransposeGradient", 3, _conv_grad, results=(2, 3), attrs=dict(GEOMETRY, adj=0, no_bias=0),
        traits={PURE}, doc="(dW, db, dX) from (X, W, dY) of ConvTranspose; (dW, dX) with no_bias")
no_gradient("ConvTransposeGradient")


@gradient("ConvTranspose")
def _(g):
    args = {k: v for k, v in g.args.items() if k in GEOMETRY or k == "adj"}
    if len(g.I) == 3:
        return [GradOp("ConvTransposeGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[2], g.GI[0]], args)]
    return [GradOp("ConvTransposeGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[0]], dict(args, no_bias=1))]


def _pool(name):
    def infer(types, attrs, n):
        (x,) = floats(name, types)
        nchw = _layout(attrs["order"], name)
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        if len(x.shape) < 3:
            type_error(f"{name} needs X of N + C + spatial dims, got {list(x.shape)}", "X is [N, C, H, W] (NCHW)")
        spatial = x.shape[2:] if nchw else x.shape[1:-1]
        g = Geometry(name, attrs, spatial)
        out = (x.shape[0], x.shape[1], *g.out) if nchw else (x.shape[0], *g.out, x.shape[-1])
        return [TensorType(x.dtype, out)]
    return infer


for _name, _what in (("MaxPool", "maximum"), ("AveragePool", "mean")):
    declare(_name, 1, _pool(_name), attrs=dict(POOL), traits={PURE},
            doc=f"Y = the {_what} of each window of X (padding "
                + ("never wins)" if _name == "MaxPool" else "counted only with count_include_pad)"))
    declare(_name + "Gradient", 3, lambda t, a, n, _n=_name: [floats(_n + "Gradient", t)[0]],
            attrs=dict(POOL), traits={PURE},
            doc=f"dX from (X, Y, dY) of {_name}"
                + (": dY to every input equal to its window's max" if _name == "MaxPool" else ""))
    no_gradient(_name + "Gradient")
    gradient(_name)(lambda g, _n=_name: [GradOp(_n + "Gradient", [g.I[0], g.O[0], g.GO[0]], [g.GI[0]],
                                                {k: v for k, v in g.args.items() if k in POOL})])


# LpPool: the p-norm of each window (padding adds nothing)
declare("LpPool", 1, _pool("LpPool"), attrs=dict(POOL, p=2.0), traits={PURE},
        doc="Y = (the sum of |x|^p over each window of X)^(1/p)")
declare("LpPoolGradient", 3, lambda t, a, n: [floats("LpPoolGradient", t)[0]], attrs=dict(POOL, p=2.0),
        traits={PURE}, doc="dX from (X, Y, dY) of LpPool: dY x |x|^(p - 2) / y^(p - 1) per window element")
no_gradient("LpPoolGradient")
gradient("LpPool")(lambda g: [GradOp("LpPoolGradient", [g.I[0], g.O[0], g.GO[0]], [g.GI[0]],
                                     {k: v for k, v in g.args.items() if k in POOL or k == "p"})])

for _name in ("Conv", "MaxPool", "AveragePool"):
    for _d in ("1D", "2D", "3D"):  # (the rank comes from X; Caffe2 checks it, dslc reads it)
        OPS.alias(_name + _d, _name)
OPS.alias("ConvND", "Conv")
