"""Convolution and pooling over N-D images (Caffe2's Conv, MaxPool, AveragePool), their
gradients, and their geometry arguments as Caffe2 spells them.

    Conv(X [N, C, H, W], W [M, C / group, kh, kw], b [M]) -> Y [N, M, H', W']
    H' = (H + pad_t + pad_b - dilation (kh - 1) - 1) / stride + 1

Geometry: ``kernel`` / ``kernels`` / ``kernel_h, kernel_w`` (Conv takes it from W when
absent), ``stride(s)``, ``pad`` / ``pads`` (begins, then ends) / ``pad_t, pad_l, pad_b,
pad_r``, ``dilation(s)``, ``legacy_pad`` (how Caffe2 sizes the output and pads: ``Geometry``),
``global_pooling``.
``order`` is NCHW or NHWC. The numpy semantics the interpreter runs are in ``conv_math``.
"""
from __future__ import annotations

import math

from ..gradients import GradOp, gradient, no_gradient
from ..cost import products
from ..opdef import OPS, PURE, SIZED_BY_VALUES, declare, type_error
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
# legacy_pad: how Caffe2 sizes the output and pads (caffe2_legacy.proto's LegacyPadding)
NOTSET, VALID, SAME, CAFFE_LEGACY_POOLING = range(4)
LEGACY_NAMES = ("NOTSET", "VALID", "SAME", "CAFFE_LEGACY_POOLING")
_PAD_ARGS = ("pad", "pads", "pad_t", "pad_l", "pad_b", "pad_r")


class Geometry:
    """Kernel, strides, dilations and pads of each spatial dim, and the output size, as
    Caffe2 computes them for ``legacy_pad`` (NOTSET: the pads given; VALID: none; SAME:
    ceil(size / stride) outputs, the padding split with the smaller half before; Caffe's
    ceil-mode pooling: the tail pad grows).

    ``declared``: Caffe2's pads, (begin, end) per dim, as its ``legacy_pad`` leaves them.
    ``pads``: the frame the windows read, (begin, end) per dim: the input, ``begin``
    elements before it (negative: the windows start inside it) and ``end`` after it
    (negative: the windows stop short of its end), exactly ``(out - 1) stride + span``
    long. They differ where Caffe2's windows run past its pads (a VALID window wider than
    the image, Caffe's pooling with a dilated kernel): Caffe2 reads nothing there."""

    def __init__(self, name, attrs, spatial, kernel=None):
        nd = len(spatial)
        self.name = name

        def per_dim(single, plural, h, w, default):
            return _per_dim(name, attrs, nd, single, plural, h, w, default)

        self.legacy = int(attrs.get("legacy_pad") or 0)
        if self.legacy not in range(4):
            type_error(f"{name}: legacy_pad {self.legacy} is none of Caffe2's paddings",
                       "pass legacy_pad 0 (NOTSET), 1 (VALID), 2 (SAME) or 3 (CAFFE_LEGACY_POOLING)")
        if attrs.get("global_pooling"):  # (the whole image: a kernel given too is ignored, as in Caffe2)
            self.kernel = list(spatial)
        else:
            self.kernel = per_dim("kernel", "kernels", "kernel_h", "kernel_w", None) or kernel
        if self.kernel is None:
            type_error(f"{name} needs a kernel size", "pass kernel=k (or kernels=[...], kernel_h/kernel_w)")
        self.stride = per_dim("stride", "strides", "stride_h", "stride_w", 1)
        self.dilation = per_dim("dilation", "dilations", "dilation_h", "dilation_w", 1)
        if self.legacy in (VALID, SAME) and any(attrs.get(k) is not None for k in _PAD_ARGS):
            type_error(f"{name}: legacy_pad {LEGACY_NAMES[self.legacy]} computes the pads itself, and pads "
                       f"are given too", "leave out pad / pads / pad_t ... (Caffe2 refuses both)")
        if self.legacy == SAME and any(d != 1 for d in self.dilation):
            type_error(f"{name}: legacy_pad SAME with dilation {self.dilation}", "Caffe2's SAME padding takes "
                       "no dilation: pass the pads instead")
        if attrs.get("pads") is not None:
            pads = [int(v) for v in attrs["pads"]]
            if len(pads) != 2 * nd:
                type_error(f"{name}: pads has {len(pads)} values for {nd} spatial dims",
                           "give the begin pads, then the end pads")
            self.declared = [(pads[k], pads[k + nd]) for k in range(nd)]
        elif attrs.get("pad") is not None:
            self.declared = [(int(attrs["pad"]),) * 2] * nd
        elif nd == 2 and any(attrs.get(k) is not None for k in ("pad_t", "pad_l", "pad_b", "pad_r")):
            top, left, bottom, right = (int(attrs.get(k) or 0) for k in ("pad_t", "pad_l", "pad_b", "pad_r"))
            self.declared = [(top, bottom), (left, right)]
        else:
            self.declared = [(0, 0)] * nd
        if attrs.get("global_pooling"):
            self.stride, self.declared, self.dilation = [1] * nd, [(0, 0)] * nd, [1] * nd
            self.legacy = NOTSET  # (as Caffe2: the whole image, whatever legacy_pad says)
        if any(v <= 0 for v in self.kernel + self.stride + self.dilation) or any(min(p) < 0 for p in self.declared):
            type_error(f"{name}: kernel, stride and dilation must be positive and pads non-negative",
                       "check the geometry arguments")
        self.out, self.pads = [], []
        for k, size in enumerate(spatial):
            out = None if size is None else self._out(k, size)
            self.out.append(out)
            self.pads.append(None if size is None else self.frame(k, size, out))

    def span(self, k):
        return self.dilation[k] * (self.kernel[k] - 1) + 1

    def frame(self, k, size, out):
        """(begin, end) of the frame dim ``k``'s windows read: ``out`` windows from
        ``begin`` elements before the input's start."""
        head = self.declared[k][0]
        return head, (out - 1) * self.stride[k] + self.span(k) - size - head

    def _out(self, k, size):
        """Dim ``k``'s output size from its input's (Caffe2's ComputeSizeAndPad, C's
        integer division included); ``declared[k]`` becomes the pads Caffe2 computes."""
        stride, kernel, span = self.stride[k], self.kernel[k], self.span(k)
        head, tail = self.declared[k]
        if self.legacy == NOTSET:
            if size + head + tail < span:
                type_error(f"{self.name}: a spatial dim of {size} (pads {self.declared[k]}) is smaller than the "
                           f"kernel's span {span}", "pad the input or use a smaller kernel")
            return (size + head + tail - span) // stride + 1
        if self.legacy == VALID:  # (no padding; C's division truncates a negative quotient up)
            self.declared[k] = (0, 0)
            out = _c_div(size - span, stride) + 1
        elif self.legacy == SAME:
            need = (-(-size // stride) - 1) * stride + kernel - size  # (negative: a stride past the kernel)
            head = _c_div(need, 2)
            self.declared[k] = (head, need - head)
            out = _c_div(size + need - span, stride) + 1
        else:  # Caffe's ceil-mode pooling: the begin pad twice, the kernel undilated; the tail pad grows
            out = math.ceil((size + 2 * head - kernel) / stride + 1)
            if head > 0 and (out - 1) * stride >= size + head:
                out -= 1
            standard = int((size + 2 * head - kernel) / stride + 1)
            if out < standard:  # (Caffe2 refuses this too: "This should never happen")
                type_error(f"{self.name}: legacy_pad CAFFE_LEGACY_POOLING gives {out} windows over a spatial dim "
                           f"of {size} (begin pad {head}), fewer than its pads allow ({standard})",
                           "Caffe2 refuses this geometry too: pass pads without legacy_pad")
            self.declared[k] = (head, head + stride * (out - standard))
        if out < 0:
            type_error(f"{self.name}: a spatial dim of {size} is smaller than the kernel's span {span} "
                       f"(legacy_pad {LEGACY_NAMES[self.legacy]})", "pad the input or use a smaller kernel")
        return out


def _per_dim(name, attrs, nd, single, plural, h, w, default):
    """One value per spatial dim from ``plural`` (a list), ``single`` (all dims) or, in 2-D,
    ``h`` and ``w``; ``default`` for each dim where none is given."""
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


def _c_div(a, b):
    """C's integer division (truncating toward zero), as Caffe2 sizes outputs."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


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


def _conv_flops(types, attrs, results):
    """Caffe2's count: 2 N C_out (C_in / group) prod(kernel) per output position."""
    w, y = types[1], results[0]
    nchw = attrs.get("order", "NCHW") == "NCHW"
    positions = math.prod(y.shape[2:] if nchw else y.shape[1:-1])
    per_filter = math.prod(w.shape[1:])  # (C_in / group and the kernel, in either order)
    return 2 * y.shape[0] * positions * w.shape[0] * per_filter


declare("Conv", (2, 3), _conv, attrs=dict(CONV), traits={PURE, SIZED_BY_VALUES}, cost=products(_conv_flops),
        doc="Y = the convolution of X with filters W (+ bias b), in groups; stride, pads, dilation")
def _conv_grad(types, attrs, n):
    x, w, dy = floats("ConvGradient", types)
    bias = [] if int(attrs.get("no_bias", 0)) else [TensorType(w.dtype, None if w.shape is None else (w.shape[0],))]
    if not len(bias) + 1 <= n <= len(bias) + 2:
        type_error(f"ConvGradient with no_bias={int(attrs.get('no_bias', 0))} produces (dW{', db' if bias else ''}[, dX]), "
                   f"got {n} outputs", "name dW" + (", db" if bias else "") + " and, if wanted, dX")
    return ([w] + bias + [x])[:n]


def _conv_grad_optional(attrs, n):
    """dX, the last of (dW, db, dX) or of (dW, dX) with no_bias (Caffe2 makes it only when
    named: conv_op_impl.h's OutputSize() test)."""
    return int(n == 3 - int(attrs.get("no_bias", 0)))


declare("ConvGradient", 3, _conv_grad, results=(1, 3), attrs=dict(CONV, no_bias=0), traits={PURE},
        optional_results=_conv_grad_optional,
        doc="(dW, db[, dX]) from (X, W, dY) of Conv; (dW[, dX]) with no_bias")
no_gradient("ConvGradient")


@gradient("Conv")
def _(g):
    args = {k: v for k, v in g.args.items() if k in CONV}
    if len(g.I) == 3:
        return [GradOp("ConvGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[2], g.GI[0]], args)]
    return [GradOp("ConvGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[1], g.GI[0]], dict(args, no_bias=1))]


# ConvTranspose: the input gradient of a convolution as an op (every input pixel scatters
# its kernel-weighted channels into the output), in groups as Conv: X [N, C, H, W], W
# [C, M / group, kh, kw] (Conv's layout, the channels swapped), Y [N, M, H', W'] with
# H' = (H - 1) stride - pads + kernel + adj
TRANSPOSE = dict(GEOMETRY, group=1, adj=None, adjs=None, adj_h=None, adj_w=None)


def _conv_transpose(types, attrs, n):
    ts = floats("ConvTranspose", types)
    x, w = ts[0], ts[1]
    if not _layout(attrs["order"], "ConvTranspose"):
        type_error("ConvTranspose supports NCHW only", "transpose to NCHW first")
    if x.shape is None or w.shape is None:
        return [TensorType(x.dtype, None)]
    if len(x.shape) != 4 or len(w.shape) != 4:
        type_error(f"ConvTranspose of X {list(x.shape)} with W {list(w.shape)}: 2-D images only",
                   "X is [N, C, H, W], W [C, M / group, kh, kw]")
    group = int(attrs["group"])
    if group < 1:
        type_error(f"ConvTranspose: group {group}", "group counts the channel groups: 1 or more")
    if None not in (x.shape[1], w.shape[0]) and x.shape[1] != w.shape[0]:
        type_error(f"ConvTranspose: X has {x.shape[1]} channels, W takes {w.shape[0]}",
                   "W is [C, M / group, kh, kw]")
    if x.shape[1] is not None and x.shape[1] % group:
        type_error(f"ConvTranspose: X's {x.shape[1]} channels do not split into {group} groups",
                   "the input channels are a multiple of group")
    m = None if w.shape[1] is None else w.shape[1] * group
    if len(ts) == 3 and ts[2].shape is not None and m is not None and tuple(ts[2].shape) != (m,):
        type_error(f"ConvTranspose: the bias has shape {list(ts[2].shape)}, not [{m}]",
                   "one bias per output channel (W's second dim times group)")
    g = transposed_geometry(attrs, list(w.shape[2:]), x.shape[2:])
    return [TensorType(x.dtype, (x.shape[0], m, *g.out_t))]


def transposed_geometry(attrs, kernel, spatial):
    """The geometry of the convolution whose input gradient ConvTranspose computes: its
    input is ConvTranspose's output (``out_t``), its output X (``out``: ``spatial``), and
    ``pads`` the frame its windows read over ConvTranspose's output."""
    nd = len(kernel)
    g = Geometry("ConvTranspose", dict(attrs, dilation=None, dilations=None, dilation_h=None, dilation_w=None),
                 [None] * nd, kernel=kernel)
    if g.legacy == CAFFE_LEGACY_POOLING:  # (Caffe2 aborts: "no longer supported")
        type_error("ConvTranspose: legacy_pad CAFFE_LEGACY_POOLING is for pooling",
                   "pass the pads (or legacy_pad VALID / SAME: no padding)")
    adj = _per_dim("ConvTranspose", attrs, nd, "adj", "adjs", "adj_h", "adj_w", 0)
    if any(not 0 <= a <= st for a, st in zip(adj, g.stride)):
        type_error(f"ConvTranspose: adj {adj} with stride {g.stride}", "each adj is between 0 and its stride")
    g.out, g.out_t, g.pads = list(spatial), [], []
    for s, st, (p0, p1), k, a in zip(spatial, g.stride, g.declared, g.kernel, adj):
        # (VALID and SAME: no padding, as Caffe2's ConvTranspose; none may be given)
        out = None if s is None else (s - 1) * st - p0 - p1 + k + a
        if out is not None and out < 0:
            type_error(f"ConvTranspose: pads {(p0, p1)} take more than the {out + p0 + p1} pixels the kernel "
                       f"spreads {s} over", "use smaller pads")
        g.out_t.append(out)
        g.pads.append((p0, p1 - a))  # (the adj rows at the end: no window writes them)
    return g


def _conv_transpose_grad(types, attrs, n):
    x, w, dy = floats("ConvTransposeGradient", types)
    bias = TensorType(w.dtype, None if w.shape is None else (w.shape[1] * int(attrs["group"]),))
    return [w, bias, x] if n == 3 else [w, x]


declare("ConvTranspose", (2, 3), _conv_transpose, attrs=dict(TRANSPOSE), traits={PURE, SIZED_BY_VALUES},
        doc="Y = the transposed convolution of X with W [C, M / group, kh, kw] (+ bias b [M]), in groups; "
            "stride, pads, adj")
declare("ConvTransposeGradient", 3, _conv_transpose_grad, results=(2, 3), attrs=dict(TRANSPOSE, no_bias=0),
        traits={PURE}, doc="(dW, db, dX) from (X, W, dY) of ConvTranspose; (dW, dX) with no_bias")
no_gradient("ConvTransposeGradient")


@gradient("ConvTranspose")
def _(g):
    args = {k: v for k, v in g.args.items() if k in TRANSPOSE}
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
    declare(_name, 1, _pool(_name), attrs=dict(POOL), traits={PURE, SIZED_BY_VALUES},
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
declare("LpPool", 1, _pool("LpPool"), attrs=dict(POOL, p=2.0), traits={PURE, SIZED_BY_VALUES},
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
