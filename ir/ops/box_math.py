"""The box geometry Detectron's ops share (ir/ops/boxes.py): box regression, clipping to the
image, overlaps of upright and rotated boxes, and greedy and soft NMS. Everything computes in
float32 in Caffe2's order of operations; ``p`` / ``plus_one`` is Caffe2's legacy "+ 1" in
widths and areas; a rotated box is [ctr_x, ctr_y, w, h, angle in degrees].
"""
from __future__ import annotations

import math

import numpy as np

f32 = np.float32
# Caffe2's BBOX_XFORM_CLIP_DEFAULT: a float made from log(1000 / 16)
XFORM_CLIP = f32(math.log(1000.0 / 16.0))


def transform_upright(boxes, deltas, weights=(1.0, 1.0, 1.0, 1.0), plus_one=True):
    """Boxes [..., 4] moved by deltas [..., 4] (Detectron's bbox_transform; the leading dims
    broadcast), in float32."""
    p = f32(int(plus_one))
    w = boxes[..., 2] - boxes[..., 0] + p
    h = boxes[..., 3] - boxes[..., 1] + p
    cx = boxes[..., 0] + f32(0.5) * w
    cy = boxes[..., 1] + f32(0.5) * h
    wx, wy, ww, wh = (f32(v) for v in weights)
    dx, dy = deltas[..., 0] / wx, deltas[..., 1] / wy
    dw = np.minimum(deltas[..., 2] / ww, XFORM_CLIP)
    dh = np.minimum(deltas[..., 3] / wh, XFORM_CLIP)
    px, py = dx * w + cx, dy * h + cy
    pw, ph = np.exp(dw) * w, np.exp(dh) * h
    return np.stack([px - f32(0.5) * pw, py - f32(0.5) * ph,
                     px + f32(0.5) * pw - p, py + f32(0.5) * ph - p], axis=-1).astype(f32)


def transform_rotated(boxes, deltas, weights=(1.0, 1.0, 1.0, 1.0), bound_on=True, lo=-90, hi=90):
    """Rotated boxes [M, 5] (centre, size, degrees) moved by deltas [M, 5] (angle in radians)."""
    wx, wy, ww, wh = (f32(v) for v in weights)
    dw = np.minimum(deltas[:, 2] / ww, XFORM_CLIP)
    dh = np.minimum(deltas[:, 3] / wh, XFORM_CLIP)
    angle = deltas[:, 4] * f32(180.0) / f32(math.pi) + boxes[:, 4]
    if bound_on:
        period = hi - lo
        if period <= 0 or period % 180:
            raise ValueError(f"angle_bound_hi - angle_bound_lo must be a positive multiple of 180, got {period}")
        angle = np.where(angle < lo, angle + f32(period), np.where(angle > hi, angle - f32(period), angle))
    return np.stack([deltas[:, 0] / wx * boxes[:, 2] + boxes[:, 0], deltas[:, 1] / wy * boxes[:, 3] + boxes[:, 1],
                     np.exp(dw) * boxes[:, 2], np.exp(dh) * boxes[:, 3], angle], axis=1).astype(f32)


def clip_upright(boxes, height: int, width: int, plus_one=True):
    p = int(plus_one)
    out = boxes.copy()
    out[..., 0::2] = np.maximum(np.minimum(boxes[..., 0::2], f32(width - p)), f32(0))
    out[..., 1::2] = np.maximum(np.minimum(boxes[..., 1::2], f32(height - p)), f32(0))
    return out


def clip_rotated(boxes, height: int, width: int, angle_thresh=1.0, plus_one=True):
    """Only the nearly upright boxes (|angle| <= angle_thresh) are clipped, as upright ones."""
    p = f32(int(plus_one))
    out = boxes.copy()
    rows = np.abs(boxes[:, 4]) <= f32(angle_thresh)
    if rows.any():
        b = boxes[rows]
        half_w, half_h = (b[:, 2] - p) / f32(2), (b[:, 3] - p) / f32(2)
        xyxy = np.stack([b[:, 0] - half_w, b[:, 1] - half_h, b[:, 0] + half_w, b[:, 1] + half_h], axis=1)
        c = clip_upright(xyxy, height, width, plus_one)
        out[rows, 0] = (c[:, 0] + c[:, 2]) / f32(2)
        out[rows, 1] = (c[:, 1] + c[:, 3]) / f32(2)
        out[rows, 2] = c[:, 2] - c[:, 0] + p
        out[rows, 3] = c[:, 3] - c[:, 1] + p
    return out


def upright_areas(boxes, p):
    return (boxes[:, 2] - boxes[:, 0] + p) * (boxes[:, 3] - boxes[:, 1] + p)


def _iou(boxes, areas, i, rest, p):
    """The intersection over union of box ``i`` with each of the boxes ``rest``."""
    w = np.maximum(np.minimum(boxes[rest, 2], boxes[i, 2]) - np.maximum(boxes[rest, 0], boxes[i, 0]) + p, f32(0))
    h = np.maximum(np.minimum(boxes[rest, 3], boxes[i, 3]) - np.maximum(boxes[rest, 1], boxes[i, 1]) + p, f32(0))
    inter = w * h
    return inter / (areas[i] + areas[rest] - inter)


def _corners(boxes):
    """The corners [M, 4, 2] of rotated boxes [M, 5] (centre, size, degrees counter-clockwise),
    as Caffe2 lays them out."""
    turn = -boxes[:, 4].astype(np.float64) * 0.01745329251
    b, a = np.cos(turn).astype(f32) * f32(0.5), np.sin(turn).astype(f32) * f32(0.5)
    cx, cy, w, h = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    p0 = np.stack([cx - a * h - b * w, cy + b * h - a * w], axis=1)
    p1 = np.stack([cx + a * h - b * w, cy - b * h - a * w], axis=1)
    centre = np.stack([cx, cy], axis=1)
    return np.stack([p0, p1, 2 * centre - p0, 2 * centre - p1], axis=1)


def _inside(points, corners):
    """Whether each of points [M, K, 2] lies in the rectangle of corners [M, 4, 2]."""
    a, ab, ad = corners[:, None, 0], corners[:, None, 1] - corners[:, None, 0], corners[:, None, 3] - corners[:, None, 0]
    ap = points - a
    u, v = (ap * ab).sum(-1), (ap * ad).sum(-1)
    return (u >= 0) & (u <= (ab * ab).sum(-1)) & (v >= 0) & (v <= (ad * ad).sum(-1))


def rotated_intersections(box, others):
    """The area of the intersection of rotated box [5] with each of others [M, 5]: the convex
    polygon of the corners of each inside the other and their edges' crossings."""
    m = others.shape[0]
    c1 = np.broadcast_to(_corners(box[None]), (m, 4, 2)).astype(np.float64)
    c2 = _corners(others).astype(np.float64)
    e1, e2 = np.roll(c1, -1, axis=1) - c1, np.roll(c2, -1, axis=1) - c2
    # edge i of box against edge j of the other: c1_i + t1 e1_i = c2_j + t2 e2_j
    d = c2[:, None, :, :] - c1[:, :, None, :]  # [M, 4, 4, 2]
    cross = lambda u, v: u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]  # noqa: E731
    det = cross(e2[:, None, :, :], e1[:, :, None, :])
    ok = np.abs(det) > 1e-14
    safe = np.where(ok, det, 1.0)
    t1, t2 = cross(e2[:, None, :, :], d) / safe, cross(e1[:, :, None, :], d) / safe
    ok &= (t1 >= 0) & (t1 <= 1) & (t2 >= 0) & (t2 <= 1)
    crossings = c1[:, :, None, :] + t1[..., None] * e1[:, :, None, :]
    points = np.concatenate([crossings.reshape(m, 16, 2), c1, c2], axis=1)  # [M, 24, 2]
    valid = np.concatenate([ok.reshape(m, 16), _inside(c1, c2), _inside(c2, c1)], axis=1)
    count = valid.sum(axis=1)
    centre = (points * valid[..., None]).sum(axis=1) / np.maximum(count, 1)[:, None]
    first = points[np.arange(m), valid.argmax(axis=1)]
    points = np.where(valid[..., None], points, first[:, None, :])  # (the unused: copies of a vertex)
    rel = points - centre[:, None, :]
    order = np.argsort(np.arctan2(rel[..., 1], rel[..., 0]), axis=1)
    ring = np.take_along_axis(rel, order[..., None], axis=1)
    area = 0.5 * np.abs(cross(ring, np.roll(ring, -1, axis=1)).sum(axis=1))
    return np.where(count >= 3, area, 0.0).astype(f32)


def _box_areas(boxes, p):
    return boxes[:, 2] * boxes[:, 3] if boxes.shape[1] == 5 else upright_areas(boxes, p)


def _overlaps(boxes, areas, i, rest, p):
    """The IoU of box ``i`` with each of the boxes ``rest``, upright or rotated."""
    if boxes.shape[1] == 5:
        inter = rotated_intersections(boxes[i], boxes[rest])
        return inter / (areas[i] + areas[rest] - inter)
    return _iou(boxes, areas, i, rest, p)


def greedy_nms(boxes, order, thresh: float, top_n: int = -1, plus_one=True) -> list[int]:
    """Greedy NMS over the rows ``order`` names (best first): a row is dropped when its IoU
    with a kept one is above ``thresh``; at most ``top_n`` kept (-1: no limit). Rotated
    boxes [M, 5] overlap by the area of their intersection polygon (no "+ 1")."""
    p = f32(int(plus_one))
    areas = _box_areas(boxes, p)
    order = np.asarray(order, dtype=np.int64)
    keep: list[int] = []
    while order.size and (top_n < 0 or len(keep) < top_n):
        i, rest = int(order[0]), order[1:]
        keep.append(i)
        order = rest[_overlaps(boxes, areas, i, rest, p) <= f32(thresh)]
    return keep


def soft_nms(boxes, scores, pending, sigma, overlap_thresh, score_thresh, method, plus_one=True):
    """Soft-NMS (Bodla et al.): the best pending row is kept and the others' scores are
    scaled down by their overlap with it (linear: 1 - IoU above ``overlap_thresh``;
    gaussian: exp(-IoU^2 / sigma)); rows whose score falls under ``score_thresh`` leave.
    Returns (kept rows in the order picked, the updated scores)."""
    p = f32(int(plus_one))
    areas = _box_areas(boxes, p)
    out = scores.astype(f32).copy()
    pending = np.asarray(pending, dtype=np.int64)
    keep: list[int] = []
    while pending.size:
        best = int(np.argmax(out[pending]))  # (the first of equal maxima, as Eigen's maxCoeff)
        i = int(pending[best])
        keep.append(i)
        pending[[0, best]] = pending[[best, 0]]
        rest = pending[1:]
        ovr = _overlaps(boxes, areas, i, rest, p)
        if method == "gaussian":
            weight = np.exp(-ovr.astype(np.float64) * ovr / sigma).astype(f32)
        else:
            weight = np.where(ovr > f32(overlap_thresh), (1.0 - ovr.astype(np.float64)).astype(f32), f32(1))
        out[rest] *= weight
        pending = rest[out[rest] >= f32(score_thresh)]
    return keep, out


def by_score(scores, rows=None) -> np.ndarray:
    """``rows`` (default all) ordered by score, best first; equal scores keep their order."""
    rows = np.arange(scores.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    return rows[np.argsort(-scores[rows], kind="stable")]
