"""Metrics a net computes on the side: per-class accuracy and a histogram that adds up over
the runs of the op (Caffe2's MultiClassAccuracy and AccumulateHistogram); ``FUNCTIONS``
holds the numpy semantics the interpreter runs.

    MultiClassAccuracy(P [[.1, .9], [.8, .2], [.6, .4]], L [1, 1, 0]) -> ([1, .5], [1, 2])
    AccumulateHistogram(X [.05, .5, .95]) {lower_bound=.1, upper_bound=.9, num_buckets=2}
        -> cur [1, 0, 1, 1], acc = cur added up over this op's runs
"""
from __future__ import annotations

import numpy as np

from ..gradients import no_gradient
from ..opdef import PURE, Effect, declare, type_error
from ..types import TensorType
from .nn import floats, indices


def _multi_class_accuracy(types, attrs, n):
    x, label = floats("MultiClassAccuracy", types, 1)
    indices("MultiClassAccuracy", label, "labels")
    if x.shape is not None and len(x.shape) != 2:
        type_error(f"MultiClassAccuracy needs predictions [N, D], got {list(x.shape)}", "Flatten them first")
    if label.shape is not None and len(label.shape) != 1:
        type_error(f"MultiClassAccuracy labels must be a vector (one per row), got {list(label.shape)}",
                   "Reshape the labels to [N]")
    d = None if x.shape is None else x.shape[1]
    return [TensorType("f32", (d,)), TensorType("i32", (d,))]


declare("MultiClassAccuracy", 2, _multi_class_accuracy, results=2, traits={PURE},
        doc="(P [N, D], labels [N]) -> per class c: the fraction of rows labelled c whose largest "
            "score (ties to the lower column) is c (0 where none is labelled c), and how many are")
no_gradient("MultiClassAccuracy")


def multi_class_accuracy(pred, label):
    n, d = pred.shape
    if label.shape != (n,):
        raise ValueError(f"MultiClassAccuracy: {label.size} labels for {n} rows of predictions")
    lab = label.astype(np.int64)
    if n and (lab.min() < 0 or lab.max() >= d):
        raise ValueError(f"MultiClassAccuracy: label {lab.min() if lab.min() < 0 else lab.max()} is not "
                         f"one of the {d} classes (0 to {d - 1})")
    amounts = np.bincount(lab, minlength=d)
    hits = np.bincount(lab, weights=pred.argmax(axis=1) == lab, minlength=d) if n else np.zeros(d)
    acc = np.divide(hits, amounts, out=np.zeros(d), where=amounts > 0)
    return acc.astype(np.float32), amounts.astype(np.int32)


_HIST = {"lower_bound": 0.0, "upper_bound": 1.0, "num_buckets": 1}


def _accumulate_histogram(types, attrs, n):
    floats("AccumulateHistogram", types)
    if int(attrs["num_buckets"]) < 1:
        type_error(f"AccumulateHistogram needs num_buckets >= 1, got {attrs['num_buckets']}",
                   "pass num_buckets=<buckets between lower_bound and upper_bound>")
    t = TensorType("i64", (int(attrs["num_buckets"]) + 2,))
    return [t, t]


# Its running sum is the op's own state (Caffe2 keeps it in the operator, not in a blob):
# each compiled instance of the net keeps one, so two runs of one net add up and RunNetOnce starts
# afresh. The effect keeps two such ops apart and in their place.
declare("AccumulateHistogram", 1, _accumulate_histogram, results=2, attrs=dict(_HIST),
        effects=(Effect("histogram", "write"),),
        doc="(cur, acc): counts of X below lower_bound, in each of num_buckets equal buckets up to "
            "upper_bound, and from upper_bound on (int64 [num_buckets + 2]); acc adds cur up over the op's runs")
no_gradient("AccumulateHistogram")


def histogram(x, lower_bound=0.0, upper_bound=1.0, num_buckets=1):
    """The bucket counts of ``x`` (Caffe2's arithmetic: float32, (x - lo) / segment + 1, truncated)."""
    x = np.asarray(x).reshape(-1)
    if np.isnan(x).any():
        raise ValueError("AccumulateHistogram: X holds NaN, which falls in no bucket")
    lo, hi, nb = np.float32(lower_bound), np.float32(upper_bound), int(num_buckets)
    seg = np.float32((hi - lo) / np.float32(nb))
    below = x < lo
    above = ~below & (x >= hi)  # (below first: with lower_bound > upper_bound, as Caffe2 counts)
    inside = ~below & ~above
    mid = np.minimum(((x[inside].astype(np.float32) - lo) / seg + np.float32(1)).astype(np.int64), nb + 1)
    out = np.bincount(mid, minlength=nb + 2)[:nb + 2].astype(np.int64)
    out[0] += int(below.sum())
    out[nb + 1] += int(above.sum())
    return out


FUNCTIONS = {"MultiClassAccuracy": multi_class_accuracy}
