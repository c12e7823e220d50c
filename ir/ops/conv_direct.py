"""Convolutions done without a window matrix (conv_math cuts windows for the rest):

- **pointwise** (a 1x1 kernel over the whole image, any stride, no padding): the image
  already is the GEMM's right-hand side, [C, H W] per image: Y = W X, dW = sum dY X^T,
  dX = W^T dY, with no copy of X (a stride takes every s-th row and column first);
- **depthwise** (one input channel per group, one output channel per group: MobileNet's
  3x3s): Y[c] = sum over kernel offsets of W[c, offset] times X[c] shifted by the offset,
  each offset one pass over the output positions whose input lies inside the image (the
  padding is never materialized); dX and dW the same passes read the other way.

``offsets(g, shape)`` gives each kernel offset's output and input slices, clipped to the
image. conv_math runs ``pointwise`` on every backend; the depthwise passes here are the
contract (and the fallback) of a backend's compiled loops (conv_math.Windows). In numpy
they lose to the windows' GEMMs (a pass per row of short rows); ``depthwise_frame``, the
interpreter's for unit strides, makes each offset one long pass over blocks of padded
planes instead (1.2-2.4x faster than the GEMMs on MobileNet's layers; with strides the
GEMMs stay faster).
"""
from __future__ import annotations

import numpy as np


def offsets(g, spatial):
    """For each kernel offset (in ``np.ndindex`` order): (offset, the output positions'
    slices, the input positions' slices they read), both clipped to the outputs whose
    input lies inside an image of ``spatial`` size (the frame's pads: ``g.pads``)."""
    per_dim = []
    for k, size in enumerate(spatial):
        s, d, lo, out = g.stride[k], g.dilation[k], g.pads[k][0], g.out[k]
        cuts = []
        for o in range(g.kernel[k]):
            start = o * d - lo  # (the input index output 0 reads)
            o0 = min(max(0, -(start // s) if start < 0 else 0), out)
            o1 = min(max(o0, -((start - size) // s)), out)  # (first output at or past the end: ceil((size - start) / s))
            i0 = start + o0 * s
            cuts.append((slice(o0, o1), slice(i0, i0 + (o1 - o0 - 1) * s + 1 if o1 > o0 else i0, s)))
        per_dim.append(cuts)
    for offs in np.ndindex(*g.kernel):
        yield offs, tuple(per_dim[k][o][0] for k, o in enumerate(offs)), tuple(per_dim[k][o][1]
                                                                              for k, o in enumerate(offs))


# ----------------------------------------------------------------------------- pointwise
def is_pointwise(g) -> bool:
    """A 1x1 kernel whose windows start at the image's origin and never pad."""
    return all(k == 1 for k in g.kernel) and all(lo == 0 and hi <= 0 for lo, hi in g.pads)


def _sampled(x, g):
    """The image positions a pointwise convolution reads ([N, C, *out], contiguous)."""
    if all(s == 1 for s in g.stride) and tuple(x.shape[2:]) == tuple(g.out):
        return np.ascontiguousarray(x)
    at = (slice(None),) * 2 + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(g.out, g.stride))
    return np.ascontiguousarray(x[at])


def pointwise(x, w, g, group):
    """Y [N, M, *out]: one GEMM per image and group, straight on the image's memory."""
    n, c = x.shape[:2]
    m = w.shape[0]
    xs = _sampled(x, g).reshape(n, group, c // group, -1)
    return np.matmul(w.reshape(group, m // group, c // group), xs).reshape((n, m) + tuple(g.out))


def pointwise_grad(x, w, dy, g, group, x_shape, want_dw=True, want_dx=True):
    """(dW, dX) of ``pointwise`` (None where not wanted)."""
    n, c = x_shape[:2]
    m = w.shape[0]
    dyg = dy.reshape(n, group, m // group, -1)
    dw = dx = None
    if want_dw:
        xs = _sampled(x, g).reshape(n, group, c // group, -1)
        dw = np.matmul(dyg, xs.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape) if n else np.zeros(w.shape, dy.dtype)
    if want_dx:
        dxs = np.matmul(w.reshape(group, m // group, c // group).transpose(0, 2, 1), dyg)
        dxs = dxs.reshape((n, c) + tuple(g.out))
        if tuple(dxs.shape) == tuple(x_shape):
            dx = dxs
        else:
            dx = np.zeros(x_shape, dxs.dtype)
            dx[(slice(None),) * 2 + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(g.out, g.stride))] = dxs
    return dw, dx


# ----------------------------------------------------------------------------- depthwise
def is_depthwise(w_shape, group, channels) -> bool:
    """One input and one output channel per group."""
    return group > 1 and group == channels == w_shape[0] and w_shape[1] == 1


def _per_channel(w, offs, nd):
    return w[(slice(None), 0) + tuple(offs)].reshape((1, -1) + (1,) * nd)


def depthwise(x, w, g):
    """Y [N, C, *out] of a depthwise convolution: one pass per kernel offset."""
    nd = len(g.kernel)
    y = np.zeros(x.shape[:2] + tuple(g.out), np.result_type(x, w))
    both = (slice(None),) * 2
    for offs, o_sl, i_sl in offsets(g, x.shape[2:]):
        if all(s.stop > s.start for s in o_sl):
            y[both + o_sl] += x[both + i_sl] * _per_channel(w, offs, nd)
    return y


def depthwise_grad(x, w, dy, g, x_shape, want_dw=True, want_dx=True):
    """(dW, dX) of ``depthwise`` (None where not wanted): dX gets each offset's dY times
    its weight at the positions it read; dW[c, offset] sums dY times what it read."""
    nd = len(g.kernel)
    both = (slice(None),) * 2
    dw = np.zeros(w.shape, np.result_type(w, dy)) if want_dw else None
    dx = np.zeros(x_shape, np.result_type(w, dy)) if want_dx else None
    for offs, o_sl, i_sl in offsets(g, x_shape[2:]):
        if not all(s.stop > s.start for s in o_sl):
            continue
        d = dy[both + o_sl]
        if want_dx:
            dx[both + i_sl] += d * _per_channel(w, offs, nd)
        if want_dw:
            xs = x[both + i_sl]
            dw[(slice(None), 0) + tuple(offs)] = np.einsum("ncx,ncx->c", d.reshape(d.shape[:2] + (-1,)),
                                                           xs.reshape(xs.shape[:2] + (-1,)))
    return dw, dx

# A block of image planes for the numpy depthwise passes: small enough that a kernel
# offset's pass reads and writes it in the L2 cache (256 KiB measured best, 64 KiB-1 MiB
# within 10%).
PLANE_BLOCK_BYTES = 256 << 10


def depthwise_frame(x, w, g):
    """Y [N, C, *out] of a 2-D depthwise convolution with unit strides, in numpy: blocks of
    image planes copied into a zero-padded frame [fh, fw], each kernel offset one pass of
    per-channel weight times the flat frame shifted by the offset (rows' tails computed and
    dropped: one long pass instead of a pass per row)."""
    n, c, h, wd = x.shape
    (kh, kw), (dh, dw) = g.kernel, g.dilation
    (ph, _), (pw, _) = g.pads
    oh, ow = g.out
    dt = np.result_type(x, w)
    fh, fw = oh + (kh - 1) * dh + 1, ow + (kw - 1) * dw  # (one spare row: the last pass's tail)
    run = oh * fw
    planes = n * c
    step = max(1, PLANE_BLOCK_BYTES // (fh * fw * dt.itemsize))
    frame = np.zeros((min(step, planes), fh, fw), dt)
    acc = np.empty((frame.shape[0], run), dt)
    tmp = np.empty_like(acc)
    xs = x.reshape(planes, h, wd)[:, max(0, -ph):min(h, fh - 1 - ph), max(0, -pw):min(wd, fw - pw)]
    at = (slice(None), slice(max(0, ph), max(0, ph) + xs.shape[1]), slice(max(0, pw), max(0, pw) + xs.shape[2]))
    taps = w.reshape(c, kh * kw).T.astype(dt)  # [offset, C]
    channel = np.arange(planes) % c
    y = np.empty((planes, oh, ow), dt)
    flat = frame.reshape(frame.shape[0], fh * fw)
    for p0 in range(0, planes, step):
        p1 = min(planes, p0 + step)
        k = p1 - p0
        frame[:k][at] = xs[p0:p1]
        a, t, f = acc[:k], tmp[:k], flat[:k]
        weights = taps[:, channel[p0:p1], None]  # [offset, k, 1]
        for i, (ky, kx) in enumerate(np.ndindex(kh, kw)):
            o = ky * dh * fw + kx * dw
            np.multiply(f[:, o:o + run], weights[i], out=t if i else a)
            if i:
                a += t
        y[p0:p1] = a.reshape(k, oh, fw)[:, :, :ow]
    return y.reshape(n, c, oh, ow)
