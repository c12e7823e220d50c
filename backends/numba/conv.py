"""The numba backend's kernels for convolution and max pooling's gradient (2-D, NCHW):
compiled loops for the parts numpy does as strided copies or one pass per kernel offset.

Conv, ConvTranspose and their gradients keep the interpreter's GEMMs and blocks
(ir/ops/conv_math.py) and get their windows from compiled loops (``WINDOWS``: the image
cut into columns or one window matrix, a matrix gradient added back into the image, kernel
offset by offset as numpy adds it); MaxPoolGradient is one compiled pass over the windows.
The loops read a window's position from the geometry's frame (``pads[k][0]``: where the
windows start, before the image or inside it) and skip what falls outside the image. Like
``sparse``, they run between islands as the interpreter's kernels would, and give its
answers up to the order in which an image element's contributions are added (window by
window here, kernel offset by offset in numpy): where windows overlap, the last bits of a
sum may differ. Their results are allocated by numpy, outside the loops.
"""
from __future__ import annotations

import functools

import numpy as np

from dslc.backends.interp.kernels_nn import bound
from dslc.ir.ops import conv_math as C

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
def _columns_2d(x, cols, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    # cols (zeros) [n, c * kh * kw, oh * ow]: column (ci, ky, kx) gets what each window
    # reads there (0 in the padding), written in order
    n, c, h, w = x.shape
    for b in range(n):
        for ci in range(c):
            for ky in range(kh):
                for kx in range(kw):
                    k = (ci * kh + ky) * kw + kx
                    for oy in range(oh):
                        iy = oy * sh + ky * dh - ph
                        if iy < 0 or iy >= h:
                            continue
                        for ox in range(ow):
                            ix = ox * sw + kx * dw - pw
                            if 0 <= ix < w:
                                cols[b, k, oy * ow + ox] = x[b, ci, iy, ix]


@jit(nogil=True)
def _matrix_2d(x, mat, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    # mat (zeros) [c * kh * kw, n * oh * ow]: row (ci, ky, kx) gets what every window of
    # the batch reads there (0 in the padding), written in order
    n, c, h, w = x.shape
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
                                mat[k, col + ox] = x[b, ci, iy, ix]


def _geometry_args(g):
    """(kh, kw, sh, sw, dh, dw, ph, pw, oh, ow) of a 2-D Geometry (ph, pw: where its
    frame starts, before the image; negative inside it)."""
    return (*g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0], *g.out)


def _compiled(fallback, kernel, shape):
    """``kernel(x, zeros(shape(x, g)), *geometry)`` for a contiguous 4-D image, else
    numpy's ``fallback``. (The result is allocated here, by numpy, so that tracemalloc
    sees it as it sees the interpreter's.)"""
    def run(x, g):
        if len(g.kernel) != 2 or x.ndim != 4 or not x.flags.c_contiguous or 0 in x.shape:
            return fallback(x, g)
        out = np.zeros(shape(x.shape, g), x.dtype)
        kernel(x, out, *_geometry_args(g))
        return out
    return run


def _scatter_matrix(dm, g, x_shape):
    if len(g.kernel) != 2 or not dm.flags.c_contiguous:
        return C.scatter_matrix(dm, g, x_shape)
    kh, kw, sh, sw, dh, dw, ph, pw, oh, ow = _geometry_args(g)
    dx = np.zeros(x_shape, dm.dtype)
    _scatter_matrix_2d(dm, dx, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw)
    return dx


def _kernel_size(g):
    return g.kernel[0] * g.kernel[1]


WINDOWS = C.Windows(
    _compiled(C.columns, _columns_2d, lambda s, g: (s[0], s[1] * _kernel_size(g), g.out[0] * g.out[1])),
    _compiled(C.matrix, _matrix_2d, lambda s, g: (s[1] * _kernel_size(g), s[0] * g.out[0] * g.out[1])),
    _scatter_matrix)


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
       for name in ("Conv", "ConvGradient", "ConvTranspose", "ConvTransposeGradient")},
    "MaxPoolGradient": lambda op, cfg: bound(_max_pool_grad, op.attrs),
}
