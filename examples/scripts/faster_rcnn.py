"""A Faster R-CNN R-50-C4 predict net in Caffe2's idiom (Detectron's test-time net), random weights.

The net, as Detectron builds its ResNet-50-C4 detector for inference:
- the body: conv1 (7x7, stride 2), BN, ReLU, max pool, then ResNet-50's stages res2..res4
  (3, 4 and 6 bottleneck blocks, ``models.resnet.ResNetBuilder``; stride 16, 1024 channels);
- the RPN head on res4: a 3x3 conv and ReLU, objectness logits (one per anchor) through a
  Sigmoid, and box deltas (four per anchor); ``GenerateProposals`` turns them into RoIs;
- the box head: ``RoIAlign`` of res4 to 14x14 per RoI, res5 (3 bottleneck blocks, the first
  with stride 2: 7x7, 2048 channels), a 7x7 average pool, then ``cls_score`` (Softmax:
  ``cls_prob``) and ``bbox_pred`` FCs;
- the detections: ``BBoxTransform`` of the RoIs by ``bbox_pred`` (weights 10, 10, 5, 5) and
  ``BoxWithNMSLimit`` (score > 0.05, NMS at 0.5, 100 per image): scores, boxes, classes.

Weights are numpy's draws from ``--seed`` (fed over what the init net made), and so is the
image, so a run on the real Caffe2 sees the same net and input:

    dslc exec examples/scripts/faster_rcnn.py                     # full width, 320 x 320, 300 RoIs
    ../shared/tools/caffe2-ref/run.sh examples/scripts/faster_rcnn.py   # the same on Caffe2
    python examples/scripts/faster_rcnn.py --width_div 16 --blocks 1 1 1 1 --image_size 64

``--width_div`` divides every channel count and ``--blocks`` sets the blocks per stage (tests
use a thin, shallow net: ``--width_div 16 --blocks 1 1 1 1``); ``main(argv)`` returns the
detections (scores, boxes, classes) and prints them.
"""
import argparse

import numpy as np

from dslc import brew, model_helper, workspace
from dslc.models.resnet import ResNetBuilder

STAGES = ((64, 256, 1), (128, 512, 2), (256, 1024, 2), (512, 2048, 2))  # res2..res5: inner, out, first stride


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image_size", type=int, default=320)
    p.add_argument("--im_scale", type=float, default=1.0, help="the scale im_info reports (image / original)")
    p.add_argument("--width_div", type=int, default=1, help="divide every channel count by this")
    p.add_argument("--blocks", type=int, nargs=4, default=[3, 4, 6, 3], help="bottleneck blocks in res2..res5")
    p.add_argument("--num_classes", type=int, default=81, help="with the background (COCO: 81)")
    p.add_argument("--anchor_sizes", type=float, nargs="+", default=[32, 64, 128, 256, 512])
    p.add_argument("--aspect_ratios", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--pre_nms_topN", type=int, default=6000)
    p.add_argument("--post_nms_topN", type=int, default=300, help="RoIs per image (Detectron tests with 1000)")
    p.add_argument("--detections_per_im", type=int, default=100)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_args(argv)


def anchors(sizes, ratios, stride=16):
    """[A, 4] boxes (x1, y1, x2, y2) centred on the first cell of a stride-``stride`` grid: for
    each size and aspect ratio (height / width), a box of that area, rounded to whole pixels."""
    centre = (stride - 1) / 2.0
    out = []
    for size in sizes:
        for ratio in ratios:
            w = np.round(np.sqrt(size * size / ratio))
            h = np.round(w * ratio)
            out.append([centre - (w - 1) / 2, centre - (h - 1) / 2, centre + (w - 1) / 2, centre + (h - 1) / 2])
    return np.array(out, np.float32)


def build(args):
    """The predict net (``model.net``) and its init net, in Detectron's blob names where they matter."""
    d = args.width_div
    model = model_helper.ModelHelper(name="faster_rcnn_R-50-C4", arg_scope={"order": "NCHW"}, init_params=True)
    brew.conv(model, "data", "conv1", 3, 64 // d, kernel=7, stride=2, pad=3, no_bias=1)
    brew.spatial_bn(model, "conv1", "res_conv1_bn", 64 // d, epsilon=1e-5, is_test=True)
    brew.relu(model, "res_conv1_bn", "res_conv1_bn")
    brew.max_pool(model, "res_conv1_bn", "pool1", kernel=3, stride=2, pad=1)
    body = ResNetBuilder(model, "pool1", no_bias=1, is_test=True)
    width = 64 // d
    for blocks, (inner, out, stride) in zip(args.blocks[:3], STAGES):
        for b in range(blocks):
            width = body.add_bottleneck(width, inner // d, out // d, stride=stride if b == 0 else 1)
    res4 = model.net.Copy(body.prev_blob, "res4_5_sum")

    # RPN: objectness and box deltas for every anchor at every res4 cell
    a = len(args.anchor_sizes) * len(args.aspect_ratios)
    brew.conv(model, res4, "conv_rpn", 1024 // d, 1024 // d, kernel=3, pad=1)
    brew.relu(model, "conv_rpn", "conv_rpn")
    brew.conv(model, "conv_rpn", "rpn_cls_logits", 1024 // d, a, kernel=1)
    brew.conv(model, "conv_rpn", "rpn_bbox_pred", 1024 // d, 4 * a, kernel=1)
    model.net.Sigmoid("rpn_cls_logits", "rpn_cls_probs")
    model.net.GenerateProposals(["rpn_cls_probs", "rpn_bbox_pred", "im_info", "anchors"], ["rois", "rpn_roi_probs"],
                                spatial_scale=1.0 / 16, pre_nms_topN=args.pre_nms_topN,
                                post_nms_topN=args.post_nms_topN, nms_thresh=0.7, min_size=0.0)

    # the box head: res5 on each RoI's 14 x 14 features
    model.net.RoIAlign([res4, "rois"], "pool5", spatial_scale=1.0 / 16, pooled_h=14, pooled_w=14, sampling_ratio=0)
    body.prev_blob = "pool5"
    inner, out, stride = STAGES[3]
    for b in range(args.blocks[3]):
        width = body.add_bottleneck(width, inner // d, out // d, stride=stride if b == 0 else 1)
    brew.average_pool(model, body.prev_blob, "res5_pool", kernel=7)
    brew.fc(model, "res5_pool", "cls_score", 2048 // d, args.num_classes)
    brew.softmax(model, "cls_score", "cls_prob")
    brew.fc(model, "res5_pool", "bbox_pred", 2048 // d, 4 * args.num_classes)

    # the detections
    model.net.BBoxTransform(["rois", "bbox_pred", "im_info"], ["pred_bbox", "roi_batch_splits"],
                            weights=[10.0, 10.0, 5.0, 5.0], apply_scale=False, correct_transform_coords=True)
    model.net.BoxWithNMSLimit(["cls_prob", "pred_bbox", "roi_batch_splits"],
                              ["score_nms", "bbox_nms", "class_nms"], score_thresh=0.05, nms=0.5,
                              detections_per_im=args.detections_per_im)
    return model


# the heads' weights, in units of 1 / sqrt(fan-in): wide enough that random weights give
# objectness and class scores spread over (0, 1) and deltas that move the boxes (a trained
# net's would; equal scores everywhere would make the ranking a matter of rounding)
HEAD_GAIN = {"rpn_cls_logits_w": 8.0, "rpn_bbox_pred_w": 2.0, "cls_score_w": 12.0, "bbox_pred_w": 3.0}


def initial_weights(args, shapes):
    """{blob: array}: the value of each of ``shapes`` ({name: shape}: the parameters and BN
    statistics), drawn in name order."""
    rng = np.random.RandomState(args.seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("_riv"):  # (running variance: positive)
            out[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif name.endswith("_rm"):
            out[name] = (0.1 * rng.randn(*shape)).astype(np.float32)
        elif name.endswith("_s"):  # (BN scales under one keep the residual sums in range)
            out[name] = rng.uniform(0.2, 0.6, shape).astype(np.float32)
        elif name.endswith("_w"):  # (He's scale for the fan-in, but for the heads)
            fan_in = int(np.prod(shape[1:]))
            std = HEAD_GAIN[name] / np.sqrt(fan_in) if name in HEAD_GAIN else np.sqrt(2.0 / fan_in)
            out[name] = (rng.randn(*shape) * std).astype(np.float32)
        else:
            out[name] = (0.05 * rng.randn(*shape)).astype(np.float32)
    return out


def inputs(args):
    """The image [1, 3, S, S], im_info [[S, S, im_scale]] and the anchors."""
    rng = np.random.RandomState(args.seed + 1)
    s = args.image_size
    return {"data": rng.randn(1, 3, s, s).astype(np.float32),
            "im_info": np.array([[s, s, args.im_scale]], np.float32),
            "anchors": anchors(args.anchor_sizes, args.aspect_ratios)}


def main(argv=None):
    args = parse(argv)
    workspace.ResetWorkspace()
    model = build(args)
    workspace.RunNetOnce(model.param_init_net)
    shapes = {b: workspace.FetchBlob(b).shape for b in workspace.Blobs()
              if b.endswith(("_w", "_b", "_s", "_rm", "_riv"))}
    for name, value in list(initial_weights(args, shapes).items()) + list(inputs(args).items()):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.net)
    scores, boxes, classes = (workspace.FetchBlob(b) for b in ("score_nms", "bbox_nms", "class_nms"))
    print("{} proposals, {} detections".format(workspace.FetchBlob("rois").shape[0], scores.shape[0]))
    for s, b, c in zip(scores, boxes, classes):
        print("class {:2d} score {:.7f} box {}".format(int(c), s, " ".join("{:.5f}".format(v) for v in b)))
    return scores, boxes, classes


if __name__ == "__main__":
    main()
