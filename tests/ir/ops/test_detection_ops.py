"""Detectron's detection ops (ir/ops/boxes.py, ir/ops/resample.py) against the real Caffe2.

Every figure marked "Caffe2" was read off the real Caffe2 (torch 1.10.2's caffe2.python in
the caffe2-ref venv): the same op on the same inputs through ``workspace.RunOperatorOnce``
(RoIAlign's gradient through a net ``loss = SumElements(RoIAlign(X, R) * w)`` with
``AddGradientOperators``), printed with ``tolist()``. Hand checks are in the comments.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError

f32 = np.float32


def _run(backend, op_type, ins, outs, **args):
    workspace.ResetWorkspace()
    names = [f"in{i}" for i in range(len(ins))]
    for n, v in zip(names, ins):
        workspace.FeedBlob(n, v)
    net = core.Net("n")
    getattr(net, op_type)(names, outs, **args)
    workspace.current().run(net, backend=backend)
    return [workspace.FetchBlob(o) for o in outs]


def _close(got, want, atol=2e-4):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64).reshape(np.shape(got)),
                               rtol=1e-5, atol=atol)


ROIS = np.array([[0, 10, 20, 40, 50], [0, 0, 0, 19, 9], [1, 30, 5, 60, 45]], f32)
DELTAS = np.array([[0.1, -0.2, 0.3, 0.0, -0.5, 0.5, -4.0, 5.0], [0, 0, 0, 0, 1.0, 1.0, 0.2, 0.2],
                   [0.3, 0.1, -0.1, 0.2, 0, 0, 0, 0]], f32)
IM_INFO = np.array([[64, 64, 1.0], [100, 120, 2.0]], f32)


def test_bbox_transform_is_caffe2s(backend):
    boxes, splits = _run(backend, "BBoxTransform", [ROIS, DELTAS, IM_INFO], ["b", "s"], weights=[10.0, 10.0, 5.0, 5.0])
    _close(boxes, [[9.35153, 19.38, 41.26847, 49.38, 16.9854, 0.0, 29.9146, 63.0],  # Caffe2
                   [0.0, 0.0, 19.0, 9.0, 1.59189, 0.79595, 21.40811, 10.20405],
                   [31.27682, 4.56297, 60.64318, 46.27702, 30.0, 5.0, 60.0, 45.0]])
    assert splits.tolist() == [2.0, 1.0]
    # zero deltas give the box back (class 0 of RoI 1; class 1 of RoI 2, clipped in the 60 x 50 image at scale 2)
    (boxes,) = _run(backend, "BBoxTransform", [ROIS, DELTAS, IM_INFO], ["b"], apply_scale=False)
    _close(boxes, [[7.67719, 13.8, 48.52281, 43.8, 9.71611, 0.0, 9.28389, 63.0],  # Caffe2
                   [0.0, 0.0, 19.0, 9.0, 17.78597, 8.89299, 41.21403, 20.10701],
                   [20.5613, 2.27527, 34.0387, 26.92473, 15.0, 2.5, 30.0, 22.5]])


def test_rotated_bbox_transform_is_caffe2s(backend):
    rois = np.array([[20, 30, 10, 6, 0.5], [40, 10, 8, 20, 45]], f32)
    deltas = np.array([[0.1, 0.2, 0.1, -0.1, 0.5], [0, 0, 0.2, 0.1, 2.0]], f32)
    (boxes,) = _run(backend, "BBoxTransform", [rois, deltas, np.array([[48, 50, 1.0]], f32)], ["b"], rotated=True,
                    apply_scale=False)
    # angle 45 + 2 rad = 159.59 degrees, brought into [-90, 90] by -180
    _close(boxes, [[21.0, 31.2, 11.05171, 5.42902, 29.14789], [40.0, 10.0, 9.77122, 22.10342, -20.40845]])  # Caffe2


GP_DELTAS = np.array([[[[0.54, 0.13, 0.03], [-0.56, -0.08, -0.11], [-0.02, -0.19, -0.01]],
                       [[-0.14, -0.39, 0.27], [0.26, 0.51, 0.02], [-0.12, -0.16, -0.46]],
                       [[0.29, -0.33, -0.36], [-0.06, 0.45, 0.07], [-0.31, -0.21, 0.19]],
                       [[-0.05, -0.23, -0.07], [0.22, 0.59, -0.37], [-0.19, -0.24, -0.73]],
                       [[-0.28, -0.31, 0.34], [-0.04, -0.49, 0.19], [-0.11, -0.52, -0.18]],
                       [[-0.18, -0.26, 0.01], [-0.67, -0.08, 0.3], [0.26, 0.33, 0.34]],
                       [[0.45, -0.34, 0.25], [-0.56, -0.18, -0.57], [0.31, 0.4, -0.06]],
                       [[0.53, -0.2, 0.05], [0.05, -0.32, 0.13], [0.58, -0.31, 0.27]]]], f32)


def test_generate_proposals_is_caffe2s(backend):
    anchors = np.array([[-8, -8, 23, 23], [-16, -4, 31, 19]], f32)
    scores = np.array([[[[0.9, 0.1, 0.5], [0.3, 0.8, 0.2], [0.6, 0.4, 0.7]],
                        [[0.15, 0.85, 0.25], [0.65, 0.35, 0.95], [0.05, 0.55, 0.45]]]], f32)
    rois, probs = _run(backend, "GenerateProposals", [scores, GP_DELTAS, np.array([[40, 44, 1.0]], f32), anchors],
                       ["r", "p"], spatial_scale=0.0625, pre_nms_topN=12, post_nms_topN=6, nms_thresh=0.6,
                       min_size=8.0)
    _close(rois, [[0.0, 35.54738, 17.53406, 43.0, 39.0], [0.0, 3.89716, 0.0, 43.0, 17.73967],  # Caffe2
                  [0.0, 0.0, 0.0, 25.20249, 10.58477], [0.0, 0.0, 11.45619, 43.0, 39.0],
                  [0.0, 20.33201, 17.56945, 43.0, 31.99054], [0.0, 0.0, 0.0, 18.78902, 19.53525]])
    _close(probs, [0.95, 0.9, 0.85, 0.8, 0.7, 0.65])  # Caffe2 (0.75's box overlaps a better one: NMS drops it)


NMS_BOXES = np.array([[0, 0, 10, 10, 1, 1, 11, 11, 0, 0, 10, 10], [1, 0, 11, 10, 20, 20, 30, 30, 2, 2, 9, 9],
                      [20, 20, 30, 30, 0, 0, 10, 10, 21, 19, 31, 29], [50, 50, 60, 60, 21, 21, 31, 31, 0, 1, 10, 11]],
                     f32)
NMS_SCORES = np.array([[0.1, 0.9, 0.3], [0.2, 0.8, 0.6], [0.3, 0.7, 0.5], [0.4, 0.05, 0.4]], f32)


def test_box_with_nms_limit_is_caffe2s(backend):
    s, b, c, bs, k, ks = _run(backend, "BoxWithNMSLimit", [NMS_SCORES, NMS_BOXES], ["s", "b", "c", "bs", "k", "ks"],
                              score_thresh=0.2, nms=0.5, detections_per_im=4)
    # class 1: 0.9 [1 1 11 11] suppresses 0.7 [0 0 10 10] (IoU 0.70); class 2 keeps three, the limit drops 0.4
    _close(s, [0.9, 0.8, 0.6, 0.5])  # Caffe2
    _close(b, [[1, 1, 11, 11], [20, 20, 30, 30], [2, 2, 9, 9], [21, 19, 31, 29]])
    assert c.tolist() == [1.0, 1.0, 2.0, 2.0] and bs.tolist() == [4.0]
    assert k.tolist() == [0, 1, 1, 2] and ks.tolist() == [[0, 2, 2]]
    assert k.dtype == np.int32 and ks.dtype == np.int32


def test_soft_nms_with_batch_splits_is_caffe2s(backend):
    s, b, c, bs, k, ks = _run(backend, "BoxWithNMSLimit", [NMS_SCORES, NMS_BOXES, np.array([2, 2], np.int32)],
                              ["s", "b", "c", "bs", "k", "ks"], score_thresh=0.2, nms=0.3, soft_nms_enabled=True,
                              soft_nms_method="linear", soft_nms_min_score_thres=0.3)
    _close(s, [0.9, 0.8, 0.6, 0.7, 0.5, 0.4])  # Caffe2
    _close(b, [[1, 1, 11, 11], [20, 20, 30, 30], [2, 2, 9, 9], [0, 0, 10, 10], [21, 19, 31, 29], [0, 1, 10, 11]])
    assert c.tolist() == [1.0, 1.0, 2.0, 1.0, 2.0, 2.0] and bs.tolist() == [3.0, 3.0]
    assert k.tolist() == [0, 1, 1, 0, 0, 1] and ks.tolist() == [[0, 2, 1], [0, 1, 2]]


def test_rotated_nms_is_caffe2s(backend):
    # (centre x, centre y, w, h, degrees): IoUs with the first box, by hand: the same box turned
    # 90 degrees 4 x 4 / (40 + 40 - 16) = 0.25; shifted 3 to the right 7 x 4 / (80 - 28) = 0.54;
    # shifted 1 and turned 10 degrees 32.66 / (80 - 32.66) = 0.69; the 45-degree square none
    rot = np.array([[20, 20, 10, 4, 0], [20, 20, 10, 4, 90], [21, 20, 10, 4, 10], [40, 40, 6, 6, 45],
                    [23, 20, 10, 4, 0]], f32)
    from dslc.ir.ops.box_math import rotated_intersections
    np.testing.assert_allclose(rotated_intersections(rot[0], rot[[1, 3, 4]]), [16, 0, 28], atol=1e-4)
    scores = np.array([[0, 0.9], [0, 0.8], [0, 0.7], [0, 0.6], [0, 0.5]], f32)
    boxes = np.concatenate([np.zeros((5, 5), f32), rot], axis=1)
    for nms, kept in ((0.3, [0, 1, 3]), (0.6, [0, 1, 3, 4])):  # Caffe2: the same rows
        s, b, _ = _run(backend, "BoxWithNMSLimit", [scores, boxes], ["s", "b", "c"], rotated=True, nms=nms)
        _close(s, scores[kept, 1])
        _close(b, rot[kept])


ROI_X = np.arange(32, dtype=f32).reshape(1, 2, 4, 4) ** 1.5 / 10
ROI_R = np.array([[0, 0.5, 0.5, 3.2, 2.6], [0, -1, 1, 5, 6]], f32)


def test_roi_align_and_its_gradient_are_caffe2s(backend):
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", ROI_X)
    workspace.FeedBlob("R", ROI_R)
    workspace.FeedBlob("w", np.arange(16, dtype=f32).reshape(2, 2, 2, 2) / 4)
    net = core.Net("n")
    y = net.RoIAlign(["X", "R"], "Y", spatial_scale=1.0, pooled_h=2, pooled_w=2, sampling_ratio=2)
    net.AddGradientOperators([net.SumElements([net.Mul([y, "w"], "yw")], "loss")])
    workspace.current().run(net, backend=backend)
    _close(workspace.FetchBlob("Y"), [[[[1.28847, 1.77154], [2.97078, 3.61153]],  # Caffe2
                                       [[9.84968, 10.7968], [12.89075, 13.92499]]],
                                      [[[3.10503, 2.06553], [0.0, 0.0]], [[13.04263, 7.34212], [0.0, 0.0]]]])
    _close(workspace.FetchBlob("X_grad"),  # Caffe2
           [[[[0.0, 0.0, 0.0141, 0.01559], [0.19131, 0.17168, 0.2326, 0.29191],
              [0.40496, 0.52555, 0.57352, 0.62566], [0.44436, 0.38402, 0.31416, 0.43559]],
             [[0.00965, 0.07867, 0.10094, 0.07793], [0.3526, 0.7927, 0.88732, 0.79863],
              [0.66406, 1.25, 1.31168, 1.22895], [0.67682, 0.65988, 0.54693, 0.68824]]]], atol=2e-5)
    (y,) = _run(backend, "RoIAlign", [ROI_X, ROI_R], ["Y"], spatial_scale=0.5, pooled_h=1, pooled_w=2,
                sampling_ratio=0, aligned=True)
    _close(y, [[[[0.234, 0.34197]], [[7.15467, 7.5789]]], [[[1.32703, 1.72875]], [[9.75006, 10.5787]]]])  # Caffe2


def test_roi_align_gradient_is_finite_differences():
    rng = np.random.RandomState(0)
    x = rng.randn(2, 2, 5, 6).astype(np.float64)
    rois = np.array([[1, 0.3, 1.1, 4.2, 3.9], [0, -0.5, 2.0, 6.5, 4.4]], np.float64)
    w = rng.randn(2, 2, 2, 3)
    from dslc.ir.ops.resample import roi_align, roi_align_grad
    args = dict(spatial_scale=1.0, pooled_h=2, pooled_w=3, sampling_ratio=2)
    dx = roi_align_grad(x, rois, w.astype(f32), **args)
    eps, num = 1e-2, np.zeros_like(x)
    for i in np.ndindex(x.shape):  # (bilinear in X: central differences are exact up to rounding)
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        num[i] = ((roi_align(xp, rois, **args) * w).sum() - (roi_align(xm, rois, **args) * w).sum()) / (2 * eps)
    np.testing.assert_allclose(dx, num, atol=2e-3)


def test_rotated_roi_align_is_caffe2s(backend):
    rois = np.array([[0, 2.0, 1.5, 3.0, 2.0, 30.0], [0, 1.0, 2.5, 4.0, 1.5, -90.0]], f32)
    (y,) = _run(backend, "RoIAlignRotated", [ROI_X, rois], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2)
    _close(y, [[[[1.85703, 1.24646], [3.61269, 2.75804]], [[10.96712, 9.77296], [13.92942, 12.54393]]],  # Caffe2
               [[[2.06163, 4.89388], [1.7674, 4.48836]], [[11.33413, 15.92249], [10.79516, 15.31669]]]])
    # at angle 0 a rotated RoI (centre, size) is the upright RoI of the same box
    upright = np.array([[0, 0.5, 0.5, 3.5, 2.5]], f32)
    (want,) = _run(backend, "RoIAlign", [ROI_X, upright], ["Y"], pooled_h=2, pooled_w=3, sampling_ratio=2)
    (got,) = _run(backend, "RoIAlignRotated", [ROI_X, np.array([[0, 2.0, 1.5, 3.0, 2.0, 0.0]], f32)], ["Y"],
                  pooled_h=2, pooled_w=3, sampling_ratio=2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_rotated_roi_align_gradient_is_finite_differences():
    # (Caffe2 has this gradient on GPUs only; dslc's CPU one is the forward map's transpose)
    from dslc.ir.ops.resample import roi_align_rotated, roi_align_rotated_grad
    rng = np.random.RandomState(2)
    x = rng.randn(1, 2, 5, 6)
    rois = np.array([[0, 2.5, 2.0, 3.0, 2.5, 35.0], [0, 3.0, 2.5, 4.0, 2.0, -100.0]])
    w = rng.randn(2, 2, 2, 2)
    args = dict(pooled_h=2, pooled_w=2, sampling_ratio=2)
    dx = roi_align_rotated_grad(x, rois, w.astype(f32), **args)
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += 1e-2
        xm[i] -= 1e-2
        num[i] = ((roi_align_rotated(xp, rois, **args) * w).sum() - (roi_align_rotated(xm, rois, **args) * w).sum()) / 2e-2
    np.testing.assert_allclose(dx, num, atol=2e-3)


def test_roi_align_nhwc_and_four_column_rois_match_nchw(backend):
    x = np.random.RandomState(1).randn(1, 3, 6, 5).astype(f32)
    rois = np.array([[0, 0.5, 1.0, 4.0, 5.5], [0, 2, 2, 2.5, 2.5]], f32)
    (want,) = _run(backend, "RoIAlign", [x, rois], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2)
    (nhwc,) = _run(backend, "RoIAlign", [np.ascontiguousarray(x.transpose(0, 2, 3, 1)), rois], ["Y"], pooled_h=2,
                   pooled_w=2, sampling_ratio=2, order="NHWC")
    (four,) = _run(backend, "RoIAlign", [x, rois[:, 1:]], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2)
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), want, rtol=1e-6)
    np.testing.assert_array_equal(four, want)


def test_resize_nearest_and_its_gradient(backend):
    x = np.arange(6, dtype=f32).reshape(1, 1, 2, 3)
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("w", np.arange(12, dtype=f32).reshape(1, 1, 3, 4))
    net = core.Net("n")
    y = net.ResizeNearest(["X"], "Y", height_scale=1.5, width_scale=1.5)
    net.AddGradientOperators([net.SumElements([net.Mul([y, "w"], "yw")], "loss")])
    workspace.current().run(net, backend=backend)
    # 2 x 3 -> int(3.0) x int(4.5) = 3 x 4; row y reads int(y / 1.5) = 0 0 1, column x reads 0 0 1 2
    np.testing.assert_array_equal(workspace.FetchBlob("Y"), [[[[0, 0, 1, 2], [0, 0, 1, 2], [3, 3, 4, 5]]]])
    # dX sums w over the pixels that copy it: dX[0, 0] = w[0, 0] + w[0, 1] + w[1, 0] + w[1, 1] = 0 + 1 + 4 + 5
    np.testing.assert_array_equal(workspace.FetchBlob("X_grad"), [[[[10, 8, 10], [17, 10, 11]]]])
    # the ONNX form: scales [height, width] as a second input, NHWC
    (y,) = _run(backend, "ResizeNearest", [x.transpose(0, 2, 3, 1).copy(), np.array([2.0, 1.0], f32)], ["Y"],
                order="NHWC")
    np.testing.assert_array_equal(y[..., 0], [[[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]]])


def test_collect_and_distribute_fpn_proposals_is_caffe2s(backend):
    r2 = np.array([[0, 0, 0, 10, 10], [0, 0, 0, 100, 100], [1, 5, 5, 400, 300], [0, 1, 1, 2, 2]], f32)
    r3 = np.array([[1, 0, 0, 50, 60], [0, 10, 10, 260, 200], [0, 3, 3, 30, 40]], f32)
    p2, p3 = np.array([0.5, 0.9, 0.2, 0.7], f32), np.array([0.95, 0.1, 0.6], f32)
    outs = ["rois", "f2", "f3", "f4", "f5", "restore"]
    got = _run(backend, "CollectAndDistributeFpnRpnProposals", [r2, r3, p2, p3], outs, rpn_min_level=2,
               rpn_max_level=3, roi_min_level=2, roi_max_level=5, rpn_post_nms_topN=6)
    best = [[1, 0, 0, 50, 60], [0, 0, 0, 100, 100], [0, 1, 1, 2, 2], [0, 3, 3, 30, 40], [0, 0, 0, 10, 10],
            [1, 5, 5, 400, 300]]  # Caffe2: the six best by probability (0.95 0.9 0.7 0.6 0.5 0.2)
    _close(got[0], best)
    # level floor(4 + log2(sqrt(area) / 224)), clipped to 2..5: sqrt(396 * 296) = 342 maps to 4, the rest to 2
    _close(got[1], best[:5])
    assert got[2].shape == (0, 5) and got[4].shape == (0, 5)
    _close(got[3], best[5:])
    assert got[5].tolist() == [0, 1, 2, 3, 4, 5] and got[5].dtype == np.int32
    (rois,) = _run(backend, "CollectRpnProposals", [r2, r3, p2, p3], ["rois"], rpn_min_level=2, rpn_max_level=3,
                   rpn_post_nms_topN=3)
    _close(rois, best[:3])
    f4, restore = _run(backend, "DistributeFpnProposals", [np.array(best, f32)], ["f4", "restore"], roi_min_level=4,
                       roi_max_level=4)
    assert f4.shape == (6, 5) and restore.tolist() == list(range(6))


def test_empty_inputs_give_caffe2s_empty_outputs(backend):
    # Caffe2: RoIAlign of no RoIs is [0, C, ph, pw]; BoxWithNMSLimit of no boxes (or none over
    # score_thresh) gives empty detections, batch_splits [0] and keeps_size zeros [1, C]
    (y,) = _run(backend, "RoIAlign", [ROI_X, np.zeros((0, 5), f32)], ["Y"], pooled_h=2, pooled_w=3)
    assert y.shape == (0, 2, 2, 3)
    for scores, boxes in ((np.zeros((0, 3), f32), np.zeros((0, 12), f32)),
                          (np.full((2, 3), 0.01, f32), np.ones((2, 12), f32))):
        s, b, c, bs, k, ks = _run(backend, "BoxWithNMSLimit", [scores, boxes], ["s", "b", "c", "bs", "k", "ks"])
        assert (s.shape, b.shape, c.shape, k.shape) == ((0,), (0, 4), (0,), (0,))
        assert bs.tolist() == [0.0] and ks.tolist() == [[0, 0, 0]]
    rois, probs = _run(backend, "GenerateProposals", [np.ones((1, 1, 2, 2), f32), np.zeros((1, 4, 2, 2), f32),
                                                      np.array([[10, 10, 1]], f32), np.array([[0, 0, 3, 3]], f32)],
                       ["r", "p"], min_size=100.0)  # (every proposal under min_size)
    assert rois.shape == (0, 5) and probs.shape == (0,)


def test_bad_detection_arguments_are_located_errors():
    workspace.ResetWorkspace()
    net = core.Net("n")
    with pytest.raises(DSLError, match="RoIAlign's rois must be"):
        workspace.FeedBlob("X", ROI_X)
        workspace.FeedBlob("R", ROI_R[:, :3])
        net.RoIAlign(["X", "R"], "Y")
        workspace.current().run(net)
    workspace.ResetWorkspace()
    with pytest.raises(DSLError, match="makes 4 outputs"):
        workspace.FeedBlob("r", ROI_R)
        net = core.Net("m")
        net.DistributeFpnProposals(["r"], ["a", "b"], roi_min_level=2, roi_max_level=4)
        workspace.current().run(net)
