"""The numpy semantics of convolution and pooling (ir/ops/conv.py declares the ops):
``FUNCTIONS`` is what the interpreter runs, and backends reuse its pieces.

A convolution is a GEMM over the image's windows: ``columns`` cuts them for the forward
(one batched GEMM straight into NCHW), ``matrix`` for the gradient (two GEMMs over the
whole batch), ``scatter_matrix`` adds a windows' gradient back into the image. A backend
may pass its own (``Windows``); pooling is a few elementwise passes over strided views.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .conv import Geometry, transposed_geometry


def _nchw(x, attrs):
    return x if attrs.get("order", "NCHW") == "NCHW" else np.moveaxis(x, -1, 1)


def _back(y, attrs):
    return y if attrs.get("order", "NCHW") == "NCHW" else np.ascontiguousarray(np.moveaxis(y, 1, -1))


def _windows(x, g, fill=0.0):
    """(padded x, its windows [N, C, *out, *kernel]) at the strides and dilations of ``g``."""
    nd = len(g.kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(g.pads), constant_values=fill)
    spans = [d * (k - 1) + 1 for k, d in zip(g.kernel, g.dilation)]
    win = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None)) + tuple(slice(0, s * (o - 1) + 1, s) for s, o in zip(g.stride, g.out)) \
        + tuple(slice(None, None, d) for d in g.dilation)
    return xp, win[index]


def geometry(name, x, attrs, kernel=None):
    return Geometry(name, attrs, list(x.shape[2:]), kernel=kernel)


def conv(x, w, *b, windows=None, **attrs):
    """``windows``: how the image is cut into windows (default ``NUMPY_WINDOWS``)."""
    windows = windows or NUMPY_WINDOWS
    x, w = _nchw(x, attrs), _nchw(w, attrs)
    g = geometry("Conv", x, attrs, kernel=list(w.shape[2:]))
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    m = w.shape[0]
    nd = len(g.kernel)
    if group == 1:  # (the usual case: one batched GEMM over the columns, straight into NCHW)
        y = np.matmul(w.reshape(m, -1), windows.columns(x, g)).reshape((n, m) + tuple(g.out))
        if b:
            y += b[0].reshape((1, m) + (1,) * nd)
        return _back(y.astype(x.dtype, copy=False), attrs)
    _, win = _windows(x, g)
    win = win.reshape((n, group, c // group) + win.shape[2:])
    wg = w.reshape((group, m // group, c // group) + w.shape[2:])
    sp = "xyz"[:nd]
    ks = "ijk"[:nd]
    y = np.einsum(f"ngc{sp}{ks},gmc{ks}->ngm{sp}", win, wg, optimize=True).reshape((n, m) + tuple(g.out))
    if b:
        y = y + b[0].reshape((1, m) + (1,) * nd)
    return _back(y.astype(x.dtype, copy=False), attrs)


def columns(x, g):
    """x's windows as columns [N, C * prod(kernel), prod(out)] (one copy: what a GEMM with
    the [M, C * prod(kernel)] weight multiplies)."""
    _, win = _windows(x, g)
    nd = len(g.kernel)
    n, c = win.shape[:2]
    axes = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    cols = np.ascontiguousarray(win.transpose(axes))
    # (sizes spelled out: an empty batch has no -1 to infer)
    return cols.reshape(n, c * int(np.prod(win.shape[2 + nd:])), int(np.prod(win.shape[2:2 + nd])))


def _scatter_windows(dwin, g, x_shape):
    """The gradient of the padded input from the gradient of its windows, cropped to x."""
    dxp = np.zeros(x_shape[:2] + _padded_shape(x_shape, g), dtype=dwin.dtype)
    for offs, at in zip(np.ndindex(*g.kernel), _offsets(g)):
        dxp[at] += dwin[(Ellipsis,) + tuple(offs)]
    return dxp[_crop(x_shape, g)]


def _padded_shape(x_shape, g) -> tuple:
    """The spatial dims of x padded."""
    return tuple(s + p0 + p1 for s, (p0, p1) in zip(x_shape[2:], g.pads))


def _crop(x_shape, g) -> tuple:
    """The index of x in its padded form."""
    return (slice(None), slice(None)) + tuple(slice(p0, p0 + s) for s, (p0, _) in zip(x_shape[2:], g.pads))


def matrix(x, g):
    """x's windows as one matrix [C * prod(kernel), N * prod(out)]: row (c, *offset) holds
    what every window of the batch reads there (one copy: what the gradient's GEMMs read)."""
    _, win = _windows(x, g)
    nd = len(g.kernel)
    n, c = win.shape[:2]
    axes = (1,) + tuple(range(2 + nd, 2 + 2 * nd)) + (0,) + tuple(range(2, 2 + nd))
    m = np.ascontiguousarray(win.transpose(axes))
    return m.reshape(c * int(np.prod(win.shape[2 + nd:])), n * int(np.prod(win.shape[2:2 + nd])))


def scatter_matrix(dm, g, x_shape):
    """The gradient of x from the gradient of its window matrix (``matrix``'s layout):
    each kernel offset's values added into the padded input at the positions it read
    (offsets in order), then cropped."""
    n, c = x_shape[:2]
    # (added channel-major, as the matrix holds them: [C, N, *padded] is dx's transpose)
    dxp = np.zeros((c, n) + _padded_shape(x_shape, g), dtype=dm.dtype)
    dr = dm.reshape((c,) + tuple(g.kernel) + (n,) + tuple(g.out))
    for offs, at in zip(np.ndindex(*g.kernel), _offsets(g)):
        dxp[at] += dr[(slice(None),) + tuple(offs)]
    return np.ascontiguousarray(dxp[_crop(x_shape, g)].swapaxes(0, 1))


class Windows(NamedTuple):
    """How Conv and its gradient cut an image [N, C, *spatial] into windows (``g``: a
    Geometry): ``columns(x, g)`` [N, C * prod(kernel), prod(out)] for the forward's batched
    GEMM, ``matrix(x, g)`` [C * prod(kernel), N * prod(out)] for the gradient's two GEMMs,
    and ``scatter(dmatrix, g, x_shape)`` adding a matrix gradient back into the image.
    Backends may give compiled ones."""

    columns: Callable
    matrix: Callable
    scatter: Callable


NUMPY_WINDOWS = Windows(columns, matrix, scatter_matrix)


def conv_grad(x, w, dy, no_bias=0, windows=None, **attrs):
    """``windows``: as ``conv``'s."""
    windows = windows or NUMPY_WINDOWS
    x, w, dy = _nchw(x, attrs), _nchw(w, attrs), _nchw(dy, attrs)
    g = geometry("Conv", x, attrs, kernel=list(w.shape[2:]))
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    m = w.shape[0]
    nd = len(g.kernel)
    sp, ks = "xyz"[:nd], "ijk"[:nd]
    if group == 1:
        # one GEMM each over every window of the batch: dW = dY' M^T, dM = W'^T dY' (M: the
        # window matrix; dY' is dY as [M, N * prod(out)], W' is W as [M, C * prod(kernel)])
        mat = windows.matrix(x, g)
        dyt = np.ascontiguousarray(dy.reshape(n, m, mat.shape[1] // max(n, 1)).transpose(1, 0, 2)).reshape(m, mat.shape[1])
        dw = np.dot(dyt, mat.T).reshape(w.shape).astype(w.dtype)
        dx = windows.scatter(np.dot(w.reshape(m, -1).T, dyt), g, x.shape).astype(x.dtype)
        dw, dx = _back(dw, attrs), _back(dx, attrs)
        if no_bias:
            return dw, dx
        return dw, dy.sum(axis=(0,) + tuple(range(2, 2 + nd))).astype(dy.dtype), dx
    _, win = _windows(x, g)
    win = win.reshape((n, group, c // group) + win.shape[2:])
    dyg = dy.reshape((n, group, m // group) + dy.shape[2:])
    wg = w.reshape((group, m // group, c // group) + w.shape[2:])
    dw = np.einsum(f"ngc{sp}{ks},ngm{sp}->gmc{ks}", win, dyg, optimize=True).reshape(w.shape).astype(w.dtype)
    dwin = np.einsum(f"ngm{sp},gmc{ks}->ngc{sp}{ks}", dyg, wg, optimize=True)
    dwin = dwin.reshape((n, c) + dwin.shape[3:])
    dx = _scatter_windows(dwin, g, x.shape).astype(x.dtype)
    dw, dx = _back(dw, attrs), _back(dx, attrs)
    if no_bias:
        return dw, dx
    return dw, dy.sum(axis=(0,) + tuple(range(2, 2 + nd))).astype(dy.dtype), dx


def _offsets(g):
    """For each kernel offset, the strided slice of the padded input it reads at every
    output position (pooling as a few elementwise passes over strided views: no window copies)."""
    for offs in np.ndindex(*g.kernel):
        yield (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (out - 1) + 1, s) for o, d, s, out in zip(offs, g.dilation, g.stride, g.out))


def _padded(x, g, fill):
    return np.pad(x, [(0, 0), (0, 0)] + list(g.pads), constant_values=fill) if any(
        p0 or p1 for p0, p1 in g.pads) else x


def max_pool(x, **attrs):
    x = _nchw(x, attrs)
    g = geometry("MaxPool", x, attrs)
    xp = _padded(x, g, -np.inf)
    if 0 in x.shape or 0 in g.out:
        return _back(np.zeros(x.shape[:2] + tuple(g.out), x.dtype), attrs)
    y = None
    for at in _offsets(g):
        y = np.array(xp[at]) if y is None else np.maximum(y, xp[at], out=y)
    return _back(y.astype(x.dtype, copy=False), attrs)


def _counts(x, g, attrs):
    """How many window elements fall inside x (all of them with count_include_pad)."""
    if attrs.get("count_include_pad"):
        return np.float64(np.prod(g.kernel))
    _, ones = _windows(np.ones((1, 1) + x.shape[2:]), g)
    return ones.sum(axis=tuple(range(-len(g.kernel), 0)))


def average_pool(x, **attrs):
    x = _nchw(x, attrs)
    g = geometry("AveragePool", x, attrs)
    xp = _padded(x, g, 0.0)
    total = np.zeros(x.shape[:2] + tuple(g.out), np.float64)
    if 0 not in total.shape:
        for at in _offsets(g):
            total += xp[at]
    return _back((total / _counts(x, g, attrs)).astype(x.dtype), attrs)


def max_pool_grad(x, y, dy, **attrs):
    """Every element equal to its window's max gets the window's gradient (as Caffe2's)."""
    x, y, dy = _nchw(x, attrs), _nchw(y, attrs), _nchw(dy, attrs)
    g = geometry("MaxPool", x, attrs)
    xp = _padded(x, g, -np.inf)
    dxp = np.zeros(xp.shape, dtype=dy.dtype)
    if 0 not in y.shape:
        for at in _offsets(g):
            dxp[at] += np.where(xp[at] == y, dy, 0)
    return _back(dxp[_crop(x.shape, g)].astype(x.dtype), attrs)


def average_pool_grad(x, y, dy, **attrs):
    x, dy = _nchw(x, attrs), _nchw(dy, attrs)
    g = geometry("AveragePool", x, attrs)
    nd = len(g.kernel)
    share = dy / _counts(x, g, attrs)
    dwin = np.broadcast_to(share[(Ellipsis,) + (None,) * nd], share.shape + tuple(g.kernel))
    return _back(_scatter_windows(np.ascontiguousarray(dwin), g, x.shape).astype(x.dtype), attrs)


def _output_geometry(x, w, attrs):
    """The geometry of the convolution whose input gradient ConvTranspose computes: its
    input is ConvTranspose's output."""
    g = transposed_geometry(attrs, list(w.shape[2:]), x.shape[2:])
    g.out = list(x.shape[2:])  # (the windows of the output line up with X's pixels)
    return g


def conv_transpose(x, w, *b, **attrs):
    g = _output_geometry(x, w, attrs)
    dwin = np.einsum("ncxy,cmij->nmxyij", x, w, optimize=True)
    y = _scatter_windows(dwin, g, (x.shape[0], w.shape[1]) + tuple(g.out_t))
    if b:
        y = y + b[0].reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def conv_transpose_grad(x, w, dy, no_bias=0, **attrs):
    g = _output_geometry(x, w, attrs)
    _, win = _windows(dy, g)  # [N, M, H, W, kh, kw]: the output pixels each input pixel wrote
    dx = np.einsum("nmxyij,cmij->ncxy", win, w, optimize=True).astype(x.dtype)
    dw = np.einsum("ncxy,nmxyij->cmij", x, win, optimize=True).astype(w.dtype)
    if no_bias:
        return dw, dx
    return dw, dy.sum(axis=(0, 2, 3)).astype(dy.dtype), dx


def lp_pool(x, p=2.0, **attrs):
    x = _nchw(x, attrs)
    g = geometry("LpPool", x, attrs)
    _, win = _windows(x, g)
    total = (np.abs(win.astype(np.float64)) ** p).sum(axis=tuple(range(-len(g.kernel), 0)))
    return _back((total ** (1.0 / p)).astype(x.dtype), attrs)


def lp_pool_grad(x, y, dy, p=2.0, **attrs):
    x, y, dy = _nchw(x, attrs), _nchw(y, attrs), _nchw(dy, attrs)
    g = geometry("LpPool", x, attrs)
    nd = len(g.kernel)
    _, win = _windows(x.astype(np.float64), g)
    ys = y.astype(np.float64)[(Ellipsis,) + (None,) * nd]
    with np.errstate(divide="ignore", invalid="ignore"):  # (a zero element or window: no gradient there)
        slope = np.where((win != 0) & (ys != 0), win * np.abs(win) ** (p - 2) / ys ** (p - 1), 0.0)
    dwin = slope * dy.astype(np.float64)[(Ellipsis,) + (None,) * nd]
    return _back(_scatter_windows(np.ascontiguousarray(dwin), g, x.shape).astype(x.dtype), attrs)


FUNCTIONS = {"LpPool": lp_pool, "LpPoolGradient": lp_pool_grad, "ConvTranspose": conv_transpose, "ConvTransposeGradient": conv_transpose_grad, "Conv": conv, "ConvGradient": conv_grad, "MaxPool": max_pool, "AveragePool": average_pool,
             "MaxPoolGradient": max_pool_grad, "AveragePoolGradient": average_pool_grad}
