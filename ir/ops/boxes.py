"""Detectron's box operators as Caffe2 has them: box regression, RPN proposals, per-class
NMS with a detection limit, and FPN proposal collection. ``FUNCTIONS`` holds the numpy
semantics the interpreter runs; they compute in float32 in Caffe2's order of operations,
so a net's boxes come out as Caffe2's do (boxes are [x1, y1, x2, y2], or [ctr_x, ctr_y, w, h,
angle in degrees] when ``rotated``; ``legacy_plus_one`` is the "+ 1" in widths and areas).

    BBoxTransform(rois [M, 4|5], deltas [M, 4K], im_info [B, 3]) -> boxes [M, 4K] (+ splits [B])
        per class k: centre += d_xy * size, size *= exp(min(d_wh, log(1000/16))), clipped
    GenerateProposals(scores [N, A, H, W], deltas [N, 4A, H, W], im_info [N, 3], anchors [A, 4])
        -> rois [R, 5] (batch index first), probs [R]: anchors on the 1/spatial_scale grid,
        the pre_nms_topN best transformed, clipped, small ones dropped, NMS, post_nms_topN kept
    BoxWithNMSLimit(scores [M, C], boxes [M, 4C], splits [B]) -> scores, boxes, classes, splits,
        keeps, keeps_size: per image and foreground class, scores > score_thresh, NMS (or
        soft-NMS), then the detections_per_im best over all classes, grouped by class
    CollectAndDistributeFpnRpnProposals(rois_l..., probs_l...) -> rois, rois_fpn_l..., restore
        (CollectRpnProposals and DistributeFpnProposals are its two halves)

Ties between equal scores are broken by position (Caffe2's std::sort leaves them in an
order of its own): see docs/differences.md. Rotated boxes overlap by the area of their
intersection polygon (``box_math.rotated_intersections``), as in Caffe2's RRPN ops.
"""
from __future__ import annotations

import math

import numpy as np

from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .box_math import (by_score, clip_rotated, clip_upright, greedy_nms, soft_nms, transform_rotated,
                       transform_upright, upright_areas)
from .nn import floats

f32 = np.float32


# ----------------------------------------------------------------------------- BBoxTransform
_XFORM_ATTRS = {"weights": [1.0, 1.0, 1.0, 1.0], "apply_scale": True, "correct_transform_coords": False,
                "rotated": False, "angle_bound_on": True, "angle_bound_lo": -90, "angle_bound_hi": 90,
                "clip_angle_thresh": 1.0, "legacy_plus_one": True}


def _bbox_transform_types(types, attrs, n):
    rois, deltas, im_info = floats("BBoxTransform", types)
    box = 5 if attrs["rotated"] else 4
    if len(attrs["weights"]) != 4:
        type_error(f"BBoxTransform's weights takes 4 values [wx, wy, ww, wh], got {len(attrs['weights'])}")
    if rois.shape is not None and (len(rois.shape) != 2 or rois.shape[1] not in (None, box, box + 1)):
        type_error(f"BBoxTransform's rois must be [M, {box}] or [M, {box + 1}] (batch index first), "
                   f"got shape {list(rois.shape)}")
    if deltas.shape is not None and (len(deltas.shape) != 2 or (deltas.shape[1] or 0) % box):
        type_error(f"BBoxTransform's deltas must be [M, {box} * classes], got shape {list(deltas.shape)}")
    batch = None if im_info.shape is None or not im_info.shape else im_info.shape[0]
    return [TensorType(deltas.dtype, deltas.shape), TensorType("f32", (batch,))][:n]


declare("BBoxTransform", 3, _bbox_transform_types, results=(1, 2), attrs=dict(_XFORM_ATTRS), traits={PURE},
        doc="boxes [M, 4K] = rois [M, 4|5] moved by deltas [M, 4K] per class, clipped to each image "
            "(im_info [B, 3]: height, width, scale); optional second output: RoIs per image [B]")


def bbox_transform(rois, deltas, im_info, weights=(1.0, 1.0, 1.0, 1.0), apply_scale=True, rotated=False,
                   angle_bound_on=True, angle_bound_lo=-90, angle_bound_hi=90, clip_angle_thresh=1.0,
                   legacy_plus_one=True, n_out=1, **_):
    box = 5 if rotated else 4
    if rois.ndim != 2 or rois.shape[1] not in (box, box + 1):
        raise ValueError(f"BBoxTransform: rois must be [M, {box}] or [M, {box + 1}], got {list(rois.shape)}")
    if deltas.ndim != 2 or deltas.shape[0] != rois.shape[0] or deltas.shape[1] % box:
        raise ValueError(f"BBoxTransform: deltas must be [{rois.shape[0]}, {box} * classes], got {list(deltas.shape)}")
    if im_info.ndim != 2 or im_info.shape[1] != 3:
        raise ValueError(f"BBoxTransform: im_info must be [batch, 3], got {list(im_info.shape)}")
    batch = im_info.shape[0]
    if rois.shape[1] == box:
        if batch != 1:
            raise ValueError(f"BBoxTransform: rois without a batch index need one image, im_info has {batch}")
        counts = np.array([rois.shape[0]])
    else:
        ids = rois[:, 0].astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= batch):
            raise ValueError(f"BBoxTransform: a batch index is outside 0..{batch - 1}")
        counts = np.bincount(ids, minlength=batch)
    rois, deltas, im_info = rois.astype(f32), deltas.astype(f32), im_info.astype(f32)
    out = np.empty_like(deltas)
    start = 0
    for b in range(batch):
        rows = slice(start, start + int(counts[b]))
        height, width, scale = im_info[b]
        after = scale if apply_scale else f32(1)
        img_h, img_w = int(height / scale + f32(0.5)), int(width / scale + f32(0.5))
        boxes = rois[rows, -box:].copy()
        boxes[:, :4] /= scale
        if not rotated:  # (every class at once: deltas [m, K, 4] against boxes [m, 1, 4])
            d = deltas[rows].reshape(boxes.shape[0], deltas.shape[1] // 4, 4)
            t = clip_upright(transform_upright(boxes[:, None, :], d, weights, legacy_plus_one), img_h, img_w,
                             legacy_plus_one)
            out[rows] = (t * after).reshape(boxes.shape[0], deltas.shape[1])
        for k in range(deltas.shape[1] // box if rotated else 0):
            d = deltas[rows, k * box:(k + 1) * box]
            t = clip_rotated(transform_rotated(boxes, d, weights, angle_bound_on, angle_bound_lo, angle_bound_hi),
                             img_h, img_w, clip_angle_thresh, legacy_plus_one)
            t[:, :4] *= after
            out[rows, k * box:(k + 1) * box] = t
        start += int(counts[b])
    splits = counts.astype(f32)
    return out if n_out == 1 else (out, splits)


# ----------------------------------------------------------------------------- GenerateProposals
_PROPOSAL_ATTRS = {"spatial_scale": 1.0 / 16, "pre_nms_topN": 6000, "post_nms_topN": 300, "nms_thresh": 0.7,
                   "min_size": 16.0, "angle_bound_on": True, "angle_bound_lo": -90, "angle_bound_hi": 90,
                   "clip_angle_thresh": 1.0, "legacy_plus_one": True, "correct_transform_coords": False}


def _proposal_types(types, attrs, n):
    scores, deltas, im_info, anchors = floats("GenerateProposals", types)
    if float(attrs["spatial_scale"]) <= 0:
        type_error(f"GenerateProposals' spatial_scale must be > 0, got {attrs['spatial_scale']}")
    for what, t, rank in (("scores", scores, 4), ("bbox_deltas", deltas, 4), ("im_info", im_info, 2),
                          ("anchors", anchors, 2)):
        if t.shape is not None and len(t.shape) != rank:
            type_error(f"GenerateProposals' {what} must have rank {rank}, got shape {list(t.shape)}")
    box = None if anchors.shape is None else anchors.shape[1]
    if box not in (None, 4, 5):
        type_error(f"GenerateProposals' anchors must be [A, 4] (or [A, 5] rotated), got {list(anchors.shape)}")
    return [TensorType("f32", (None, None if box is None else box + 1)), TensorType("f32", (None,))]


declare("GenerateProposals", 4, _proposal_types, results=2, attrs=dict(_PROPOSAL_ATTRS), traits={PURE},
        doc="RPN proposals (rois [R, 5]: image, x1, y1, x2, y2; probs [R]) from scores [N, A, H, W], "
            "bbox_deltas [N, 4A, H, W], im_info [N, 3] and anchors [A, 4]: the pre_nms_topN best "
            "anchors moved, clipped, those under min_size dropped, NMS at nms_thresh, post_nms_topN kept")


def all_anchors(anchors, height: int, width: int, stride):
    """The anchors [A, 4|5] shifted to every cell of an H x W grid of ``stride``: [H W A, 4|5],
    rows ordered (h, w, a)."""
    sx = np.arange(width, dtype=f32) * f32(stride)
    sy = np.arange(height, dtype=f32) * f32(stride)
    gx, gy = np.broadcast_to(sx, (height, width)).ravel(), np.broadcast_to(sy[:, None], (height, width)).ravel()
    zero = np.zeros_like(gx)
    shifts = np.stack([gx, gy, gx, gy] if anchors.shape[1] == 4 else [gx, gy, zero, zero, zero], axis=1)
    return (anchors.astype(f32)[None, :, :] + shifts[:, None, :]).reshape(-1, anchors.shape[1])


def generate_proposals(scores, deltas, im_info, anchors, spatial_scale=1.0 / 16, pre_nms_topN=6000,
                       post_nms_topN=300, nms_thresh=0.7, min_size=16.0, angle_bound_on=True, angle_bound_lo=-90,
                       angle_bound_hi=90, clip_angle_thresh=1.0, legacy_plus_one=True, **_):
    n, a, height, width = scores.shape
    box = anchors.shape[1] if anchors.ndim == 2 else 0
    if box not in (4, 5) or anchors.shape[0] != a:
        raise ValueError(f"GenerateProposals: anchors must be [{a}, 4] (or [{a}, 5]), got {list(anchors.shape)}")
    if deltas.shape != (n, box * a, height, width):
        raise ValueError(f"GenerateProposals: bbox_deltas must be {[n, box * a, height, width]}, got {list(deltas.shape)}")
    if im_info.shape != (n, 3):
        raise ValueError(f"GenerateProposals: im_info must be [{n}, 3], got {list(im_info.shape)}")
    grid = all_anchors(anchors, height, width, f32(1.0) / f32(spatial_scale))
    rois, probs = [], []
    for i in range(n):
        d = deltas[i].astype(f32).reshape(a * box, -1).T.reshape(-1, box)
        s = scores[i].astype(f32).reshape(a, -1).T.ravel()
        order = by_score(s)
        if 0 < pre_nms_topN < s.size:
            order = order[:pre_nms_topN]
        s = s[order]
        h_img, w_img, scale = (f32(v) for v in im_info[i])
        if box == 4:
            props = clip_upright(transform_upright(grid[order], d[order], plus_one=legacy_plus_one),
                                 int(h_img), int(w_img), legacy_plus_one)
            p = f32(int(legacy_plus_one))
            ws, hs = props[:, 2] - props[:, 0] + p, props[:, 3] - props[:, 1] + p
            cx, cy = props[:, 0] + ws / f32(2), props[:, 1] + hs / f32(2)
        else:
            props = clip_rotated(transform_rotated(grid[order], d[order], (1.0, 1.0, 1.0, 1.0), angle_bound_on,
                                                   angle_bound_lo, angle_bound_hi),
                                 int(h_img), int(w_img), clip_angle_thresh, legacy_plus_one)
            cx, cy, ws, hs = props[:, 0], props[:, 1], props[:, 2], props[:, 3]
        least = float(min_size) * float(scale)
        kept = np.flatnonzero((ws >= least) & (hs >= least) & (cx < w_img) & (cy < h_img))
        top = post_nms_topN if 0 < post_nms_topN < kept.size else -1
        kept = greedy_nms(props, kept, nms_thresh, top, legacy_plus_one)
        rows = np.empty((len(kept), box + 1), f32)
        rows[:, 0] = i
        rows[:, 1:] = props[kept]
        rois.append(rows)
        probs.append(s[kept])
    return np.concatenate(rois), np.concatenate(probs).astype(f32)


# ----------------------------------------------------------------------------- BoxWithNMSLimit
_NMS_ATTRS = {"score_thresh": 0.05, "nms": 0.3, "detections_per_im": 100, "soft_nms_enabled": False,
              "soft_nms_method": "linear", "soft_nms_sigma": 0.5, "soft_nms_min_score_thres": 0.001,
              "rotated": False, "cls_agnostic_bbox_reg": False, "input_boxes_include_bg_cls": True,
              "output_classes_include_bg_cls": True, "legacy_plus_one": True}


def _nms_limit_types(types, attrs, n):
    ts = floats("BoxWithNMSLimit", types[:2])
    if attrs["soft_nms_method"] not in ("linear", "gaussian"):
        type_error(f"BoxWithNMSLimit's soft_nms_method must be linear or gaussian, got {attrs['soft_nms_method']!r}")
    for what, t in zip(("scores", "boxes"), ts):
        if t.shape is not None and len(t.shape) not in (2, 4):
            type_error(f"BoxWithNMSLimit's {what} must be 2-D (or [M, K, 1, 1]), got shape {list(t.shape)}")
    box = 5 if attrs["rotated"] else 4
    batch = 1
    if len(types) > 2:
        t = types[2]
        shape = getattr(t, "shape", None)
        batch = None if not shape else shape[0]
    classes = None if ts[0].shape is None else ts[0].shape[1]
    out = [TensorType("f32", (None,)), TensorType("f32", (None, box)), TensorType("f32", (None,)),
           TensorType("f32", (batch,)), TensorType("i32", (None,)), TensorType("i32", (batch, classes))]
    return out[:n]


declare("BoxWithNMSLimit", (2, 3), _nms_limit_types, results=(3, 6), attrs=dict(_NMS_ATTRS), traits={PURE},
        doc="detections from per-class scores [M, C] and boxes [M, 4C] (batch_splits [B] optional): per image "
            "and foreground class, scores > score_thresh and NMS at nms (or soft-NMS), then the "
            "detections_per_im best over all classes; outputs scores, boxes, classes, batch_splits, keeps, "
            "keeps_size")


def box_with_nms_limit(scores, boxes, batch_splits=None, score_thresh=0.05, nms=0.3, detections_per_im=100,
                       soft_nms_enabled=False, soft_nms_method="linear", soft_nms_sigma=0.5,
                       soft_nms_min_score_thres=0.001, rotated=False, cls_agnostic_bbox_reg=False,
                       input_boxes_include_bg_cls=True, output_classes_include_bg_cls=True, legacy_plus_one=True,
                       n_out=3):
    box = 5 if rotated else 4
    for what, t in (("scores", scores), ("boxes", boxes)):
        if t.ndim == 4 and t.shape[2:] != (1, 1) or t.ndim not in (2, 4):
            raise ValueError(f"BoxWithNMSLimit: {what} must be 2-D (or [M, K, 1, 1]), got {list(t.shape)}")
    scores, boxes = scores.reshape(scores.shape[:2]).astype(f32), boxes.reshape(boxes.shape[:2]).astype(f32)
    m, classes = scores.shape

    def box_col(j):  # class j's box columns (j counts the background as 0)
        return 0 if cls_agnostic_bbox_reg else (j if input_boxes_include_bg_cls else j - 1)

    def score_col(j):
        return j - 1 + int(input_boxes_include_bg_cls)
    if boxes.shape != (m, (box_col(classes - 1) + 1) * box):
        raise ValueError(f"BoxWithNMSLimit: boxes must be [{m}, {(box_col(classes - 1) + 1) * box}] for scores "
                         f"{list(scores.shape)}, got {list(boxes.shape)}")
    splits = np.array([m]) if batch_splits is None else np.asarray(batch_splits).astype(np.int64)
    if splits.ndim != 1 or splits.sum() != m:
        raise ValueError(f"BoxWithNMSLimit: batch_splits must be 1-D and add up to {m}, got {np.asarray(batch_splits).tolist()}")
    out_s, out_b, out_c, out_keeps, per_image = [], [], [], [], []
    keeps_size = np.zeros((splits.size, classes), np.int32)
    start = 0
    for b, count in enumerate(splits.tolist()):
        sc, bx = scores[start:start + count], boxes[start:start + count]
        keeps: list[list[int]] = [[] for _ in range(classes)]
        used = sc
        if soft_nms_enabled:
            used = sc.copy()
        for j in range(1, classes):
            s = sc[:, score_col(j)]
            bj = bx[:, box_col(j) * box:(box_col(j) + 1) * box]
            rows = np.flatnonzero(s > f32(score_thresh))
            if soft_nms_enabled:
                keeps[j], used[:, score_col(j)] = soft_nms(bj, s, rows, soft_nms_sigma, nms, soft_nms_min_score_thres,
                                                           soft_nms_method, legacy_plus_one)
            else:
                keeps[j] = greedy_nms(bj, by_score(s, rows), nms,
                                      detections_per_im if detections_per_im > 0 else -1, legacy_plus_one)
        total = sum(len(k) for k in keeps)
        if 0 < detections_per_im < total:
            pairs = [(j, i) for j in range(1, classes) for i in keeps[j]]
            values = np.array([used[i, score_col(j)] for j, i in pairs], f32)
            best = np.argsort(-values, kind="stable")[:detections_per_im]
            keeps = [[] for _ in range(classes)]
            for k in best:
                j, i = pairs[k]
                keeps[j].append(i)
            total = detections_per_im
        per_image.append(total)
        for j in range(1, classes):
            rows = np.asarray(keeps[j], dtype=np.int64)
            out_s.append(used[rows, score_col(j)])
            out_b.append(bx[rows, box_col(j) * box:(box_col(j) + 1) * box])
            out_c.append(np.full(rows.size, j - (not output_classes_include_bg_cls), f32))
        for j in range(classes):
            out_keeps.append(np.asarray(keeps[j], np.int32))
            keeps_size[b, j] = len(keeps[j])
        start += count
    out = (np.concatenate(out_s).astype(f32) if out_s else np.zeros(0, f32),
           np.concatenate(out_b).astype(f32).reshape(-1, box) if out_b else np.zeros((0, box), f32),
           np.concatenate(out_c).astype(f32) if out_c else np.zeros(0, f32),
           np.array(per_image, f32), np.concatenate(out_keeps).astype(np.int32), keeps_size)
    return out[:n_out]


# ----------------------------------------------------------------------------- FPN proposals
_RPN_ATTRS = {"rpn_max_level": 6, "rpn_min_level": 2, "rpn_post_nms_topN": 2000}
_ROI_ATTRS = {"roi_canonical_scale": 224, "roi_canonical_level": 4, "roi_max_level": 5, "roi_min_level": 2,
              "legacy_plus_one": True}


def _levels(name, attrs, prefix):
    n = int(attrs[f"{prefix}_max_level"]) - int(attrs[f"{prefix}_min_level"]) + 1
    if n < 1:
        type_error(f"{name}: {prefix}_max_level must be >= {prefix}_min_level")
    return n


def _collect_types(name, types, attrs, n, distribute):
    ts = floats(name, types)
    if not distribute or name == "CollectRpnProposals":
        levels = _levels(name, attrs, "rpn")
        if len(ts) != 2 * levels:
            type_error(f"{name} takes {2 * levels} inputs (the rois, then the probs, of RPN levels "
                       f"{attrs['rpn_min_level']}..{attrs['rpn_max_level']}), got {len(ts)}")
    out = [TensorType("f32", (None, 5))]
    if distribute:
        levels = _levels(name, attrs, "roi")
        want = levels + 1 + (name == "CollectAndDistributeFpnRpnProposals")
        if n != want:
            type_error(f"{name} makes {want} outputs for RoI levels {attrs['roi_min_level']}..{attrs['roi_max_level']}, "
                       f"got {n} names")
        out = out * levels + [TensorType("i32", (None,))]
        if name == "CollectAndDistributeFpnRpnProposals":
            out = [TensorType("f32", (None, 5))] + out
    return out


declare("CollectAndDistributeFpnRpnProposals", (2, None),
        lambda t, a, n: _collect_types("CollectAndDistributeFpnRpnProposals", t, a, n, True),
        results=(3, None), attrs={**_RPN_ATTRS, **_ROI_ATTRS}, traits={PURE},
        doc="the rpn_post_nms_topN best RPN proposals over all FPN levels (rois), then the same split by "
            "the FPN level their size maps to (rois_fpn<l>), and the permutation back (rois_idx_restore)")
declare("CollectRpnProposals", (2, None), lambda t, a, n: _collect_types("CollectRpnProposals", t, a, n, False),
        attrs=dict(_RPN_ATTRS), traits={PURE},
        doc="the rpn_post_nms_topN best RPN proposals over all FPN levels, best first")
declare("DistributeFpnProposals", 1, lambda t, a, n: _collect_types("DistributeFpnProposals", t, a, n, True),
        results=(2, None), attrs=dict(_ROI_ATTRS), traits={PURE},
        doc="rois split by the FPN level their size maps to (floor(level0 + log2(sqrt(area) / scale0)), "
            "clipped), and the permutation that restores their order")


def collect_rpn_proposals(*inputs, rpn_max_level=6, rpn_min_level=2, rpn_post_nms_topN=2000, **_):
    levels = rpn_max_level - rpn_min_level + 1
    rois = [np.asarray(r, f32).reshape(-1, 5) for r in inputs[:levels]]
    probs = [np.asarray(p, f32).ravel() for p in inputs[levels:]]
    for r, p in zip(rois, probs):
        if r.shape[0] != p.size:
            raise ValueError(f"CollectRpnProposals: {r.shape[0]} rois but {p.size} probabilities at one level")
    rois, probs = np.concatenate(rois), np.concatenate(probs)
    order = by_score(probs)
    if 0 < rpn_post_nms_topN < order.size:
        order = order[:rpn_post_nms_topN]
    return rois[order]


def distribute_fpn_proposals(rois, roi_canonical_scale=224, roi_canonical_level=4, roi_max_level=5, roi_min_level=2,
                             legacy_plus_one=True, **_):
    rois = np.asarray(rois, f32).reshape(-1, 5)
    areas = upright_areas(rois[:, 1:], f32(int(legacy_plus_one)))
    if (areas < 0).any():
        raise ValueError("DistributeFpnProposals: a RoI has a negative area (x2 < x1 or y2 < y1)")
    scaled = np.sqrt(areas) / f32(roi_canonical_scale) + f32(1e-6)
    levels = np.floor(f32(roi_canonical_level) + np.log(scaled) / f32(math.log(2.0)))
    levels = np.clip(levels, roi_min_level, roi_max_level)
    outs, order = [], []
    for lvl in range(roi_min_level, roi_max_level + 1):
        rows = np.flatnonzero(levels == lvl)
        outs.append(rois[rows])
        order.append(rows)
    restore = np.argsort(np.concatenate(order), kind="stable").astype(np.int32)
    return tuple(outs) + (restore,)


def collect_and_distribute(*inputs, rpn_max_level=6, rpn_min_level=2, rpn_post_nms_topN=2000, **roi_attrs):
    rois = collect_rpn_proposals(*inputs, rpn_max_level=rpn_max_level, rpn_min_level=rpn_min_level,
                                 rpn_post_nms_topN=rpn_post_nms_topN)
    return (rois,) + distribute_fpn_proposals(rois, **roi_attrs)


FUNCTIONS = {"GenerateProposals": generate_proposals, "CollectRpnProposals": collect_rpn_proposals,
             "DistributeFpnProposals": distribute_fpn_proposals,
             "CollectAndDistributeFpnRpnProposals": collect_and_distribute}
# ops whose kernels make only the outputs the op names (``n_out``)
COUNTED = {"BBoxTransform": bbox_transform, "BoxWithNMSLimit": box_with_nms_limit}
