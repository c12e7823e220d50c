"""Resampling a feature map as Caffe2's detection nets do, with the gradients Caffe2 has:
RoIAlign (Mask R-CNN's bilinear pooling of regions) and ResizeNearest (FPN's upsampling).
``FUNCTIONS`` holds the numpy semantics the interpreter runs, in float32 as Caffe2 computes
(RoIAlign's sums factored into two small matrix products per RoI: the same terms, another order).

    RoIAlign(X [N, C, H, W], rois [R, 5] (image, x1, y1, x2, y2) or [R, 4]) -> [R, C, ph, pw]
        each of the ph x pw bins of a RoI (scaled by spatial_scale) is the mean of a g x g grid
        of bilinear samples (g = sampling_ratio, or ceil(bin size) when it is <= 0)
    RoIAlignGradient(X, rois, dY) -> dX: each sample's share of dY back to its four pixels
    RoIAlignRotated(X, rois [R, 6] (image, centre x, centre y, w, h, degrees)) -> [R, C, ph, pw]:
        the same bins laid out in the RoI's frame, turned counter-clockwise by its angle
    ResizeNearest(X [N, C, H, W] (, scales [2])) -> [N, C, int(H hs), int(W ws)]
        Y[.., y, x] = X[.., min(int(y / hs), H - 1), min(int(x / ws), W - 1)]
    ResizeNearestGradient(dY, X (, scales)) -> dX: dY summed onto the pixels it copies
"""
from __future__ import annotations

import math

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .nn import floats

f32 = np.float32


def _order(name, attrs):
    if attrs["order"] not in ("NCHW", "NHWC"):
        type_error(f"{name}'s order must be NCHW or NHWC, got {attrs['order']!r}")
    return attrs["order"]


def _rank4(name, t, what="X"):
    if t.shape is not None and len(t.shape) != 4:
        type_error(f"{name} takes a 4-D {what}, got shape {list(t.shape)}")


# ----------------------------------------------------------------------------- RoIAlign
_ROI_ATTRS = {"spatial_scale": 1.0, "pooled_h": 1, "pooled_w": 1, "sampling_ratio": -1, "aligned": False,
              "order": "NCHW"}


# the box columns of each RoIAlign's rois (without the optional image index), and what they hold
_BOX = {"RoIAlign": (4, "x1, y1, x2, y2"), "RoIAlignRotated": (5, "centre x, centre y, w, h, angle in degrees")}


def _roi_align_types(name):
    def infer(types, attrs, n):
        x, rois = floats(name, types)
        order = _order(name, attrs)
        _rank4(name, x)
        if int(attrs["pooled_h"]) < 1 or int(attrs["pooled_w"]) < 1 or float(attrs["spatial_scale"]) <= 0:
            type_error(f"{name}'s pooled_h and pooled_w must be >= 1 and spatial_scale > 0")
        cols, what = _BOX[name]
        if rois.shape is not None and (len(rois.shape) != 2 or rois.shape[1] not in (None, cols, cols + 1)):
            type_error(f"{name}'s rois must be [R, {cols + 1}] (image, {what}) or [R, {cols}], got {list(rois.shape)}")
        r = None if rois.shape is None else rois.shape[0]
        c = None if x.shape is None else x.shape[1 if order == "NCHW" else 3]
        ph, pw = int(attrs["pooled_h"]), int(attrs["pooled_w"])
        return [TensorType(x.dtype, (r, c, ph, pw) if order == "NCHW" else (r, ph, pw, c))]
    return infer


for _name, _doc in (("RoIAlign", "rois [R, 5] image, x1, y1, x2, y2"),
                    ("RoIAlignRotated", "rois [R, 6] image, centre x, centre y, w, h, angle (degrees, "
                                        "counter-clockwise)")):
    declare(_name, 2, _roi_align_types(_name), attrs=dict(_ROI_ATTRS), traits={PURE},
            doc=f"Y [R, C, pooled_h, pooled_w]: each bin of each RoI ({_doc}, times spatial_scale) the mean of "
                "a grid of bilinear samples of X [N, C, H, W]")
    declare(f"{_name}Gradient", 3, lambda t, a, n, _n=_name: [floats(f"{_n}Gradient", t)[0]], attrs=dict(_ROI_ATTRS),
            traits={PURE}, doc=f"dX from (X, rois, dY) of {_name}: each sample's share of dY added to its four pixels")
    no_gradient(f"{_name}Gradient")

    @gradient(_name)
    def _(g, _n=_name):
        return [GradOp(f"{_n}Gradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0]], g.pick(*_ROI_ATTRS))]


def _axis_weights(start, bin_size, pooled: int, grid: int, size: int):
    """Along one axis of a RoI: A [pooled, size], A[bin, pixel] the bilinear weight of the
    pixel summed over the bin's ``grid`` samples (Caffe2's rules: a sample more than one
    pixel outside the map counts zero, one within it is clamped to the edge)."""
    pos = (start + np.arange(pooled, dtype=f32)[:, None] * bin_size
           + (np.arange(grid, dtype=f32)[None, :] + f32(0.5)) * bin_size / f32(grid))  # [pooled, grid]
    valid = ((pos >= -1.0) & (pos <= size)).astype(f32)
    pos = np.maximum(pos, f32(0))
    low = pos.astype(np.int64)
    top = low >= size - 1
    low = np.where(top, size - 1, low)
    pos = np.where(top, low.astype(f32), pos)
    high = np.where(top, low, low + 1)
    frac = pos - low.astype(f32)
    out = np.zeros((pooled, size), f32)
    rows = np.broadcast_to(np.arange(pooled)[:, None], pos.shape)
    np.add.at(out, (rows, low), (f32(1) - frac) * valid)
    np.add.at(out, (rows, high), frac * valid)
    return out


def _roi_axes(roi, height, width, ph, pw, sampling_ratio, scale, aligned):
    """One RoI as two small linear maps: Y[c] = Ay X[c] Ax^T / count, with Ay [ph, H] and
    Ax [pw, W] cut to the rows y0:y1 and columns x0:x1 the RoI reads. (Each bilinear
    sample's weight is a product of a row weight and a column weight, so the bins' sums
    factor; Caffe2 adds the same terms in another order.)"""
    offset = f32(0.5) if aligned else f32(0)
    x1, y1, x2, y2 = (v * f32(scale) - offset for v in roi)
    rw, rh = x2 - x1, y2 - y1
    if aligned:
        if rw < 0 or rh < 0:
            raise ValueError("RoIAlign: a RoI has a negative size (aligned=1 needs x2 >= x1 and y2 >= y1)")
    else:  # (malformed RoIs count as 1 x 1)
        rw, rh = max(rw, f32(1)), max(rh, f32(1))
    gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / f32(ph)))
    gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / f32(pw)))
    ay = _axis_weights(y1, f32(rh / f32(ph)), ph, gh, height) / f32(max(gh * gw, 1))
    ax = _axis_weights(x1, f32(rw / f32(pw)), pw, gw, width)
    (ys,), (xs,) = np.nonzero(ay.any(axis=0)), np.nonzero(ax.any(axis=0))
    if not ys.size or not xs.size:
        return (0, 1, 0, 1), np.zeros((ph, 1), f32), np.zeros((pw, 1), f32)
    y0, y_end, x0, x_end = ys[0], ys[-1] + 1, xs[0], xs[-1] + 1
    return (y0, y_end, x0, x_end), ay[:, y0:y_end], ax[:, x0:x_end]


def _roi_rows(rois, n_images, name="RoIAlign"):
    """(each RoI's image index, its box columns) of rois [R, 1 + cols] or [R, cols]."""
    cols, what = _BOX[name]
    if rois.ndim != 2 or rois.shape[1] not in (cols, cols + 1):
        raise ValueError(f"{name}: rois must be [R, {cols + 1}] (image, {what}) or [R, {cols}], "
                         f"got {list(rois.shape)}")
    rois = rois.astype(f32)
    images = rois[:, 0].astype(np.int64) if rois.shape[1] == cols + 1 else np.zeros(rois.shape[0], np.int64)
    if images.size and (images.min() < 0 or images.max() >= n_images):
        raise ValueError(f"{name}: a RoI's image index is outside 0..{n_images - 1}")
    return images, rois[:, -cols:]


def _channels_first(x, order):
    return x if order == "NCHW" else np.moveaxis(x, 3, 1)


def roi_align(x, rois, spatial_scale=1.0, pooled_h=1, pooled_w=1, sampling_ratio=-1, aligned=False, order="NCHW"):
    xc = _channels_first(x, order).astype(f32)
    n, c, height, width = xc.shape
    images, boxes = _roi_rows(rois, n)
    y = np.zeros((boxes.shape[0], c, pooled_h, pooled_w), f32)
    for r in range(boxes.shape[0]):
        (y0, y1, x0, x1), ay, ax = _roi_axes(boxes[r], height, width, pooled_h, pooled_w, sampling_ratio,
                                             spatial_scale, aligned)
        win = xc[images[r], :, y0:y1, x0:x1]  # [C, h, w]: two plain GEMMs, not C small ones
        t = ay @ win.transpose(1, 0, 2).reshape(y1 - y0, -1)  # [ph, C w]
        y[r] = (t.reshape(-1, x1 - x0) @ ax.T).reshape(pooled_h, c, pooled_w).transpose(1, 0, 2)
    return y if order == "NCHW" else np.ascontiguousarray(np.moveaxis(y, 1, 3))


def roi_align_grad(x, rois, dy, spatial_scale=1.0, pooled_h=1, pooled_w=1, sampling_ratio=-1, aligned=False,
                   order="NCHW"):
    xc = _channels_first(x, order)
    n, c, height, width = xc.shape
    images, boxes = _roi_rows(rois, n)
    g = _channels_first(dy, order).astype(f32)
    dx = np.zeros((n, c, height, width), f32)
    for r in range(boxes.shape[0]):  # (the transpose of the forward map)
        (y0, y1, x0, x1), ay, ax = _roi_axes(boxes[r], height, width, pooled_h, pooled_w, sampling_ratio,
                                             spatial_scale, aligned)
        t = (g[r].transpose(1, 0, 2).reshape(-1, pooled_w) @ ax).reshape(pooled_h, -1)  # [ph, C w]
        dx[images[r], :, y0:y1, x0:x1] += (ay.T @ t).reshape(y1 - y0, c, x1 - x0).transpose(1, 0, 2)
    return dx.astype(x.dtype) if order == "NCHW" else np.ascontiguousarray(np.moveaxis(dx, 1, 3), dtype=x.dtype)


def _bilinear(y, x, height, width):
    """Caffe2's bilinear samples at points (y, x) (float32 arrays of one shape): (flat pixel
    indices [..., 4], weights [..., 4]); a point more than a pixel outside the map counts zero,
    one within a pixel of the edge is clamped to it."""
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.maximum(y, f32(0)), np.maximum(x, f32(0))
    y0, x0 = y.astype(np.int64), x.astype(np.int64)
    ytop, xtop = y0 >= height - 1, x0 >= width - 1
    y0, x0 = np.where(ytop, height - 1, y0), np.where(xtop, width - 1, x0)
    y, x = np.where(ytop, y0.astype(f32), y), np.where(xtop, x0.astype(f32), x)
    y1, x1 = np.where(ytop, y0, y0 + 1), np.where(xtop, x0, x0 + 1)
    ly, lx = y - y0.astype(f32), x - x0.astype(f32)
    hy, hx = f32(1) - ly, f32(1) - lx
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], axis=-1)
    index = np.stack([y0 * width + x0, y0 * width + x1, y1 * width + x0, y1 * width + x1], axis=-1)
    weights[outside] = 0
    index[outside] = 0
    return index, weights


def _rotated_samples(box, height, width, ph, pw, sampling_ratio, scale, aligned):
    """One rotated RoI's samples: (pixel indices [ph, pw, S, 4], weights / count [ph, pw, S, 4]).
    The bins are laid out in the RoI's frame around its centre, then turned by its angle."""
    offset = f32(0.5) if aligned else f32(0)
    cx, cy = box[0] * f32(scale) - offset, box[1] * f32(scale) - offset
    rw, rh = box[2] * f32(scale), box[3] * f32(scale)
    theta = f32(float(box[4]) * math.pi / 180.0)
    if aligned:
        if rw < 0 or rh < 0:
            raise ValueError("RoIAlignRotated: a RoI has a negative size (aligned=1 needs w, h >= 0)")
    else:
        rw, rh = max(rw, f32(1)), max(rh, f32(1))
    bin_h, bin_w = f32(rh / f32(ph)), f32(rw / f32(pw))
    gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / f32(ph)))
    gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / f32(pw)))
    yy = (-rh / f32(2) + np.arange(ph, dtype=f32)[:, None] * bin_h
          + (np.arange(gh, dtype=f32)[None, :] + f32(0.5)) * bin_h / f32(gh))  # [ph, gh]
    xx = (-rw / f32(2) + np.arange(pw, dtype=f32)[:, None] * bin_w
          + (np.arange(gw, dtype=f32)[None, :] + f32(0.5)) * bin_w / f32(gw))  # [pw, gw]
    yy = np.broadcast_to(yy[:, None, :, None], (ph, pw, gh, gw)).reshape(ph, pw, -1)
    xx = np.broadcast_to(xx[None, :, None, :], (ph, pw, gh, gw)).reshape(ph, pw, -1)
    cos, sin = np.cos(theta), np.sin(theta)
    index, w = _bilinear(yy * cos - xx * sin + cy, xx * cos + yy * sin + cx, height, width)
    return index, w / f32(max(gh * gw, 1))


def roi_align_rotated(x, rois, spatial_scale=1.0, pooled_h=1, pooled_w=1, sampling_ratio=-1, aligned=False,
                      order="NCHW"):
    xc = _channels_first(x, order).astype(f32)
    n, c, height, width = xc.shape
    images, boxes = _roi_rows(rois, n, "RoIAlignRotated")
    y = np.zeros((boxes.shape[0], c, pooled_h, pooled_w), f32)
    flat = xc.reshape(n, c, -1)
    for r in range(boxes.shape[0]):
        index, w = _rotated_samples(boxes[r], height, width, pooled_h, pooled_w, sampling_ratio, spatial_scale,
                                    aligned)
        y[r] = np.einsum("cpqsk,pqsk->cpq", flat[images[r]][:, index], w)
    return y if order == "NCHW" else np.ascontiguousarray(np.moveaxis(y, 1, 3))


def roi_align_rotated_grad(x, rois, dy, spatial_scale=1.0, pooled_h=1, pooled_w=1, sampling_ratio=-1,
                           aligned=False, order="NCHW"):
    xc = _channels_first(x, order)
    n, c, height, width = xc.shape
    images, boxes = _roi_rows(rois, n, "RoIAlignRotated")
    g = _channels_first(dy, order).astype(f32)
    dx = np.zeros((n, c, height * width), f32)
    for r in range(boxes.shape[0]):
        index, w = _rotated_samples(boxes[r], height, width, pooled_h, pooled_w, sampling_ratio, spatial_scale,
                                    aligned)
        share = g[r][:, :, :, None, None] * w  # [C, ph, pw, S, 4]
        np.add.at(dx[images[r]], (slice(None), index.reshape(-1)), share.reshape(c, -1))
    dx = dx.reshape(n, c, height, width)
    return dx.astype(x.dtype) if order == "NCHW" else np.ascontiguousarray(np.moveaxis(dx, 1, 3), dtype=x.dtype)


# ----------------------------------------------------------------------------- ResizeNearest
_RESIZE_ATTRS = {"width_scale": 1.0, "height_scale": 1.0, "order": "NCHW"}


def _resize_types(types, attrs, n):
    (x, *rest) = floats("ResizeNearest", types)
    order = _order("ResizeNearest", attrs)
    _rank4("ResizeNearest", x)
    hs, ws = f32(attrs["height_scale"]), f32(attrs["width_scale"])
    if hs <= 0 or ws <= 0:
        type_error(f"ResizeNearest's scales must be > 0, got height_scale={attrs['height_scale']}, "
                   f"width_scale={attrs['width_scale']}")
    if x.shape is None:
        return [x]
    h, w = (2, 3) if order == "NCHW" else (1, 2)
    shape = list(x.shape)
    for axis, s in ((h, hs), (w, ws)):  # (a scales input decides the size when the net runs)
        shape[axis] = None if rest or shape[axis] is None else int(f32(shape[axis]) * s)
    return [TensorType(x.dtype, tuple(shape))]


declare("ResizeNearest", (1, 2), _resize_types, attrs=dict(_RESIZE_ATTRS), traits={PURE},
        doc="Y [N, C, int(H height_scale), int(W width_scale)]: the nearest pixel of X, "
            "X[.., min(int(y / height_scale), H - 1), min(int(x / width_scale), W - 1)]; an optional "
            "second input [height_scale, width_scale] overrides the arguments")
declare("ResizeNearestGradient", (2, 3), lambda t, a, n: [floats("ResizeNearestGradient", t[:2])[1]],
        attrs=dict(_RESIZE_ATTRS), traits={PURE},
        doc="dX from (dY, X (, scales)) of ResizeNearest: dY summed onto the pixels of X it copies")
no_gradient("ResizeNearestGradient")


@gradient("ResizeNearest")
def _(g):
    return [GradOp("ResizeNearestGradient", [g.GO[0], *g.I], [g.GI[0]], g.pick(*_RESIZE_ATTRS))]


def _scales(scales, height_scale, width_scale):
    if scales is None:
        return f32(height_scale), f32(width_scale)
    s = np.asarray(scales)
    if s.ndim != 1 or s.size != 2:
        raise ValueError(f"ResizeNearest: scales must be [height_scale, width_scale], got shape {list(s.shape)}")
    return f32(s[0]), f32(s[1])


def _sources(n_out, n_in, scale):
    return np.minimum((np.arange(n_out, dtype=f32) / scale).astype(np.int64), n_in - 1)


def resize_nearest(x, scales=None, width_scale=1.0, height_scale=1.0, order="NCHW"):
    hs, ws = _scales(scales, height_scale, width_scale)
    if hs <= 0 or ws <= 0:
        raise ValueError(f"ResizeNearest: scales must be > 0, got {[float(hs), float(ws)]}")
    xc = _channels_first(x, order)
    h, w = xc.shape[2:]
    rows, cols = _sources(int(f32(h) * hs), h, hs), _sources(int(f32(w) * ws), w, ws)
    y = xc[:, :, rows][:, :, :, cols]
    return np.ascontiguousarray(y if order == "NCHW" else np.moveaxis(y, 1, 3))


def resize_nearest_grad(dy, x, scales=None, width_scale=1.0, height_scale=1.0, order="NCHW"):
    hs, ws = _scales(scales, height_scale, width_scale)
    g = _channels_first(dy, order).astype(f32)
    xc = _channels_first(x, order)
    h, w = xc.shape[2:]
    rows, cols = _sources(g.shape[2], h, hs), _sources(g.shape[3], w, ws)
    dx = np.zeros(xc.shape[:2] + (h * w,), f32)
    flat = (rows[:, None] * w + cols[None, :]).reshape(-1)
    np.add.at(dx, (slice(None), slice(None), flat), g.reshape(g.shape[0], g.shape[1], -1))
    dx = dx.reshape(xc.shape[:2] + (h, w))
    return np.ascontiguousarray(dx if order == "NCHW" else np.moveaxis(dx, 1, 3), dtype=x.dtype)


FUNCTIONS = {"RoIAlign": roi_align, "RoIAlignGradient": roi_align_grad,
             "RoIAlignRotated": roi_align_rotated, "RoIAlignRotatedGradient": roi_align_rotated_grad,
             "ResizeNearest": resize_nearest, "ResizeNearestGradient": resize_nearest_grad}
