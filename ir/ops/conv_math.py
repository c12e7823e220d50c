"""The numpy semantics of convolution and pooling (ir/ops/conv.py declares the ops):
``FUNCTIONS`` is what the interpreter runs, and backends reuse its pieces.

A convolution is a GEMM over the image's windows: ``columns`` cuts them for the forward
(one batched GEMM straight into NCHW), ``matrix`` for the gradient (two GEMMs over the
batch), ``scatter_matrix`` adds a windows' gradient back into the image. A backend may
pass its own (``Windows``). The window matrix is prod(kernel) times the image: where the
whole batch's would pass ``WINDOW_BLOCK_BYTES`` (or the tensor budget, DSLC_MAX_TENSOR_BYTES),
it is cut in blocks of images, or of one image's output rows. ConvTranspose is the
convolution's input gradient and its gradient the convolution and its weight gradient, on
the same blocks. Pooling is a few elementwise passes over strided views (no window copies).

Every window reads a frame of the input (``Geometry.pads``): the input with the pads
Caffe2's ``legacy_pad`` gives, or cut where the windows stop short of its edges.
"""
from __future__ import annotations

import copy
from typing import Callable, NamedTuple

import numpy as np

from .. import budget
from . import conv_direct as D
from .conv import Geometry, transposed_geometry

# The most bytes one block of windows takes (less where the tensor budget is smaller):
# large enough that the GEMMs stay as fast as over the whole batch's windows (measured
# by bench/conv.py), small enough that a convolution's peak memory stays near its
# inputs' and outputs'.
WINDOW_BLOCK_BYTES = 64 << 20


def _nchw(x, attrs):
    return x if attrs.get("order", "NCHW") == "NCHW" else np.moveaxis(x, -1, 1)


def _back(y, attrs):
    return y if attrs.get("order", "NCHW") == "NCHW" else np.ascontiguousarray(np.moveaxis(y, 1, -1))


def geometry(name, x, attrs, kernel=None, channels=None):
    """The windows of op ``name`` over x (NCHW). Their output, [N, ``channels`` (default
    C), *out], and for pooling (no ``channels``) the padded frame they read, take sizes
    from the op's arguments (pads, strides): both must fit the memory budget, checked
    here before anything is allocated (a convolution reads its frame block by block)."""
    g = Geometry(name, attrs, list(x.shape[2:]), kernel=kernel)
    pooled = channels is None
    accumulated = np.float64 if name in ("AveragePool", "LpPool") else x.dtype  # (their sums)
    budget.check_size(name, (x.shape[0], x.shape[1] if pooled else channels) + tuple(g.out),
                      accumulated if pooled else x.dtype)
    if pooled:
        budget.check_size(name, _frame_shape(x.shape, g), x.dtype)
    return g


# ----------------------------------------------------------------------------- frames
def _overlap(x_shape, g):
    """(x's index, the frame's index) of the part of x the frame holds, and whether the
    frame lies inside x (a view of it)."""
    src, dst, inside = [slice(None)] * 2, [slice(None)] * 2, True
    for size, (lo, hi) in zip(x_shape[2:], g.pads):
        i0 = min(max(-lo, 0), size)
        i1 = max(min(size, size + hi), i0)
        src.append(slice(i0, i1))
        dst.append(slice(i0 + lo, i1 + lo))
        inside = inside and lo <= 0 and hi <= 0
    return tuple(src), tuple(dst), inside


def _frame_shape(x_shape, g) -> tuple:
    return tuple(x_shape[:2]) + tuple(lo + s + hi for s, (lo, hi) in zip(x_shape[2:], g.pads))


def _frame(x, g, fill=0.0):
    """x in the frame its windows read: padded with ``fill``, or cut (a view) where the
    windows stop short of its edges."""
    src, dst, inside = _overlap(x.shape, g)
    if inside:
        return x[src]
    xp = np.full(_frame_shape(x.shape, g), fill, dtype=x.dtype)
    xp[dst] = x[src]
    return xp


def _unframe(dxp, g, x_shape):
    """The gradient of x from its frame's (the padding's dropped, what no window read 0)."""
    src, dst, inside = _overlap(x_shape, g)
    if all(s.start == 0 and s.stop == n for s, n in zip(src[2:], x_shape[2:])):
        return dxp[dst]  # (the frame holds all of x)
    dx = np.zeros(x_shape, dtype=dxp.dtype)
    dx[src] = dxp[dst]
    return dx


def _offsets(g):
    """For each kernel offset, the strided slice of the frame it reads at every output
    position (pooling as a few elementwise passes over strided views: no window copies)."""
    for offs in np.ndindex(*g.kernel):
        yield (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (out - 1) + 1, s) for o, d, s, out in zip(offs, g.dilation, g.stride, g.out))


# ----------------------------------------------------------------------------- windows
def _window_view(x, g):
    """x's windows [N, C, *out, *kernel] (a strided view of its frame)."""
    from numpy.lib.stride_tricks import sliding_window_view
    nd = len(g.kernel)
    xp = _frame(x, g)
    spans = [d * (k - 1) + 1 for k, d in zip(g.kernel, g.dilation)]
    win = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    return win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in g.stride)
               + tuple(slice(None, None, d) for d in g.dilation)]


def columns(x, g):
    """x's windows as columns [N, C * prod(kernel), prod(out)] (one copy: what a GEMM with
    the [M, C * prod(kernel)] weight multiplies)."""
    win = _window_view(x, g)
    nd = len(g.kernel)
    n, c = win.shape[:2]
    axes = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    cols = np.ascontiguousarray(win.transpose(axes))
    # (sizes spelled out: an empty batch has no -1 to infer)
    return cols.reshape(n, c * int(np.prod(g.kernel)), int(np.prod(g.out)))


def matrix(x, g):
    """x's windows as one matrix [C * prod(kernel), N * prod(out)]: row (c, *offset) holds
    what every window of the batch reads there (one copy: what the gradient's GEMMs read)."""
    win = _window_view(x, g)
    nd = len(g.kernel)
    n, c = win.shape[:2]
    axes = (1,) + tuple(range(2 + nd, 2 + 2 * nd)) + (0,) + tuple(range(2, 2 + nd))
    m = np.ascontiguousarray(win.transpose(axes))
    return m.reshape(c * int(np.prod(g.kernel)), n * int(np.prod(g.out)))


def scatter_matrix(dm, g, x_shape):
    """The gradient of x from the gradient of its window matrix (``matrix``'s layout):
    each kernel offset's values added into the frame at the positions it read (offsets in
    order), then the frame's gradient taken back to x."""
    n, c = x_shape[:2]
    # (added channel-major, as the matrix holds them: [C, N, *frame] is dx's transpose)
    dxp = np.zeros((c, n) + _frame_shape(x_shape, g)[2:], dtype=dm.dtype)
    dr = dm.reshape((c,) + tuple(g.kernel) + (n,) + tuple(g.out))
    for offs, at in zip(np.ndindex(*g.kernel), _offsets(g)):
        dxp[at] += dr[(slice(None),) + tuple(offs)]
    return np.ascontiguousarray(_unframe(dxp.swapaxes(0, 1), g, x_shape))


class Windows(NamedTuple):
    """How Conv and its gradient cut an image [N, C, *spatial] into windows (``g``: a
    Geometry): ``columns(x, g)`` [N, C * prod(kernel), prod(out)] for per-image GEMMs,
    ``matrix(x, g)`` [C * prod(kernel), N * prod(out)] for GEMMs over the batch, and
    ``scatter(dmatrix, g, x_shape)`` adding a matrix gradient back into the image; and,
    where a backend has them, direct loops for the depthwise convolution, which needs no
    windows (as conv_direct's ``depthwise(x, w, g)`` and ``depthwise_grad(x, w, dy, g,
    x_shape, want_dw, want_dx)``). Backends may give compiled ones. Without them, a
    depthwise convolution with unit strides runs conv_direct's ``depthwise_frame`` (a pass
    per kernel offset over blocks of padded planes), a strided one the windows' GEMMs
    (conv_direct's offset-by-offset passes measured 1.3-1.9x slower than them, 16 x 96 x
    56 x 56, 3x3: 84 against 58 ms; short rows cost a loop each)."""

    columns: Callable
    matrix: Callable
    scatter: Callable
    depthwise: Callable | None = None
    depthwise_grad: Callable | None = None


NUMPY_WINDOWS = Windows(columns, matrix, scatter_matrix)

# Below this many output positions per image, the forward GEMM runs once over the whole
# block's images (window matrix [C k, N P]) instead of once per image: a narrow GEMM
# re-reads the weight for every image (bench/conv.py, bench/inference.py).
BATCHED_GEMM_POSITIONS = 1024


# ----------------------------------------------------------------------------- blocks
def window_block_bytes() -> int:
    """The most bytes one block of windows takes: ``WINDOW_BLOCK_BYTES``, or the tensor
    budget (ir/budget.py: DSLC_MAX_TENSOR_BYTES) where that is smaller."""
    return min(WINDOW_BLOCK_BYTES, budget.limit()[0])


def _blocks(x_shape, g, itemsize):
    """(images, output rows, geometry, x's rows) of each block: whole images while their
    windows fit a block, else one image's output rows (the first spatial dim) a few at a
    time, each block's geometry over just the input rows its windows read."""
    n, c = x_shape[:2]
    if n == 0 or 0 in g.out or 0 in x_shape:
        return
    per_row = c * int(np.prod(g.kernel)) * int(np.prod(g.out[1:])) * itemsize  # (one output row's windows)
    rows = g.out[0] if g.out else 1
    cap = window_block_bytes()
    whole = slice(None)
    if per_row * rows <= cap or not g.out:
        step = max(1, cap // max(per_row * rows, 1))
        for b0 in range(0, n, step):
            yield slice(b0, min(n, b0 + step)), whole, g, whole
        return
    budget.check_bytes(g.name, per_row, "one output row of windows")  # (the least a block holds)
    step = max(1, cap // per_row)
    for b in range(n):
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            a, b_, sub = _row_block(g, r0, r1, x_shape[2])
            yield slice(b, b + 1), slice(r0, r1), sub, slice(a, b_)


def _row_block(g, r0, r1, size):
    """(a, b, geometry): the input rows [a, b) that output rows [r0, r1) read, and those
    rows' geometry over x[a:b]."""
    lo = g.pads[0][0]
    first = r0 * g.stride[0] - lo                        # (the input row the first window starts at)
    last = (r1 - 1) * g.stride[0] + g.span(0) - lo       # (one past the last one's end)
    a = min(max(first, 0), size)
    b = max(min(last, size), a)
    sub = copy.copy(g)
    sub.out = [r1 - r0] + list(g.out[1:])
    sub.pads = [(a - first, last - b)] + list(g.pads[1:])
    return a, b, sub


def _contiguous(x, images, rows):
    part = x[images] if rows == slice(None) else x[images, :, rows]
    return np.ascontiguousarray(part)


def _forward(x, w, g, group, windows):
    """Y [N, M, *out] = the convolution of x with w (no bias), block by block."""
    n, c = x.shape[:2]
    m = w.shape[0]
    wg = w.reshape(group, m // group, -1)  # [G, M / G, C / G * prod(kernel)]
    out = (n, m) + tuple(g.out)
    per_image = int(np.prod(g.out))
    y = None
    if n * per_image == 0:
        return np.zeros(out, dtype=np.result_type(x, w))
    if D.is_depthwise(w.shape, group, c):
        if windows.depthwise:
            return windows.depthwise(x, w, g)
        if len(g.kernel) == 2 and all(s == 1 for s in g.stride):
            return D.depthwise_frame(x, w, g)
    if D.is_pointwise(g):
        return D.pointwise(x, w, g, group)
    for images, rows, sub, xrows in _blocks(x.shape, g, x.dtype.itemsize):
        xb = _contiguous(x, images, xrows)
        nb, p = xb.shape[0], int(np.prod(sub.out))
        if nb > 1 and p < BATCHED_GEMM_POSITIONS:  # (one GEMM over the block's images)
            mat = windows.matrix(xb, sub)  # [C * prod(kernel), nb * P]
            yb = np.matmul(wg, mat.reshape(group, -1, nb * p)).reshape(m, nb, p).swapaxes(0, 1)
            yb = np.ascontiguousarray(yb).reshape((nb, m) + tuple(sub.out))
        else:
            cols = windows.columns(xb, sub)  # [nb, C * prod(kernel), P]
            yb = np.matmul(wg, cols.reshape(nb, group, -1, p)).reshape((nb, m) + tuple(sub.out))
        if y is None and nb * p == n * per_image:
            return yb  # (one block: the whole batch)
        if y is None:
            y = np.empty(out, dtype=yb.dtype)
        y[images, :, rows] = yb
    return np.zeros(out, dtype=np.result_type(x, w)) if y is None else y


def _backward(x, w, dy, g, group, windows, x_shape, want_dw=True, want_dx=True):
    """(dW, dX) of the convolution of x (of ``x_shape``; None where only dX is wanted)
    with w, from dY, block by block: dW = dY' M^T and dM = W'^T dY', dX from dM (M: the
    block's window matrix; dY' is dY as [M, N * prod(out)], W' is W as [M, C * prod(kernel)])."""
    m = w.shape[0]
    wg = w.reshape(group, m // group, -1)
    dw = dx = None
    if 0 in dy.shape or 0 in x_shape:
        dy = dy[:0]  # (no windows: dW and dX are 0)
    elif windows.depthwise_grad and D.is_depthwise(w.shape, group, x_shape[1]):
        return windows.depthwise_grad(x, w, dy, g, x_shape, want_dw, want_dx)
    elif D.is_pointwise(g):
        return D.pointwise_grad(x, w, dy, g, group, x_shape, want_dw, want_dx)
    for images, rows, sub, xrows in _blocks(x_shape, g, dy.dtype.itemsize):
        dyb = dy[images] if rows == slice(None) else dy[images, :, rows]
        nb = dyb.shape[0]
        dyt = np.ascontiguousarray(dyb.reshape(nb, group, m // group, -1).transpose(1, 2, 0, 3)).reshape(
            group, m // group, -1)  # [G, M / G, nb * P]
        if want_dw:
            mat = windows.matrix(_contiguous(x, images, xrows), sub)
            part = np.matmul(dyt, mat.reshape(group, -1, mat.shape[1]).transpose(0, 2, 1))
            dw = part if dw is None else dw + part
        if want_dx:
            dm = np.matmul(wg.transpose(0, 2, 1), dyt).reshape(-1, dyt.shape[2])
            xb_shape = (nb, x_shape[1]) + ((x_shape[2],) if xrows == slice(None) else
                                            (xrows.stop - xrows.start,)) + tuple(x_shape[3:])
            dxb = windows.scatter(dm, sub, xb_shape)
            if dx is None and xb_shape == tuple(x_shape):
                dx = dxb  # (one block: the whole batch)
                continue
            if dx is None:
                dx = np.zeros(x_shape, dtype=dxb.dtype)
            dx[images, :, xrows] += dxb
    if want_dw and dw is None:
        dw = np.zeros(wg.shape, dtype=np.result_type(w, dy))
    if want_dx and dx is None:
        dx = np.zeros(x_shape, dtype=np.result_type(w, dy))
    return (None if dw is None else dw.reshape(w.shape)), dx


def _bias_shape(b, nd):
    return b.reshape((1, -1) + (1,) * nd)


# ----------------------------------------------------------------------------- the ops
def conv(x, w, *b, windows=None, op_name="Conv", **attrs):
    """``windows``: how the image is cut into windows (default ``NUMPY_WINDOWS``);
    ``op_name``: the op errors name (ConvFused runs this too)."""
    x, w = _nchw(x, attrs), _nchw(w, attrs)
    g = geometry(op_name, x, attrs, kernel=list(w.shape[2:]), channels=w.shape[0])
    y = _forward(x, w, g, int(attrs.get("group", 1)), windows or NUMPY_WINDOWS)
    if b:
        y += _bias_shape(b[0], len(g.kernel))
    return _back(y.astype(x.dtype, copy=False), attrs)


def conv_grad(x, w, dy, no_bias=0, windows=None, with_dx=True, **attrs):
    """(dW, db, dX), (dW, dX) with ``no_bias``; without ``with_dx`` (ConvGradient's dX not
    named, or dropped by dce) the same less dX, and not computed: dW alone is one array.
    ``windows``: as ``conv``'s."""
    x, w, dy = _nchw(x, attrs), _nchw(w, attrs), _nchw(dy, attrs)
    g = geometry("Conv", x, attrs, kernel=list(w.shape[2:]), channels=w.shape[0])
    dw, dx = _backward(x, w, dy, g, int(attrs.get("group", 1)), windows or NUMPY_WINDOWS, x.shape, want_dx=with_dx)
    out = [_back(dw.astype(w.dtype, copy=False), attrs)]
    if not no_bias:
        out.append(dy.sum(axis=(0,) + tuple(range(2, dy.ndim))).astype(dy.dtype))
    if with_dx:
        out.append(_back(dx.astype(x.dtype, copy=False), attrs))
    return tuple(out) if len(out) > 1 else out[0]


def _transposed(x, w, attrs):
    """(geometry, group, Y's shape) of ConvTranspose(x, w): the convolution whose input
    gradient it is reads Y and writes X's shape; W has that convolution's layout."""
    g = transposed_geometry(attrs, list(w.shape[2:]), list(x.shape[2:]))
    group = int(attrs.get("group", 1))
    y_shape = (x.shape[0], w.shape[1] * group) + tuple(g.out_t)
    budget.check_size("ConvTranspose", y_shape, x.dtype)  # (its strides and adj make it: checked first)
    return g, group, y_shape


def conv_transpose(x, w, *b, windows=None, **attrs):
    g, group, y_shape = _transposed(x, w, attrs)
    _, y = _backward(None, w, x, g, group, windows or NUMPY_WINDOWS, y_shape, want_dw=False)
    if b:
        y = y + _bias_shape(b[0], len(g.kernel))
    return y.astype(x.dtype, copy=False)


def conv_transpose_grad(x, w, dy, no_bias=0, windows=None, **attrs):
    """dX: the convolution of dY with W; dW: that convolution's weight gradient with X as
    its output's gradient."""
    windows = windows or NUMPY_WINDOWS
    g, group, _ = _transposed(x, w, attrs)
    dx = _forward(dy, w, g, group, windows).astype(x.dtype, copy=False)
    dw, _ = _backward(dy, w, x, g, group, windows, dy.shape, want_dx=False)
    dw = dw.astype(w.dtype, copy=False)
    if no_bias:
        return dw, dx
    return dw, dy.sum(axis=(0, 2, 3)).astype(dy.dtype), dx


# ----------------------------------------------------------------------------- pooling
def max_pool(x, **attrs):
    x = _nchw(x, attrs)
    g = geometry("MaxPool", x, attrs)
    if 0 in x.shape or 0 in g.out:
        return _back(np.zeros(x.shape[:2] + tuple(g.out), x.dtype), attrs)
    xp = _frame(x, g, -np.inf)
    y = None
    for at in _offsets(g):
        y = np.array(xp[at]) if y is None else np.maximum(y, xp[at], out=y)
    return _back(y.astype(x.dtype, copy=False), attrs)


def _counts(x_shape, g, include_pad):
    """How many elements of each window Caffe2 divides by: the whole kernel with
    ``count_include_pad`` (even where a window runs past the pads), else those inside x;
    as an array that broadcasts over the windows [*out]."""
    if include_pad:
        return np.float64(np.prod(g.kernel))
    total = np.ones((), np.float64)
    for k, (size, (lo, _)) in enumerate(zip(x_shape[2:], g.pads)):
        inside = np.arange(lo + size + g.pads[k][1]) - lo  # (each frame position's index in x)
        inside = (inside >= 0) & (inside < size)
        per = np.zeros(g.out[k])
        for o in range(g.kernel[k]):
            per += inside[o * g.dilation[k]: o * g.dilation[k] + g.stride[k] * (g.out[k] - 1) + 1: g.stride[k]]
        total = np.multiply.outer(total, per)
    return total


def average_pool(x, **attrs):
    x = _nchw(x, attrs)
    g = geometry("AveragePool", x, attrs)
    total = np.zeros(x.shape[:2] + tuple(g.out), np.float64)
    if 0 not in total.shape:
        xp = _frame(x, g, 0.0)
        for at in _offsets(g):
            total += xp[at]
    with np.errstate(invalid="ignore", divide="ignore"):
        return _back((total / _counts(x.shape, g, attrs.get("count_include_pad"))).astype(x.dtype), attrs)


def max_pool_grad(x, y, dy, **attrs):
    """Every element equal to its window's max gets the window's gradient (as Caffe2's)."""
    x, y, dy = _nchw(x, attrs), _nchw(y, attrs), _nchw(dy, attrs)
    g = geometry("MaxPool", x, attrs)
    if 0 in y.shape:
        return _back(np.zeros(x.shape, x.dtype), attrs)
    xp = _frame(x, g, -np.inf)
    dxp = np.zeros(xp.shape, dtype=dy.dtype)
    for at in _offsets(g):
        dxp[at] += np.where(xp[at] == y, dy, 0)
    return _back(_unframe(dxp, g, x.shape).astype(x.dtype), attrs)


def average_pool_grad(x, y, dy, **attrs):
    x, dy = _nchw(x, attrs), _nchw(dy, attrs)
    g = geometry("AveragePool", x, attrs)
    if 0 in dy.shape:
        return _back(np.zeros(x.shape, x.dtype), attrs)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = dy / _counts(x.shape, g, attrs.get("count_include_pad"))
    dxp = np.zeros(_frame_shape(x.shape, g), dtype=share.dtype)
    for at in _offsets(g):
        dxp[at] += share
    return _back(_unframe(dxp, g, x.shape).astype(x.dtype), attrs)


def lp_pool(x, p=2.0, **attrs):
    x = _nchw(x, attrs)
    g = geometry("LpPool", x, attrs)
    total = np.zeros(x.shape[:2] + tuple(g.out), np.float64)
    if 0 not in total.shape:
        xp = np.abs(_frame(x.astype(np.float64), g))
        for at in _offsets(g):
            total += xp[at] ** p
    return _back((total ** (1.0 / p)).astype(x.dtype), attrs)


def lp_pool_grad(x, y, dy, p=2.0, **attrs):
    x, y, dy = _nchw(x, attrs), _nchw(y, attrs), _nchw(dy, attrs)
    g = geometry("LpPool", x, attrs)
    if 0 in y.shape:
        return _back(np.zeros(x.shape, x.dtype), attrs)
    xp = _frame(x.astype(np.float64), g)
    ys, dys = y.astype(np.float64), dy.astype(np.float64)
    dxp = np.zeros(xp.shape)
    with np.errstate(divide="ignore", invalid="ignore"):  # (a zero element or window: no gradient there)
        scale = np.where(ys != 0, dys / ys ** (p - 1), 0.0)
        for at in _offsets(g):
            v = xp[at]
            dxp[at] += np.where(v != 0, v * np.abs(v) ** (p - 2), 0.0) * scale
    return _back(_unframe(dxp, g, x.shape).astype(x.dtype), attrs)


FUNCTIONS = {"Conv": conv, "ConvGradient": conv_grad, "ConvTranspose": conv_transpose,
             "ConvTransposeGradient": conv_transpose_grad, "MaxPool": max_pool, "AveragePool": average_pool,
             "MaxPoolGradient": max_pool_grad, "AveragePoolGradient": average_pool_grad, "LpPool": lp_pool,
             "LpPoolGradient": lp_pool_grad}
