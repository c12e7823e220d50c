"""Losses, metrics, Dropout and StopGradient (Caffe2's names, arguments and defaults)."""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import TensorType
from .infer import tensors
from .nn import RANDOM, floats, indices, mismatch, prod, split2d


def _labels(name, x: TensorType, label: TensorType, axis: int = 1):
    """Labels: one integer per row of x (seen as a matrix at ``axis``)."""
    indices(name, label, "labels")
    _, rows, _ = split2d(name, x, axis)
    n = None if label.shape is None else (label.shape[0] if len(label.shape) else 1)
    a = axis % len(x.shape) if x.shape else axis
    if label.shape is not None and x.shape is not None and a > 1 and len(label.shape) == a \
            and tuple(label.shape) == tuple(x.shape[:a]):
        return rows  # (a label per position of the dims before ``axis``, as Caffe2 takes them)
    if label.shape is not None and len(label.shape) > 2 or (label.shape is not None and len(label.shape) == 2
                                                            and label.shape[1] not in (1, None)):
        type_error(f"{name} labels must be a vector (one per row), got shape {list(label.shape)}",
                   "Reshape the labels to [N]")
    mismatch(name, "the labels' length differs from the number of rows", n, rows,
             lambda: f"give one label per row of the {list(x.shape)} input")
    return rows


def _label_cross_entropy_rows(name, x: TensorType, label: TensorType):
    """N, the rows of LabelCrossEntropy's X as Caffe2 sees it: dim 0 of X of rank 2 or more
    (each row the product of the other dims: an [N, 1, D] input is N rows of D), 1 for a
    vector. Labels: N of them, as [N] or [N, 1]."""
    indices(name, label, "labels")
    rows = None
    if x.shape is not None:
        if len(x.shape) == 0:
            type_error(f"{name} needs an input of rank 1 or more, got a scalar", "Reshape it to [N, D]")
        rows = x.shape[0] if len(x.shape) > 1 else 1
    if label.shape is not None:
        ls = label.shape
        if not (len(ls) == 1 or (len(ls) == 2 and ls[1] in (1, None))):
            type_error(f"{name} labels must be [N] or [N, 1], got shape {list(ls)}", "Reshape the labels to [N]")
        mismatch(name, "the labels' length differs from the number of rows", ls[0], rows,
                 lambda: f"give one label per row of the {list(x.shape)} input (its dim 0; a vector is one row)")
    return rows


def _label_cross_entropy(types, attrs, n):
    x, label = tensors("LabelCrossEntropy", types)
    floats("LabelCrossEntropy", types, 1)
    return [TensorType(x.dtype, (_label_cross_entropy_rows("LabelCrossEntropy", x, label),))]


def _label_cross_entropy_grad(types, attrs, n):
    x, label, dy = tensors("LabelCrossEntropyGradient", types)
    floats("LabelCrossEntropyGradient", types, 1)
    rows = _label_cross_entropy_rows("LabelCrossEntropyGradient", x, label)
    if dy.shape is not None:
        if len(dy.shape) != 1:
            type_error(f"LabelCrossEntropyGradient needs dY of rank 1 (one per row), got {list(dy.shape)}",
                       "give dY the shape of LabelCrossEntropy's output, [N]")
        mismatch("LabelCrossEntropyGradient", "dY's length differs from the number of rows", dy.shape[0], rows,
                 lambda: "give dY the shape of LabelCrossEntropy's output, [N]")
    return [x]


declare("LabelCrossEntropy", 2, _label_cross_entropy, traits={PURE},
        doc="Y[i] = -log(max(X[i, label[i]], 1e-20)) for probabilities X [N, D...] (each row "
            "flattened; a vector is one row) and labels [N] or [N, 1] in [0, D)")
declare("LabelCrossEntropyGradient", 3, _label_cross_entropy_grad,
        traits={PURE}, doc="dX from (X, label, dY) of LabelCrossEntropy")


@gradient("LabelCrossEntropy")
def _(g):
    return [GradOp("LabelCrossEntropyGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0]])]


_SWL = {"label_prob": 0, "axis": 1, "scale": 1.0, "order": "NCHW"}


def _softmax_with_loss(types, attrs, n):
    ts = tensors("SoftmaxWithLoss", types)
    x = floats("SoftmaxWithLoss", types, 1)[0]
    if not attrs["label_prob"]:
        _labels("SoftmaxWithLoss", x, ts[1], int(attrs["axis"]))
    elif x.shape is not None and ts[1].shape is not None and prod(ts[1].shape) != prod(x.shape):
        type_error(f"SoftmaxWithLoss label_prob=1 needs labels of the logits' shape {list(x.shape)}, "
                   f"got {list(ts[1].shape)}", "give one probability per logit")
    return [x, TensorType(x.dtype, ())]


declare("SoftmaxWithLoss", (2, 3), _softmax_with_loss, results=2, attrs=_SWL, traits={PURE},
        doc="(softmax of the logits, the average of -log softmax[label] weighted by the optional "
            "third input, times `scale`)")
declare("SoftmaxWithLossGradient", (4, 5), lambda t, a, n: [tensors("SoftmaxWithLossGradient", t)[0]],
        attrs=_SWL, traits={PURE},
        doc="d logits from (logits, labels, [weights,] softmax, d loss)")


@gradient("SoftmaxWithLoss")
def _(g):
    if g.GO[1] is None:  # only the softmax output is used: Caffe2 gives no gradient either
        return []
    return [GradOp("SoftmaxWithLossGradient", list(g.I) + [g.O[0], g.GO[1]], [g.GI[0]],
                   g.pick("label_prob", "axis", "scale"))]


# SpatialSoftmaxWithLoss: softmax over the channels of each pixel; the loss the weighted
# mean of -log p[label] over the pixels whose label is not -1 (0 when there are none)
def _spatial_softmax_with_loss(types, attrs, n):
    ts = tensors("SpatialSoftmaxWithLoss", types)
    x = floats("SpatialSoftmaxWithLoss", types, 1)[0]
    indices("SpatialSoftmaxWithLoss", ts[1], "labels")
    if x.shape is not None and len(x.shape) != 4:
        type_error(f"SpatialSoftmaxWithLoss needs X [N, C, H, W], got {list(x.shape)}", "one score per class and pixel")
    if x.shape is not None and ts[1].shape is not None and tuple(ts[1].shape) != (x.shape[0],) + tuple(x.shape[2:]):
        type_error(f"SpatialSoftmaxWithLoss labels must be [N, H, W] = {[x.shape[0]] + list(x.shape[2:])}, got "
                   f"{list(ts[1].shape)}", "one label per pixel (-1: none)")
    return [x, TensorType(x.dtype, ())]


declare("SpatialSoftmaxWithLoss", (2, 3), _spatial_softmax_with_loss, results=2, attrs={"scale": 1.0},
        traits={PURE}, doc="(the softmax over X's channels at each pixel, the mean of -log p[label] over the "
                           "pixels labelled (not -1), weighted by the optional third input)")
declare("SpatialSoftmaxWithLossGradient", (4, 5), lambda t, a, n: [tensors("SpatialSoftmaxWithLossGradient", t)[0]],
        attrs={"scale": 1.0}, traits={PURE}, doc="dX from (X, labels, [weights,] softmax, d loss)")
no_gradient("SpatialSoftmaxWithLossGradient")


@gradient("SpatialSoftmaxWithLoss")
def _(g):
    if g.GO[1] is None:
        return []
    return [GradOp("SpatialSoftmaxWithLossGradient", list(g.I) + [g.O[0], g.GO[1]], [g.GI[0]], g.pick("scale"))]


def _pixel_terms(x, label, weights):
    """(softmax over the channels, labels, weights of the labelled pixels (0 elsewhere), their total)."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    lab = np.asarray(label).astype(np.int64)
    w = (np.ones(lab.shape) if weights is None else np.asarray(weights, np.float64)) * (lab != -1)
    return p, lab, w, float(w.sum())


def spatial_softmax_with_loss(x, label, *weights, scale=1.0):
    p, lab, w, total = _pixel_terms(x, label, weights[0] if weights else None)
    picked = np.take_along_axis(p, np.maximum(lab, 0)[:, None], axis=1)[:, 0]
    loss = float((-np.log(np.maximum(picked, 1e-20)) * w).sum()) / total if total > 0 else 0.0
    return p.astype(x.dtype), np.array(loss * scale, dtype=x.dtype)


def spatial_softmax_with_loss_grad(x, label, *rest, scale=1.0):
    weights = rest[0] if len(rest) == 3 else None
    dloss = float(np.asarray(rest[-1]).reshape(-1)[0])
    p, lab, w, total = _pixel_terms(x, label, weights)
    onehot = np.zeros_like(p)
    np.put_along_axis(onehot, np.maximum(lab, 0)[:, None], 1.0, axis=1)
    if total <= 0:
        return np.zeros_like(x)
    return ((p - onehot) * w[:, None] * (dloss * scale / total)).astype(x.dtype)


FUNCTIONS = {"SpatialSoftmaxWithLoss": spatial_softmax_with_loss,
             "SpatialSoftmaxWithLossGradient": spatial_softmax_with_loss_grad}  # (and the distances below)


def _row_distance(name):
    def infer(types, attrs, n):
        x, y = floats(name, types)
        if x.shape is not None and y.shape is not None and x.shape != y.shape and \
                all(a is not None for a in x.shape + y.shape):
            type_error(f"{name} needs inputs of one shape, got {list(x.shape)} and {list(y.shape)}",
                       "both inputs must have the same shape")
        rows = None if x.shape is None else (x.shape[0] if x.shape else 1)
        return [TensorType(x.dtype, (rows,))]
    return infer


declare("SquaredL2Distance", 2, _row_distance("SquaredL2Distance"), traits={PURE},
        doc="D[i] = 0.5 * sum((X[i] - Y[i])^2) over each row")
declare("L1Distance", 2, _row_distance("L1Distance"), traits={PURE}, doc="D[i] = sum |X[i] - Y[i]| over each row")
declare("L1DistanceGradient", 3, lambda t, a, n: tensors("L1DistanceGradient", t)[:2],
        results=2, traits={PURE}, doc="(dX, dY) from (X, Y, dD) of L1Distance: sign(X - Y) dD and its negative")


@gradient("L1Distance")
def _(g):
    return [GradOp("L1DistanceGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0], g.GI[1]])]


def l1_distance(x, y):
    d = (x - y).reshape(x.shape[0] if x.ndim else 1, -1)
    return np.abs(d).sum(axis=1).astype(x.dtype)


def l1_distance_grad(x, y, dd):
    g = (np.sign(x - y) * dd.reshape((-1,) + (1,) * (x.ndim - 1))).astype(x.dtype)
    return g, 0 - g  # (0 - g: no -0.0 where X == Y, as Caffe2)


def _margin_ranking(types, attrs, n):
    x1, x2, y = tensors("MarginRankingCriterion", types)
    floats("MarginRankingCriterion", [x1, x2])
    return [x1]


declare("MarginRankingCriterion", 3, _margin_ranking, attrs={"margin": 1.0}, traits={PURE},
        doc="loss = max(0, -Y (X1 - X2) + margin) elementwise; Y is +1 (X1 should rank higher) or -1")
declare("MarginRankingCriterionGradient", 4, lambda t, a, n: [tensors("MarginRankingCriterionGradient", t)[0]] * 2,
        attrs={"margin": 1.0}, results=2, traits={PURE},
        doc="(dX1, dX2) from (X1, X2, Y, dLOSS): -Y dLOSS and Y dLOSS where the hinge is active, else 0")
no_gradient("MarginRankingCriterionGradient")


@gradient("MarginRankingCriterion")
def _(g):
    return [GradOp("MarginRankingCriterionGradient", [g.I[0], g.I[1], g.I[2], g.GO[0]], [g.GI[0], g.GI[1]],
                   g.pick("margin"))]


def margin_ranking_criterion(x1, x2, y, margin=1.0):
    return np.maximum(0, -y * (x1 - x2) + margin).astype(x1.dtype)


def margin_ranking_criterion_grad(x1, x2, y, dloss, margin=1.0):
    active = (-y * (x1 - x2) + margin) >= 0
    d1 = np.where(active, -y * dloss, 0).astype(x1.dtype)
    return d1, 0 - d1
declare("SquaredL2DistanceGradient", 3, lambda t, a, n: tensors("SquaredL2DistanceGradient", t)[:2],
        results=2, traits={PURE}, doc="(dX, dY) from (X, Y, dD) of SquaredL2Distance")


@gradient("SquaredL2Distance")
def _(g):
    return [GradOp("SquaredL2DistanceGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0], g.GI[1]])]


declare("AveragedLoss", 1, lambda t, a, n: [TensorType(floats("AveragedLoss", t)[0].dtype, ())],
        traits={PURE}, doc="y = the mean of all elements of X, a scalar")
declare("AveragedLossGradient", 2, lambda t, a, n: [tensors("AveragedLossGradient", t)[0]],
        traits={PURE}, doc="dX from (X, dY) of AveragedLoss: dY / size everywhere")


@gradient("AveragedLoss")
def _(g):
    return [GradOp("AveragedLossGradient", [g.I[0], g.GO[0]], [g.GI[0]])]


XENT = {"log_D_trick": 0, "unjoined_lr_loss": 0}


def _sigmoid_xent(types, attrs, n, name="SigmoidCrossEntropyWithLogits"):
    ts = floats(name, types)
    x, t = ts[0], ts[1]
    for other, what in ((t, "targets"),) + (((ts[2], "weights"),) if len(ts) == 3 else ()):
        mismatch(name, f"logits and {what} differ in shape", x.shape, other.shape,
                 lambda what=what: f"give one {what[:-1]} per logit")
    if attrs.get("log_D_trick") and attrs.get("unjoined_lr_loss"):
        type_error(f"{name}: log_D_trick and unjoined_lr_loss do not go together", "choose one of them")
    return [TensorType(x.dtype, None if x.shape is None else tuple(x.shape[:-1]))]


declare("SigmoidCrossEntropyWithLogits", 2, _sigmoid_xent, attrs=dict(XENT), traits={PURE},
        doc="Y[...] = the mean over the last axis of max(x, 0) - x t + log(1 + exp(-|x|)), inputs "
            "(logits X, targets T); log_D_trick: -(2t - 1) log sigmoid(x); unjoined_lr_loss: "
            "-t x + (1 - t) log(1 + exp(x))")
declare("SigmoidCrossEntropyWithLogitsGradient", 3,
        lambda t, a, n: [tensors("SigmoidCrossEntropyWithLogitsGradient", t)[1]], attrs=dict(XENT),
        traits={PURE}, doc="dX = dY dL/dx / (last axis size), inputs (dY, X, T)")


@gradient("SigmoidCrossEntropyWithLogits")
def _(g):  # (no gradient for the targets, as in Caffe2)
    return [GradOp("SigmoidCrossEntropyWithLogitsGradient", [g.GO[0], g.I[0], g.I[1]], [g.GI[0]],
                   g.pick(*XENT))]


declare("WeightedSigmoidCrossEntropyWithLogits", 3,
        lambda t, a, n: _sigmoid_xent(t, a, n, "WeightedSigmoidCrossEntropyWithLogits"), traits={PURE},
        doc="Y[...] = the mean over the last axis of w (max(x, 0) - x t + log(1 + exp(-|x|))), inputs "
            "(logits X, targets T, weights W)")
declare("WeightedSigmoidCrossEntropyWithLogitsGradient", 4,
        lambda t, a, n: [tensors("WeightedSigmoidCrossEntropyWithLogitsGradient", t)[1]], traits={PURE},
        doc="dX = dY w (sigmoid(x) - t) / (last axis size), inputs (dY, X, T, W)")


@gradient("WeightedSigmoidCrossEntropyWithLogits")
def _(g):  # (no gradient for the targets or the weights, as in Caffe2)
    return [GradOp("WeightedSigmoidCrossEntropyWithLogitsGradient", [g.GO[0], g.I[0], g.I[1], g.I[2]],
                   [g.GI[0]])]


no_gradient("WeightedSigmoidCrossEntropyWithLogitsGradient")


def _make_two_class(types, attrs, n):
    (p,) = floats("MakeTwoClass", types)
    return [TensorType(p.dtype, None if p.shape is None else tuple(p.shape) + (2,))]


declare("MakeTwoClass", 1, _make_two_class, traits={PURE},
        doc="Y[..., 0] = 1 - p, Y[..., 1] = p: a probability as two classes")
declare("MakeTwoClassGradient", 1, lambda t, a, n: [TensorType(floats("MakeTwoClassGradient", t)[0].dtype,
                                                               None if t[0].shape is None else t[0].shape[:-1])],
        traits={PURE}, doc="dP = dY[..., 1] - dY[..., 0]")


@gradient("MakeTwoClass")
def _(g):
    return [GradOp("MakeTwoClassGradient", [g.GO[0]], [g.GI[0]])]


no_gradient("SigmoidCrossEntropyWithLogitsGradient", "MakeTwoClassGradient")


def _cross_entropy(types, attrs, n):
    x, t = floats("CrossEntropy", types)
    mismatch("CrossEntropy", "probabilities and labels differ in shape", x.shape, t.shape,
             lambda: "give a label distribution per row")
    return [TensorType(x.dtype, None if x.shape is None else tuple(x.shape[:1]))]


declare("CrossEntropy", 2, _cross_entropy, traits={PURE},
        doc="Y[i] = -sum_j T[i, j] log(X[i, j]): the cross entropy of probabilities X with soft labels T")
declare("CrossEntropyGradient", 3, lambda t, a, n: [floats("CrossEntropyGradient", t)[0]], traits={PURE},
        doc="dX = -dY[i] T / X, inputs (X, T, dY)")
no_gradient("CrossEntropyGradient")


@gradient("CrossEntropy")
def _(g):
    return [GradOp("CrossEntropyGradient", [g.I[0], g.I[1], g.GO[0]], [g.GI[0]])]


def _accuracy(types, attrs, n):
    x, label = tensors("Accuracy", types)
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"Accuracy needs predictions [N, D], got {list(x.shape)}", "Flatten them first")
    _labels("Accuracy", x, label)
    if int(attrs["top_k"]) < 1:
        type_error(f"Accuracy top_k must be >= 1, got {attrs['top_k']}", "use top_k=1 for plain accuracy")
    return [TensorType("f32", ())]


declare("Accuracy", 2, _accuracy, attrs={"top_k": 1}, traits={PURE},
        doc="the fraction of rows whose label is among the top_k predictions (ties to the lower "
            "column), a float scalar")
no_gradient("Accuracy")

declare("StopGradient", 1, lambda t, a, n: [tensors("StopGradient", t)[0]], traits={PURE},
        doc="Y = X; no gradient flows back through it")
no_gradient("StopGradient")

declare("ZeroGradient", 1, lambda t, a, n: (tensors("ZeroGradient", t), [])[1], results=(0, 0), traits={PURE},
        doc="does nothing; its input's gradient is zeros (a blob no loss reads, given a gradient, as an "
            "unused output of an op whose gradient needs all of them)")


@gradient("ZeroGradient")
def _(g):
    return [GradOp("ConstantFill", [g.I[0]], [g.GI[0]], {"value": 0.0})]

_DROPOUT = {"ratio": 0.5, "is_test": 0, "random_seed": -1, "output_names": []}


def _dropout(types, attrs, n):
    (x,) = floats("Dropout", types)
    if not 0 <= float(attrs["ratio"]) < 1:
        type_error(f"Dropout ratio must be in [0, 1), got {attrs['ratio']}", "ratio is the fraction dropped")
    return [x, TensorType("bool", x.shape)][:n]


declare("Dropout", 1, _dropout, results=(1, 2), attrs=_DROPOUT, effects=RANDOM,
        doc="(Y, mask): when training, each element kept with probability 1 - ratio and scaled "
            "by 1 / (1 - ratio), from the op's seeded stream; is_test: Y = X")
declare("DropoutGrad", 2, lambda t, a, n: [floats("DropoutGrad", t, 1)[0]],
        attrs={"ratio": 0.5, "is_test": 0}, traits={PURE}, doc="dX from (dY, mask) of Dropout")


@gradient("Dropout")
def _(g):
    if len(g.O) < 2:
        if int(g.args.get("is_test", 0)):
            return [GradOp("Copy", [g.GO[0]], [g.GI[0]])]
        type_error("the gradient of a training Dropout needs its mask",
                   "name two outputs: net.Dropout([x], [y, mask])")
    return [GradOp("DropoutGrad", [g.GO[0], g.O[1]], [g.GI[0]], g.pick("ratio", "is_test"))]


def _sparse_dropout(name):
    def infer(types, attrs, n):
        values, lengths = tensors(name, types)
        indices(name, values, "ids")
        indices(name, lengths, "lengths")
        if not 0 <= float(attrs["ratio"]) <= 1:
            type_error(f"{name} ratio must be in [0, 1], got {attrs['ratio']}")
        return [TensorType(values.dtype, (None,)), lengths]
    return infer


_SPARSE_DROPOUT = {"ratio": 0.0, "replacement_value": -1, "random_seed": -1, "output_names": []}
declare("SparseDropoutWithReplacement", 2, _sparse_dropout("SparseDropoutWithReplacement"), results=2,
        attrs=_SPARSE_DROPOUT, effects=RANDOM,
        doc="(VALUES, LENGTHS) -> (VALUES', LENGTHS'): each example's whole id list replaced, with probability "
            "`ratio`, by the one id `replacement_value` (from the op's seeded stream)")
declare("SparseItemwiseDropoutWithReplacement", 2, _sparse_dropout("SparseItemwiseDropoutWithReplacement"),
        results=2, attrs=_SPARSE_DROPOUT, effects=RANDOM,
        doc="(VALUES, LENGTHS) -> (VALUES', LENGTHS): each id replaced, with probability `ratio`, by "
            "`replacement_value` (from the op's seeded stream)")
no_gradient("SparseDropoutWithReplacement", "SparseItemwiseDropoutWithReplacement")


def sparse_dropout(values, lengths, draws, ratio, replacement_value):
    """The example-wise form: ``draws`` one uniform per example; an example drawn below ``ratio``
    becomes [replacement_value]."""
    lengths = np.asarray(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if starts[-1] != len(values):
        raise ValueError(f"SparseDropoutWithReplacement: the lengths add up to {starts[-1]}, "
                         f"there are {len(values)} ids")
    dropped = draws < ratio
    out = [np.array([replacement_value], values.dtype) if d else values[starts[i]:starts[i + 1]]
           for i, d in enumerate(dropped)]
    out_lengths = np.where(dropped, 1, lengths).astype(lengths.dtype)
    return (np.concatenate(out) if out else values[:0].copy()), out_lengths


def sparse_itemwise_dropout(values, lengths, draws, ratio, replacement_value):
    if int(np.sum(lengths)) != len(values):
        raise ValueError(f"SparseItemwiseDropoutWithReplacement: the lengths add up to {int(np.sum(lengths))}, "
                         f"there are {len(values)} ids")
    return np.where(draws < ratio, values.dtype.type(replacement_value), values), np.asarray(lengths).copy()


FUNCTIONS.update({"L1Distance": l1_distance, "L1DistanceGradient": l1_distance_grad,
                  "MarginRankingCriterion": margin_ranking_criterion,
                  "MarginRankingCriterionGradient": margin_ranking_criterion_grad})
