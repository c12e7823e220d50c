"""The numba backend's kernels for convolution and max pooling's gradient (2-D, NCHW):
compiled loops for the parts numpy does as strided copies or one pass per kernel offset.

Conv and ConvGradient keep the interpreter's GEMMs (ir/ops/conv_math.py) and get their windows
from compiled loops (``WINDOWS``: the image cut into columns or one window matrix, a
matrix gradient added back into the image, kernel offset by offset as numpy adds it); MaxPoolGradient is one compiled pass over the windows. Like ``sparse``, they run between islands as the
interpreter's kernels would, and give its answers up to the order in which an image
element's contributions are added (window by window here, kernel offset by offset in
numpy): where windows overlap, the last bits of a sum may differ.
"""
from __future__ import annotations

import functools

import numpy as np

from dslc.backends.interp.kernels_nn import bound
from dslc.ir.ops import conv_math as C

from .cache import jit


@jit(nogil=True)
def _scatter_matrix_2d(dm, n, c, h, w, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw):
    # dm: [c * kh * kw, n * oh * ow], row (ci, ky, kx), column (b, oy, ox); dx[b, ci, iy, ix]
    # gets every value whose window position reads it (iy = oy sh + ky dh - ph), kernel
    # offset by offset as numpy adds them
    dx = np.zeros((n, c, h, w), dm.dtype)
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
    return dx


@jit(nogil=True)
def _columns_2d(x, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    # [n, c * kh * kw, oh * ow]: column (ci, ky, kx) holds what each window reads there
    # (0 in the padding), written in order
    n, c, h, w = x.shape
    cols = np.zeros((n, c * kh * kw, oh * ow), x.dtype)
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
    return cols


@jit(nogil=True)
def _matrix_2d(x, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    # [c * kh * kw, n * oh * ow]: row (ci, ky, kx) holds what every window of the batch
    # reads there (0 in the padding), written in order
    n, c, h, w = x.shape
    mat = np.zeros((c * kh * kw, n * oh * ow), x.dtype)
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
    return mat


def _geometry_args(g):
    """(kh, kw, sh, sw, dh, dw, ph, pw, oh, ow) of a 2-D Geometry."""
    return (*g.kernel, *g.stride, *g.dilation, g.pads[0][0], g.pads[1][0], *g.out)


def _compiled(fallback, kernel):
    """``kernel(x, *geometry)`` for a contiguous 4-D image, else numpy's ``fallback``."""
    def run(x, g):
        if len(g.kernel) != 2 or x.ndim != 4 or not x.flags.c_contiguous or 0 in x.shape:
            return fallback(x, g)
        return kernel(x, *_geometry_args(g))
    return run


def _scatter_matrix(dm, g, x_shape):
    if len(g.kernel) != 2 or not dm.flags.c_contiguous:
        return C.scatter_matrix(dm, g, x_shape)
    kh, kw, sh, sw, dh, dw, ph, pw, oh, ow = _geometry_args(g)
    return _scatter_matrix_2d(dm, *x_shape, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw)


WINDOWS = C.Windows(_compiled(C.columns, _columns_2d), _compiled(C.matrix, _matrix_2d), _scatter_matrix)


@jit(nogil=True)
def _max_pool_grad_2d(x, y, dy, kh, kw, sh, sw, dh, dw, ph, pw):
    # every element of a window equal to the window's max gets the window's gradient
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    dx = np.zeros(x.shape, dy.dtype)
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
    return dx


def _max_pool_grad(x, y, dy, **attrs):
    if attrs.get("order", "NCHW") != "NCHW" or x.ndim != 4 or y.shape != dy.shape or \
            not all(a.flags.c_contiguous for a in (x, y, dy)) or 0 in y.shape:
        return C.max_pool_grad(x, y, dy, **attrs)
    g = C.geometry("MaxPool", x, attrs)
    if tuple(y.shape[2:]) != tuple(g.out):
        return C.max_pool_grad(x, y, dy, **attrs)  # (the interpreter's error)
    return _max_pool_grad_2d(x, y, dy, *g.kernel, *g.stride, *g.dilation, g.pads[0][0],
                             g.pads[1][0]).astype(x.dtype, copy=False)


KERNELS = {
    "Conv": lambda op, cfg: bound(functools.partial(C.conv, windows=WINDOWS), op.attrs),
    "ConvGradient": lambda op, cfg: bound(functools.partial(C.conv_grad, windows=WINDOWS), op.attrs),
    "MaxPoolGradient": lambda op, cfg: bound(_max_pool_grad, op.attrs),
}
