"""Detectron's detection ops on dslc (interp) against the real Caffe2, at Detectron's sizes.

Each case is one op on inputs the size a Faster R-CNN R-50-C4 test pass gives it (an ~800 px
image: res4 features 50 x 50, 15 anchors, 300 RoIs, 81 COCO classes), run in a net made once
and run again and again (``workspace.RunNet``), timed per run (CPU time of the process:
user + system, steadier than wall time on a shared machine). Each engine runs in a process
of its own; rounds alternate between them (dslc, Caffe2, dslc, ...) and each figure is the
median over rounds of that engine's median run; the ratio is dslc / Caffe2 of those.

    python bench/detection_ops.py [--rounds 3] [--runs 5] [--caffe2-python /tmp/caffe2-venv/bin/python]

This script is also the child each round runs (``--engine dslc|caffe2``): it imports only the
engine it times. BLAS threads are left as the environment sets them; say which when quoting.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

f32 = np.float32


def cases():
    """{name: (op type, {input: array}, outputs, arguments)}, drawn from a fixed seed."""
    rs = np.random.RandomState(0)
    boxes = rs.uniform(0, 760, (300, 2)).astype(f32)
    rois = np.concatenate([np.zeros((300, 1), f32), boxes, boxes + rs.uniform(16, 400, (300, 2)).astype(f32)], 1)
    rois[:, 3:] = np.minimum(rois[:, 3:], 799)
    feat = rs.randn(1, 1024, 50, 50).astype(f32)
    a = 15
    anchors = np.concatenate([-rs.uniform(8, 256, (a, 2)), rs.uniform(8, 256, (a, 2))], 1).astype(f32)
    probs = rs.rand(300, 81).astype(f32)
    probs /= probs.sum(axis=1, keepdims=True) / 2  # (a few classes over score_thresh per RoI)
    pred = np.tile(rois[:, 1:], (1, 81)) + rs.randn(300, 324).astype(f32)
    return {
        "RoIAlign 300 RoIs 14x14": ("RoIAlign", {"X": feat, "R": rois}, ["Y"],
                                    dict(spatial_scale=1 / 16., pooled_h=14, pooled_w=14, sampling_ratio=0)),
        "RoIAlignGradient": ("RoIAlignGradient", {"X": feat, "R": rois,
                                                  "dY": rs.randn(300, 1024, 14, 14).astype(f32)}, ["dX"],
                             dict(spatial_scale=1 / 16., pooled_h=14, pooled_w=14, sampling_ratio=0)),
        "GenerateProposals 6000->1000": ("GenerateProposals", {
            "scores": rs.rand(1, a, 50, 50).astype(f32), "deltas": (rs.randn(1, 4 * a, 50, 50) * 0.2).astype(f32),
            "im_info": np.array([[800, 800, 1.0]], f32), "anchors": anchors}, ["rois", "probs"],
            dict(spatial_scale=1 / 16., pre_nms_topN=6000, post_nms_topN=1000, nms_thresh=0.7, min_size=0.0)),
        "BBoxTransform 300x81": ("BBoxTransform", {"R": rois, "D": rs.randn(300, 324).astype(f32) * 0.1,
                                                   "I": np.array([[800, 800, 1.0]], f32)}, ["B"],
                                 dict(weights=[10., 10., 5., 5.], apply_scale=False)),
        "BoxWithNMSLimit 300x81": ("BoxWithNMSLimit", {"S": probs, "P": pred}, ["s", "b", "c"],
                                   dict(score_thresh=0.05, nms=0.5, detections_per_im=100)),
        "ResizeNearest 256x50x50 x2": ("ResizeNearest", {"X": rs.randn(1, 256, 50, 50).astype(f32)}, ["Y"],
                                       dict(width_scale=2.0, height_scale=2.0)),
    }


def child(engine: str, runs: int) -> dict:
    if engine == "caffe2":
        from caffe2.python import core, workspace
    else:
        from dslc import core, workspace
    out = {}
    for name, (op_type, inputs, outputs, args) in cases().items():
        workspace.ResetWorkspace()
        for k, v in inputs.items():
            workspace.FeedBlob(k, v)
        net = core.Net("bench")
        getattr(net, op_type)(list(inputs), outputs, **args)
        workspace.CreateNet(net)
        workspace.RunNet(net.Proto().name)  # (warm: compiled, allocated)
        times = []
        for _ in range(runs):
            t = time.process_time()
            workspace.RunNet(net.Proto().name)
            times.append(time.process_time() - t)
        out[name] = statistics.median(times)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("dslc", "caffe2"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--caffe2-python", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "caffe2-venv", "bin",
                                                            "python"))
    args = p.parse_args()
    if args.engine:
        print(json.dumps(child(args.engine, args.runs)))
        return
    pythons = {"dslc": sys.executable, "caffe2": args.caffe2_python}
    got = {"dslc": [], "caffe2": []}
    for _ in range(args.rounds):
        for engine in ("dslc", "caffe2"):
            run = subprocess.run([pythons[engine], __file__, "--engine", engine, "--runs", str(args.runs)],
                                 capture_output=True, text=True, check=True)
            got[engine].append(json.loads(run.stdout.strip().splitlines()[-1]))
    print(f"{'case':32s} {'dslc ms':>9s} {'caffe2 ms':>10s} {'ratio':>7s}")
    for name in got["dslc"][0]:
        d = statistics.median(r[name] for r in got["dslc"]) * 1e3
        c = statistics.median(r[name] for r in got["caffe2"]) * 1e3
        print(f"{name:32s} {d:9.2f} {c:10.2f} {d / c:7.2f}")


if __name__ == "__main__":
    main()
