"""The numba backend's kernels for convolution and max pooling (2-D, NCHW):
compiled loops for the parts numpy does as strided copies or one pass per kernel offset.

Conv, ConvTranspose and their gradients keep the interpreter's GEMMs, blocks and window
copies (ir/ops/conv_math.py), with compiled loops (``WINDOWS``) where they beat numpy: a
window matrix's gradient added back into the image, kernel offset by offset as numpy adds
it, and the depthwise convolution (one channel per group: MobileNet's) and its gradient as
direct loops over each image plane, with no windows at all. MaxPool runs over each
plane's padded frame (numpy's is nine passes over strided views and a padded copy of the
whole batch); MaxPoolGradient is one compiled pass over the windows. The loops read a window's position from the geometry's
frame (``pads[k][0]``: where the windows start, before the image or inside it) and skip
what falls outside the image. Like ``sparse``, they run between islands as the
interpreter's kernels would, and give its answers up to the order in which contributions
are added (where windows overlap, the last bits of a sum may differ). Their results are
allocated by numpy, outside the loops.
"""
from __future__ import annotations

import functools

import numpy as np

from dslc.backends.interp.kernels_nn import bound
from dslc.ir.ops import conv_direct as D
from dslc.ir.ops.conv_fused import conv_fused
from dslc.ir.ops import conv_math as C
from dslc.runtime.derived import once

from .cache import jit


@jit(nogil=True)
def _scatter_matrix_2d(dm, dx, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw):
    # dm: [c * kh * kw, n * oh * ow], row (ci, ky, kx), column (b, oy, ox); dx[b, ci, iy, ix]
    # (zeros) gets every value whose window position reads it (iy = oy sh + ky dh - ph),
    # kernel offset by offset as numpy adds them
    n, c, h, w = dx.shape
    for ci in range(c):
        for ky in range(kh):
            for kx in range(kw):
                k = (ci * kh + ky) * kw + kx
                for b in range(n):
                    for oy in range(oh):
                        iy = oy * sh + ky * dh - ph
                        if iy < 0 or iy >= h:
                            continue
                        col = (b * oh + oy) * ow
                        for ox in range(ow):
                            ix = ox * sw + kx * dw - pw
                            if 0 <= ix < w:
                                dx[b, ci, iy, ix] += dm[k, col + ox]


@jit(nogil=True)
def _valid(o, d, lo, s, size, out):
    # the outputs [o0, o1) whose input (o0 s + o d - lo ...) lies inside [0, size)
    start = o * d - lo
    o0 = 0 if start >= 0 else min(-(start // s), out)
    o1 = min(max(o0, -((start - size) // s)), out)
    return o0, o1


def _geometry_args(g):
    """(kh, kw, sh, sw, dh, dw, ph, pw, oh, ow) of a 2-D Geometry (ph, pw: where its
    frame starts, before the image; negative inside it)."""
    return (*g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0], *g.out)


def _scatter_matrix(dm, g, x_shape):
    if len(g.kernel) != 2 or not dm.flags.c_contiguous:
        return C.scatter_matrix(dm, g, x_shape)
    kh, kw, sh, sw, dh, dw, ph, pw, oh, ow = _geometry_args(g)
    dx = np.zeros(x_shape, dm.dtype)
    _scatter_matrix_2d(dm, dx, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw)
    return dx


@jit(nogil=True)
def _frame_of(x, fh, fw, ph, pw, fill, spare):
    # a plane's frame [fh, fw] and ``spare`` rows more (flat, ``fill`` where no row or
    # column of x lies: the pads, written once, since every plane's interior is the same),
    # and the rows and columns of x it holds (x's row iy is the frame's iy + ph)
    h, wd = x.shape[2], x.shape[3]
    frame = np.full((fh + spare) * fw, fill, x.dtype)
    return frame, max(0, -ph), min(h, fh - ph), max(0, -pw), min(wd, fw - pw)


@jit(nogil=True)
def _plane_into(frame, xf, p, h, wd, iy0, iy1, ix0, ix1, ph, pw, fw):
    # x's plane p (flat xf) into the interior of its frame
    U = np.uint64
    xb = U(p) * U(h) * U(wd)
    for iy in range(iy0, iy1):
        r, s = U((iy + ph) * fw + pw), xb + U(iy) * U(wd)
        for ix in range(U(ix0), U(ix1)):
            frame[r + ix] = xf[s + ix]


@jit(nogil=True)
def _depthwise_2d(x, w, y, kh, kw, sh, sw, dh, dw, ph, pw):
    # y [n, c, oh, ow] = sum over (ky, kx) of w[c, 0, ky, kx] x[b, c, oy sh + ky dh - ph,
    # ox sw + kx dw - pw]. Each image plane is first copied into a zero-padded frame, so the
    # loops never test a bound. With unit strides, a kernel offset's products are one run
    # over the flat frame (rows' tails computed and dropped; one spare frame row keeps the
    # last run inside): long runs that vectorize, where rows of 7-28 do not. Else row by
    # row. Indices are unsigned: numba's negative-index check keeps loops from vectorizing.
    n, c, h, wd = x.shape
    oh, ow = y.shape[2], y.shape[3]
    if n * c * oh * ow == 0:
        return
    flat = sh == 1 and sw == 1
    fh = (oh - 1) * sh + (kh - 1) * dh + 1
    fw = (ow - 1) * sw + (kw - 1) * dw + 1
    frame, iy0, iy1, ix0, ix1 = _frame_of(x, fh, fw, ph, pw, 0.0, 1 if flat else 0)
    acc = np.empty(oh * fw if flat else ow, x.dtype)
    xf, yf, wf = x.ravel(), y.ravel(), w.ravel()
    U = np.uint64
    ufw, uow, ukh, ukw = U(fw), U(ow), U(kh), U(kw)
    for p in range(n * c):
        _plane_into(frame, xf, p, h, wd, iy0, iy1, ix0, ix1, ph, pw, fw)
        yb, wb = U(p) * U(oh) * uow, U(p % c) * ukh * ukw
        if flat:
            run = U(oh * fw)
            for j in range(run):
                acc[j] = 0
            for ky in range(ukh):
                for kx in range(ukw):
                    wv, o = wf[wb + ky * ukw + kx], ky * U(dh) * ufw + kx * U(dw)
                    for j in range(run):
                        acc[j] += wv * frame[o + j]
            for oy in range(U(oh)):
                for ox in range(uow):
                    yf[yb + oy * uow + ox] = acc[oy * ufw + ox]
        else:
            for oy in range(U(oh)):
                for ox in range(uow):
                    acc[ox] = 0
                for ky in range(ukh):
                    r = (oy * U(sh) + ky * U(dh)) * ufw
                    for kx in range(ukw):
                        wv, o = wf[wb + ky * ukw + kx], r + kx * U(dw)
                        for ox in range(uow):
                            acc[ox] += wv * frame[o + ox * U(sw)]
                for ox in range(uow):
                    yf[yb + oy * uow + ox] = acc[ox]


@jit(nogil=True)
def _max_pool_2d(x, y, kh, kw, sh, sw, dh, dw, ph, pw):
    # y [n, c, oh, ow] = the max of each window, the pads -inf (as the interpreter's frame),
    # NaN propagated as np.maximum does, the earlier value kept on ties; each output row
    # from a plane's -inf-padded frame (no bound tests), indices unsigned (as above)
    n, c, h, wd = x.shape
    oh, ow = y.shape[2], y.shape[3]
    if n * c * oh * ow == 0:
        return
    fh = (oh - 1) * sh + (kh - 1) * dh + 1
    fw = (ow - 1) * sw + (kw - 1) * dw + 1
    frame, iy0, iy1, ix0, ix1 = _frame_of(x, fh, fw, ph, pw, -np.inf, 0)
    acc = np.empty(ow, x.dtype)
    xf, yf = x.ravel(), y.ravel()
    U = np.uint64
    ufw, uow, usw = U(fw), U(ow), U(sw)
    for p in range(n * c):
        _plane_into(frame, xf, p, h, wd, iy0, iy1, ix0, ix1, ph, pw, fw)
        yb = U(p) * U(oh) * uow
        for oy in range(U(oh)):
            r = oy * U(sh) * ufw
            for ox in range(uow):
                acc[ox] = frame[r + ox * usw]
            for ky in range(U(kh)):
                for kx in range(U(kw)):
                    if ky + kx == 0:
                        continue
                    o = r + ky * U(dh) * ufw + kx * U(dw)
                    for ox in range(uow):
                        v, m = frame[o + ox * usw], acc[ox]
                        acc[ox] = v if v > m or v != v else m
            for ox in range(uow):
                yf[yb + oy * uow + ox] = acc[ox]


@jit(nogil=True)
def _depthwise_grad_2d(x, w, dy, dwt, dx, want_dw, want_dx, kh, kw, sh, sw, dh, dw, ph, pw):
    # dx (zeros) gets dY times each weight at the positions it read; dwt (zeros) [c, kh, kw]
    # sums dY times what each weight read
    n, c, h, wd = dx.shape
    oh, ow = dy.shape[2], dy.shape[3]
    for b in range(n):
        for ci in range(c):
            for ky in range(kh):
                oy0, oy1 = _valid(ky, dh, ph, sh, h, oh)
                for kx in range(kw):
                    ox0, ox1 = _valid(kx, dw, pw, sw, wd, ow)
                    wv = w[ci, 0, ky, kx]
                    acc = dwt.dtype.type(0)
                    for oy in range(oy0, oy1):
                        iy = oy * sh + ky * dh - ph
                        for ox in range(ox0, ox1):
                            ix = ox * sw + kx * dw - pw
                            if want_dx:
                                dx[b, ci, iy, ix] += wv * dy[b, ci, oy, ox]
                            if want_dw:
                                acc += dy[b, ci, oy, ox] * x[b, ci, iy, ix]
                    dwt[ci, ky, kx] += acc


def _plain(*arrays):
    return all(a.ndim == 4 and a.flags.c_contiguous and a.dtype == arrays[0].dtype for a in arrays)


def _depthwise(x, w, g):
    if len(g.kernel) != 2 or not _plain(x, w):
        return D.depthwise(x, w, g)
    y = np.empty(x.shape[:2] + tuple(g.out), x.dtype)
    _depthwise_2d(x, w, y, *g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0])
    return y


def _depthwise_grad(x, w, dy, g, x_shape, want_dw=True, want_dx=True):
    if len(g.kernel) != 2 or not _plain(*((x, w, dy) if want_dw else (w, dy))):
        return D.depthwise_grad(x, w, dy, g, x_shape, want_dw, want_dx)
    dwt = np.zeros((w.shape[0],) + tuple(g.kernel), w.dtype)
    dx = np.zeros(x_shape, dy.dtype)
    _depthwise_grad_2d(dy if x is None else x, w, dy, dwt, dx, want_dw, want_dx, *g.kernel, *g.stride,
                       *g.dilation, g.pads[0][0], g.pads[1][0])
    return (dwt.reshape(w.shape) if want_dw else None), (dx if want_dx else None)


# (numpy's window copies: compiled element-by-element copies measured 1.9-2.6x slower than
# them, 16 x 96 x 56 x 56, 3x3, pad 1: 78 and 115 ms against 42 and 43, CPU time)
WINDOWS = C.Windows(C.columns, C.matrix, _scatter_matrix, _depthwise, _depthwise_grad)


@jit(nogil=True)
def _max_pool_grad_2d(x, y, dy, dx, kh, kw, sh, sw, dh, dw, ph, pw):
    # every element of a window equal to the window's max gets the window's gradient (dx:
    # zeros)
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    zero = dy.dtype.type(0)
    for b in range(n):
        for ci in range(c):
            for oy in range(oh):
                for ox in range(ow):
                    top, g = y[b, ci, oy, ox], dy[b, ci, oy, ox]
                    for ky in range(kh):
                        iy = oy * sh + ky * dh - ph
                        if iy < 0 or iy >= h:
                            continue  # (padding: -inf, never a max that counts)
                        for kx in range(kw):
                            ix = ox * sw + kx * dw - pw
                            if 0 <= ix < w:  # (no branch on the data: 0 added where not the max, as numpy)
                                dx[b, ci, iy, ix] += g if x[b, ci, iy, ix] == top else zero


def _max_pool(x, **attrs):
    if attrs.get("order", "NCHW") != "NCHW" or x.ndim != 4 or not x.flags.c_contiguous or \
            x.dtype.kind != "f" or 0 in x.shape:
        return C.max_pool(x, **attrs)
    g = C.geometry("MaxPool", x, attrs)
    y = np.empty(x.shape[:2] + tuple(g.out), x.dtype)
    _max_pool_2d(x, y, *g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0])
    return y


def _max_pool_grad(x, y, dy, **attrs):
    if attrs.get("order", "NCHW") != "NCHW" or x.ndim != 4 or y.shape != dy.shape or \
            not all(a.flags.c_contiguous for a in (x, y, dy)) or 0 in y.shape:
        return C.max_pool_grad(x, y, dy, **attrs)
    g = C.geometry("MaxPool", x, attrs)
    if tuple(y.shape[2:]) != tuple(g.out):
        return C.max_pool_grad(x, y, dy, **attrs)  # (the interpreter's error)
    dx = np.zeros(x.shape, dy.dtype)
    _max_pool_grad_2d(x, y, dy, dx, *g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0])
    return dx.astype(x.dtype, copy=False)


KERNELS = {
    **{name: lambda op, cfg, _f=C.FUNCTIONS[name]: bound(functools.partial(_f, windows=WINDOWS), op.attrs)
       for name in ("Conv", "ConvTranspose", "ConvTransposeGradient")},
    "ConvGradient": lambda op, cfg: bound(functools.partial(C.conv_grad, windows=WINDOWS,
                                                            with_dx=bool(op.opdef.optional(op))), op.attrs),
    "ConvFused": lambda op, cfg: bound(functools.partial(conv_fused, windows=WINDOWS, once=once), op.attrs),
    "MaxPool": lambda op, cfg: bound(_max_pool, op.attrs),
    "MaxPoolGradient": lambda op, cfg: bound(_max_pool_grad, op.attrs),
}
