"""examples/scripts/faster_rcnn.py: a Faster R-CNN R-50-C4 predict net in Caffe2's idiom
(ResNet-50 body to res4, RPN, GenerateProposals, RoIAlign, res5 head, BBoxTransform,
BoxWithNMSLimit) with numpy's random weights, against the real Caffe2's detections.

CAFFE2 below is what the real Caffe2 (torch 1.10.2's caffe2.python in the caffe2-ref venv)
printed for the thin net of THIN:

    ../shared/tools/caffe2-ref/run.sh examples/scripts/faster_rcnn.py --width_div 16 --blocks 1 1 1 1 \\
        --image_size 64 --post_nms_topN 40 --num_classes 5 --detections_per_im 12 --seed 5

(the same weights and image fed: the script draws them from its seed). Where that venv is
present, a slow test also runs Caffe2 on the script now, side by side.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from dslc import workspace

import caffe2_ref
import paths

SCRIPT = paths.EXAMPLES / "scripts" / "faster_rcnn.py"
THIN = ["--width_div", "16", "--blocks", "1", "1", "1", "1", "--image_size", "64", "--post_nms_topN", "40",
        "--num_classes", "5", "--detections_per_im", "12", "--seed", "5"]
# (class, score, x1, y1, x2, y2) per detection, as Caffe2 printed them (see the module docstring)
CAFFE2 = """
class  1 score 0.3130739 box 0.00000 54.35497 32.23924 62.84406
class  3 score 0.3235523 box 0.28468 0.97494 21.30162 20.11493
class  3 score 0.3205053 box 45.94852 1.09596 62.71067 21.95499
class  3 score 0.3195157 box 0.77538 0.74607 62.00422 15.02324
class  3 score 0.3167254 box 0.26349 2.80675 21.27118 60.15271
class  3 score 0.3167215 box 46.95215 2.01544 62.71738 41.67428
class  3 score 0.3161054 box 0.14227 2.43435 10.87614 52.02945
class  3 score 0.3155112 box 0.24303 39.71491 19.90234 61.88499
class  3 score 0.3130441 box 0.55534 1.67132 46.34097 35.49602
class  3 score 0.3128593 box 12.22640 1.05981 39.04947 22.08286
class  3 score 0.3117969 box 25.86180 4.35232 62.36777 19.55399
class  3 score 0.3116505 box 0.70264 2.81152 61.93620 60.17211
"""


def _script():
    return paths.load(SCRIPT, "faster_rcnn")


def _parse(text):
    rows = re.findall(r"class +(\d+) score ([\d.]+) box ([\d. -]+)", text)
    return (np.array([float(s) for _, s, _ in rows]), np.array([[float(v) for v in b.split()] for _, _, b in rows]),
            np.array([float(c) for c, _, _ in rows]))


def _iou(a, b):
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + 1, 0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + 1, 0)
    inter = w * h
    return inter / ((a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1) - inter)


def test_the_thin_net_gives_caffe2s_detections(backend, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    if backend == "numba":  # (as a user runs it: numba compiles the regions worth it, not every
        from dslc.backends.numba import islands  # conv of the net, which takes a minute here)
        for knob in ("MIN_WORK", "NN_MIN_WORK", "WHEN"):
            monkeypatch.setattr(islands, knob, None)
    scores, boxes, classes = _script().main(THIN)
    want_scores, want_boxes, want_classes = _parse(CAFFE2)
    np.testing.assert_array_equal(classes, want_classes)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)  # (Caffe2's convs add in another order:
    np.testing.assert_allclose(boxes, want_boxes, rtol=0, atol=2e-4)   # 1e-5 apart here, printed to 1e-5)
    # what the detection ops promise, checked by hand: boxes inside the 64 x 64 image, each
    # class's boxes best first and overlapping less than the NMS threshold (0.5)
    assert boxes.min() >= 0 and boxes.max() <= 63
    for c in set(classes.tolist()):
        mine = np.flatnonzero(classes == c)
        assert (np.diff(scores[mine]) <= 0).all()
        assert all(_iou(boxes[i], boxes[j]) <= 0.5 for i in mine for j in mine if i < j)
    # the proposals the head saw: 40 RoIs from GenerateProposals, each pooled to 14 x 14
    assert workspace.FetchBlob("rois").shape == (40, 5) and workspace.FetchBlob("pool5").shape == (40, 64, 14, 14)


@pytest.mark.slow
@pytest.mark.skipif(not caffe2_ref.HAVE_CAFFE2, reason="the real Caffe2's venv (/tmp/caffe2-venv) is absent")
def test_side_by_side_with_caffe2_now(tmp_path):
    argv = ["--width_div", "8", "--blocks", "1", "2", "2", "1", "--image_size", "96", "--im_scale", "1.5",
            "--post_nms_topN", "60", "--num_classes", "4", "--detections_per_im", "30", "--seed", "2"]
    out = caffe2_ref.run_script(SCRIPT, argv, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    want_scores, want_boxes, want_classes = _parse(out.stdout)
    scores, boxes, classes = _script().main(argv)
    assert len(want_scores) > 0
    np.testing.assert_array_equal(classes, want_classes)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=2e-6)
    np.testing.assert_allclose(boxes, want_boxes, rtol=0, atol=5e-4)
