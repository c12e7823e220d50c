"""Convolution and pooling statements for the random tensor programs (programs_tensor.py):
their geometry drawn in every ``legacy_pad`` mode (NOTSET, VALID, SAME, Caffe's ceil-mode
pooling), convolutions in groups, transposed convolutions (in groups too), max and average
pooling; and their values by definition, one window at a time, without dslc.

Output sizes and begin pads follow Caffe2's ComputeSizeAndPad (C's integer division
truncates toward zero; SAME splits its padding with the smaller half first, a negative
one when the stride passes the kernel; CAFFE_LEGACY_POOLING counts the begin pad twice
and the undilated kernel). A window element outside the image reads nothing: 0 in a
convolution, no candidate for a max, not counted by an average (but with
count_include_pad, which divides by the kernel's size).
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool")
NOTSET, VALID, SAME, CAFFE_LEGACY_POOLING = range(4)


# ----------------------------------------------------------------------------- geometry
def out_size(size, k, s, d, p0, p1, mode):
    """(begin pad, output size) of one spatial dim, as Caffe2 computes them."""
    span = d * (k - 1) + 1
    if mode == NOTSET:
        return p0, (size + p0 + p1 - span) // s + 1
    if mode == VALID:
        return 0, math.trunc((size - span) / s) + 1
    if mode == SAME:
        need = (math.ceil(size / s) - 1) * s + k - size
        return math.trunc(need / 2), math.trunc((size + need - span) / s) + 1
    out = math.ceil((size + 2 * p0 - k) / s + 1)
    if p0 > 0 and (out - 1) * s >= size + p0:
        out -= 1
    return p0, out


def _draw_dims(draw, spatial, pool):
    """(kernels, strides, dilations, pads or None, mode, [(begin pad, out)]) with at
    least one output per dim and, for pooling, an image element in every window; None
    where the draw gives none."""
    mode = draw(st.sampled_from((NOTSET, VALID, SAME, CAFFE_LEGACY_POOLING)))
    ks, ss, ds, p0s, p1s, geo = [], [], [], [], [], []
    for size in spatial:
        k, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        d = 1 if mode == SAME else draw(st.integers(1, 2))
        p0, p1 = (draw(st.integers(0, 1)), draw(st.integers(0, 1))) if mode in (NOTSET, CAFFE_LEGACY_POOLING) \
            else (0, 0)
        if mode == NOTSET and size + p0 + p1 < d * (k - 1) + 1:
            return None
        head, out = out_size(size, k, s, d, p0, p1, mode)
        if out < 1 or (mode == CAFFE_LEGACY_POOLING and out < int((size + 2 * p0 - k) / s + 1)):
            return None  # (no output; or a geometry Caffe2 refuses)
        if pool and any(not _inside(o * s - head, k, d, size) for o in range(out)):
            return None  # (a window with nothing of the image in it)
        ks.append(k), ss.append(s), ds.append(d), p0s.append(p0), p1s.append(p1), geo.append((head, out))
    pads = tuple(p0s) + tuple(p1s) if mode in (NOTSET, CAFFE_LEGACY_POOLING) else None
    return ks, ss, ds, pads, mode, geo


def _inside(start, k, d, size):
    return any(0 <= start + i * d < size for i in range(k))


def _attrs(strides, dilations, pads, mode, **more):
    attrs = [("strides", tuple(strides)), ("dilations", tuple(dilations)), ("legacy_pad", mode)]
    if pads is not None:
        attrs.append(("pads", pads))
    return tuple(attrs) + tuple(more.items())


# ----------------------------------------------------------------------------- drawing
# each returns (op, operands, attrs, output shape) or None; ``const(shape)`` names a new
# constant tensor of ``shape``
def draw_conv(draw, const, x, shape):
    """A convolution of ``x`` seen as [N, C, *spatial] (1 or 2 spatial dims), in groups
    of the channels, with new weight and bias constants."""
    if len(shape) not in (3, 4):
        return None
    got = _draw_dims(draw, shape[2:], pool=False)
    if got is None:
        return None
    ks, ss, ds, pads, mode, geo = got
    c = shape[1]
    group = draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
    m = group * draw(st.integers(1, max(1, 3 // group)))
    w = const((m, c // group) + tuple(ks))
    attrs = _attrs(ss, ds, pads, mode, group=group)
    return "Conv", (x, w, const((m,))), attrs, (shape[0], m) + tuple(out for _, out in geo)


def draw_conv_transpose(draw, const, x, shape):
    """A transposed convolution of ``x`` seen as [N, C, H, W], in groups, with new weight
    [C, M / group, kh, kw] and bias [M] constants; pads, adj (up to the stride), and
    legacy_pad VALID or SAME (no padding)."""
    if len(shape) != 4:
        return None
    c = shape[1]
    group = draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
    mg = draw(st.integers(1, 2))
    mode = draw(st.sampled_from((NOTSET, VALID, SAME)))
    ks, ss, adjs, p0s, p1s, outs = [], [], [], [], [], []
    for size in shape[2:]:
        k, s = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        a = draw(st.integers(0, s))
        p0, p1 = (draw(st.integers(0, 1)), draw(st.integers(0, 1))) if mode == NOTSET else (0, 0)
        out = (size - 1) * s + k + a - p0 - p1
        if out < 1:
            return None
        ks.append(k), ss.append(s), adjs.append(a), p0s.append(p0), p1s.append(p1), outs.append(out)
    w = const((c, mg) + tuple(ks))
    attrs = (("kernels", tuple(ks)), ("strides", tuple(ss)), ("adjs", tuple(adjs)), ("legacy_pad", mode),
             ("group", group)) + ((("pads", tuple(p0s) + tuple(p1s)),) if mode == NOTSET else ())
    return "ConvTranspose", (x, w, const((mg * group,))), attrs, (shape[0], mg * group) + tuple(outs)


def draw_pool(draw, const, x, shape):
    """MaxPool or AveragePool (count_include_pad or not) of ``x`` seen as [N, C, *spatial]."""
    if len(shape) not in (3, 4):
        return None
    got = _draw_dims(draw, shape[2:], pool=True)
    if got is None:
        return None
    ks, ss, ds, pads, mode, geo = got
    op = draw(st.sampled_from(("MaxPool", "AveragePool")))
    more = {"count_include_pad": draw(st.integers(0, 1))} if op == "AveragePool" else {}
    attrs = (("kernels", tuple(ks)),) + _attrs(ss, ds, pads, mode, **more)
    return op, (x,), attrs, shape[:2] + tuple(out for _, out in geo)


# ----------------------------------------------------------------------------- values
def _geometry(x_spatial, a, kernels):
    """[(kernel, stride, dilation, begin pad, out)] per spatial dim from the attributes."""
    nd = len(x_spatial)
    pads = a.get("pads", (0,) * 2 * nd)
    return [(k, a["strides"][i], a["dilations"][i],
             *out_size(size, k, a["strides"][i], a["dilations"][i], pads[i], pads[nd + i], a["legacy_pad"]))
            for i, (size, k) in enumerate(zip(x_spatial, kernels))]


def _windows(x_spatial, geo):
    """For each output position, its window's image positions (those inside the image)
    and how many positions the window has."""
    for pos in np.ndindex(*[out for *_, out in geo]):
        cells = []
        for offs in np.ndindex(*[k for k, *_ in geo]):
            at = tuple(o * s - head + i * d for o, i, (k, s, d, head, _) in zip(pos, offs, geo))
            if all(0 <= c < n for c, n in zip(at, x_spatial)):
                cells.append((offs, at))
        yield pos, cells


def conv(x, w, b, a):
    """y[n, m, pos] = b[m] + the sum over m's group's channels and the window of x times w."""
    group = a.get("group", 1)
    cg, mg = x.shape[1] // group, w.shape[0] // group
    geo = _geometry(x.shape[2:], a, w.shape[2:])
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(out for *_, out in geo), x.dtype)
    for pos, cells in _windows(x.shape[2:], geo):
        for m in range(w.shape[0]):
            g = m // mg
            total = np.full(x.shape[0], b[m], x.dtype)
            for offs, at in cells:
                total = total + x[(slice(None), slice(g * cg, (g + 1) * cg)) + at] @ w[(m, slice(None)) + offs]
            y[(slice(None), m) + pos] = total
    return y


def conv_transpose(x, w, b, a):
    """Each input pixel adds its kernel-weighted value to its group's output channels at
    stride steps; the pads are cut from the result (adj grows its end)."""
    group = a["group"]
    cg, mg = x.shape[1] // group, w.shape[1]
    nd = x.ndim - 2
    pads = a.get("pads", (0,) * 2 * nd)
    full = tuple((n - 1) * s + k + adj for n, s, k, adj in zip(x.shape[2:], a["strides"], a["kernels"], a["adjs"]))
    y = np.zeros((x.shape[0], mg * group) + full, x.dtype)
    for ch in range(x.shape[1]):
        g = ch // cg
        for pos in np.ndindex(*x.shape[2:]):
            for offs in np.ndindex(*a["kernels"]):
                at = tuple(p * s + o for p, s, o in zip(pos, a["strides"], offs))
                y[(slice(None), slice(g * mg, (g + 1) * mg)) + at] += \
                    x[(slice(None), ch) + pos][:, None] * w[(ch, slice(None)) + offs]
    crop = tuple(slice(pads[i], full[i] - pads[nd + i]) for i in range(nd))
    return y[(slice(None), slice(None)) + crop] + b.reshape((1, -1) + (1,) * nd)


def pool(op, x, a):
    """The max, or the mean (over the image's elements, or the kernel's size with
    count_include_pad), of each window."""
    geo = _geometry(x.shape[2:], a, a["kernels"])
    y = np.zeros(x.shape[:2] + tuple(out for *_, out in geo), x.dtype)
    for pos, cells in _windows(x.shape[2:], geo):
        vals = np.stack([x[(slice(None), slice(None)) + at] for _, at in cells])
        if op == "MaxPool":
            y[(slice(None), slice(None)) + pos] = vals.max(axis=0)
        else:
            count = int(np.prod(a["kernels"])) if a["count_include_pad"] else len(cells)
            y[(slice(None), slice(None)) + pos] = vals.sum(axis=0) / x.dtype.type(count)
    return y


def max_gap(x, a) -> float:
    """The smallest gap between a window's max and the next value in it (where MaxPool's
    gradient jumps from one element to another)."""
    geo = _geometry(x.shape[2:], a, a["kernels"])
    gap = np.inf
    for _, cells in _windows(x.shape[2:], geo):
        if len(cells) > 1:
            vals = np.sort(np.stack([x[(slice(None), slice(None)) + at] for _, at in cells]), axis=0)
            gap = min(gap, float(np.min(vals[-1] - vals[-2])))
    return gap
