"""The numpy semantics of the neural-network ops (ir/ops/nn.py) and their gradients.

Each function takes the op's inputs, then its attributes as keywords, and returns its
result (a tuple for several). Backends call these; the numba backend compiles some of
them itself. Shapes and dtypes were checked by type inference before anything runs.
"""
from __future__ import annotations

import math

import numpy as np

from ..budget import check_size
from .ids import checked, updated_rows, wraps
from .numeric import legacy_align

LOG_THRESHOLD = 1e-20  # Caffe2's kLOG_THRESHOLD: LabelCrossEntropy never takes log(0)


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def as_2d(x, axis: int):
    """x viewed as (prod(dims[:axis]), prod(dims[axis:])), Caffe2's canonical matrix."""
    axis = axis if axis >= 0 else x.ndim + axis
    return x.reshape(_prod(x.shape[:axis]), _prod(x.shape[axis:]))


# --- matrix products
def fc(x, w, b, axis=1, axis_w=1):
    if x.ndim == 2 and w.ndim == 2 and axis in (1, -1) and axis_w in (1, -1):  # (the usual case, without as_2d's steps)
        y = np.dot(x, w.T)
        y += b
        return y
    x2 = as_2d(x, axis)
    w2 = as_2d(w, axis_w)
    y = np.dot(x2, w2.T)
    y += b
    return y.reshape(x.shape[:axis % max(x.ndim, 1)] + (w2.shape[0],))


def fc_grad(x, w, dy, axis=1, axis_w=1, with_dx=True):
    """(dW, db, dX) of FC; (dW, db) without ``with_dx``."""
    if x.ndim == 2 and w.ndim == 2 and dy.ndim == 2 and axis in (1, -1) and axis_w in (1, -1):
        x2, w2, dy2 = x, w, dy  # (the usual case, without as_2d's steps)
    else:
        x2 = as_2d(x, axis)
        w2 = as_2d(w, axis_w)
        dy2 = dy.reshape(x2.shape[0], w2.shape[0])
    dw = np.dot(dy2.T, x2).reshape(w.shape)
    db = dy2.sum(axis=0)
    if not with_dx:
        return dw, db
    dx = np.dot(dy2, w2).reshape(x.shape)
    return dw, db, dx


def fc_transposed(x, w, b, axis=1, axis_w=1):
    x2, w2 = as_2d(x, axis), as_2d(w, axis_w)
    y = np.dot(x2, w2)
    y += b
    return y.reshape(x.shape[:axis % max(x.ndim, 1)] + (w2.shape[1],))


def fc_transposed_grad(x, w, dy, axis=1, axis_w=1):
    """(dW, db, dX) of FCTransposed."""
    x2, w2 = as_2d(x, axis), as_2d(w, axis_w)
    dy2 = dy.reshape(x2.shape[0], w2.shape[1])
    return np.dot(x2.T, dy2).reshape(w.shape), dy2.sum(axis=0), np.dot(dy2, w2.T).reshape(x.shape)


def matmul(a, b, *like, trans_a=0, trans_b=0, axis_a=1, axis_b=1):
    """op(A) op(B) of A, B seen as matrices at axis_a, axis_b; shaped like ``like`` if given."""
    a2, b2 = as_2d(a, axis_a), as_2d(b, axis_b)
    y = np.dot(a2.T if trans_a else a2, b2.T if trans_b else b2)
    return y.reshape(np.shape(like[0])) if like else y


# --- shapes
def transpose(x, axes=()):
    return np.ascontiguousarray(np.transpose(x, tuple(axes) if axes else None))


def reshape_dims(in_shape, shape) -> tuple:
    """Caffe2's Reshape rule: 0 copies the input's dim (past its rank, stays 0), one -1 takes what
    is left."""
    out = [int(in_shape[i]) if d == 0 and i < len(in_shape) else int(d) for i, d in enumerate(shape)]
    if -1 in out:
        known = _prod(d for d in out if d != -1)
        out[out.index(-1)] = _prod(in_shape) // known if known else 0
    return tuple(out)


def reshape(x, new_shape=None, shape=()):
    """(reshaped, old shape as int64); the new shape from the attribute, or the input ``new_shape``."""
    if new_shape is not None:
        shape = [int(d) for d in np.asarray(new_shape).reshape(-1)]
        if sum(1 for d in shape if d == -1) > 1 or any(d < -1 for d in shape):
            raise ValueError(f"Reshape's shape input {shape} holds a dim below -1 or more than one -1")
    dims = reshape_dims(x.shape, shape)
    if _prod(dims) != x.size:
        raise ValueError(f"Reshape cannot make shape {list(shape)} from {list(x.shape)} ({x.size} elements)")
    return x.reshape(dims).copy(), np.array(x.shape, dtype=np.int64)


def resize_like(x, like):
    return x.reshape(np.shape(like)).copy()


def flatten(x, axis=1):
    return as_2d(x, axis).copy()


def expand_dims(x, dims=()):
    out = x
    for d in sorted(set(dims)):  # (a repeated axis counts once, as in Caffe2)
        out = np.expand_dims(out, d)
    return out.copy()


def squeeze(x, dims=()):
    return np.squeeze(x, axis=tuple(set(dims))).copy() if dims else x.copy()


def slice_bounds(shape, starts, ends):
    """Caffe2's Slice: a negative index i means dim + 1 + i (so end -1 is the dim's end)."""
    out = []
    for k, dim in enumerate(shape):
        if k >= len(starts):
            out.append(slice(None))
            continue
        s, e = int(starts[k]), int(ends[k])
        s = dim + 1 + s if s < 0 else s
        e = dim + 1 + e if e < 0 else e
        out.append(slice(s, e))
    return tuple(out)


def slice_(x, starts=(), ends=()):
    return x[slice_bounds(x.shape, starts, ends)].copy()


def slice_grad(x, dy, starts=(), ends=()):
    dx = np.zeros_like(x)
    dx[slice_bounds(x.shape, starts, ends)] = dy
    return dx


def _gathered(name, data, indices, a, wrap):
    """Gather's ids along axis ``a``, checked."""
    what = "DATA's {n} rows" if a == 0 else f"the {{n}} entries of DATA's axis {a}"
    return checked(name, indices, data.shape[a], wrap=wrap, what=what)


def gather(data, indices, axis=0, match_outer=0, wrap_indices=-1):
    return _gather("Gather", data, indices, axis, match_outer, wraps(axis, wrap_indices))


def _gather(name, data, indices, axis, match_outer, wrap):
    a = axis % data.ndim
    outer = data.shape[:a]
    n = _prod(outer)
    out_shape = outer + (indices.shape[a:] if match_outer else indices.shape) + data.shape[a + 1:]
    if not _prod(out_shape):  # (nothing moves, nothing is checked: an empty batch, as in Caffe2)
        return np.zeros(out_shape, data.dtype)
    idx = _gathered(name, data, indices, a, wrap)
    if a == 0 and not match_outer:
        return data[idx]
    if not match_outer:
        return np.take(data, idx, axis=a)
    d2, i2 = data.reshape((n,) + data.shape[a:]), idx.reshape((n,) + idx.shape[a:])
    out = np.empty((n,) + idx.shape[a:] + data.shape[a + 1:], data.dtype)
    for k in range(n):
        out[k] = d2[k][i2[k]]
    return out.reshape(out_shape)


def batch_gather(data, indices, match_outer=0):
    """Gather along axis 1, never wrapping a negative id (Caffe2's BatchGather takes no
    ``axis`` and no ``wrap_indices``)."""
    return _gather("BatchGather", data, indices, 1, match_outer, False)


def batch_gather_grad(data, indices, dy, axis=1, match_outer=0, wrap_indices=0):
    """dDATA of a gather along ``axis``: dY added where each element came from (repeats add
    up); ``wrap_indices``: the forward Gather took a negative id as counting from the end."""
    a = axis % data.ndim
    out = np.zeros_like(data)
    if not dy.size or not data.size:  # (nothing moves, nothing is checked, as in Caffe2)
        return out
    idx = _gathered("BatchGatherGradient", data, indices, a, bool(wrap_indices))
    if not match_outer:
        np.add.at(out, (slice(None),) * a + (idx,), dy)
        return out
    n = _prod(data.shape[:a])
    o2, i2 = out.reshape((n,) + data.shape[a:]), idx.reshape((n,) + idx.shape[a:])
    d2 = dy.reshape((n,) + dy.shape[a:])
    for k in range(n):
        np.add.at(o2[k], i2[k], d2[k])
    return out


def sparse_to_dense(indices, values, data=None, output_first_dim=0, wrap_indices=0):
    """Zeros with VALUES' shape but for the first dim (DATA's first dim; without DATA,
    ``output_first_dim``, or else the largest id + 1); the rows of VALUES added at the
    ids (repeats add up). ``wrap_indices``: a negative id counts from the end (a sparse
    gradient of a Gather made dense)."""
    flat = np.asarray(indices).astype(np.int64).reshape(-1)
    if data is not None:
        rows = data.shape[0]
    elif output_first_dim > 0:
        rows = int(output_first_dim)
    else:
        rows = int(flat.max()) + 1 if flat.size and flat.max() >= 0 else 0
    idx = checked("SparseToDense", flat, rows, wrap=bool(wrap_indices), what="the output's {n} rows")
    shape = (rows,) + values.shape[indices.ndim:]
    check_size("SparseToDense", shape, values.dtype)
    dense = np.zeros(shape, dtype=values.dtype)
    add_rows(dense, idx, values.reshape((idx.size,) + shape[1:]))
    return dense


# --- reductions
def sum_elements(x, average=0):
    s = x.sum(dtype=x.dtype)
    return (s / x.dtype.type(x.size) if average else s)[()]


def sum_elements_grad(x, dy, average=0):
    g = dy.reshape(()) / x.dtype.type(x.size) if average else dy.reshape(())
    return np.full(x.shape, g, dtype=x.dtype)


def _axes(x, axes):
    return tuple(range(x.ndim)) if axes is None or len(axes) == 0 else tuple(a % x.ndim for a in axes)


def reduce_sum(x, axes=None, keepdims=1):
    out = x.sum(axis=_axes(x, axes), keepdims=bool(keepdims))
    return out.astype(x.dtype, copy=False)[()]


def reduce_mean(x, axes=None, keepdims=1):
    out = x.mean(axis=_axes(x, axes), keepdims=bool(keepdims))
    return out.astype(x.dtype, copy=False)[()]


def reduce_sum_grad(dy, x, axes=None, keepdims=1):
    kept = np.asarray(dy).reshape([1 if k in _axes(x, axes) else d for k, d in enumerate(x.shape)])
    return np.broadcast_to(kept, x.shape).astype(x.dtype)


def reduce_mean_grad(dy, x, axes=None, keepdims=1):
    n = _prod(x.shape[k] for k in _axes(x, axes))
    return reduce_sum_grad(dy, x, axes, keepdims) / x.dtype.type(max(n, 1))


def row_wise_arg_max(x):
    return np.argmax(x, axis=1).astype(np.int64).reshape(-1, 1)


# --- activations
def sigmoid(x):
    return (1 / (1 + np.exp(-x))).astype(x.dtype, copy=False)


def sigmoid_grad(y, dy):
    return dy * y * (1 - y)


def tanh(x):
    return np.tanh(x)


def tanh_grad(y, dy):
    return dy * (1 - y * y)


def relu_grad(y, dy):
    """dY where Y > 0, else +0 (a NaN or inf dY too). For floats, dY's bits and-ed with a mask of
    all ones or zeros: the same values as np.where, which branches per element and is ~7x
    slower on a random sign pattern."""
    if not isinstance(dy, np.ndarray) or dy.dtype.kind != "f" or dy.ndim == 0 or np.shape(y) != dy.shape:
        return np.where(y > 0, dy, np.zeros((), dy.dtype))
    bits = np.dtype(f"i{dy.dtype.itemsize}")
    mask = np.negative(y > 0, dtype=bits)  # (True -> -1: all ones)
    return np.bitwise_and(np.ascontiguousarray(dy).view(bits), mask, out=mask).view(dy.dtype)


def softmax(x, axis=1):
    x2 = as_2d(x, axis)
    if x2.size == 0:  # (no rows, or rows of nothing: nothing to normalize)
        return x.copy()
    e = np.exp(x2 - x2.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


def softmax_grad(y, dy, axis=1):
    y2, dy2 = as_2d(y, axis), as_2d(dy, axis)
    return ((dy2 - (dy2 * y2).sum(axis=1, keepdims=True)) * y2).reshape(y.shape)


def clip(x, min=None, max=None):
    lo = -np.inf if min is None else min
    hi = np.inf if max is None else max
    return np.clip(x, x.dtype.type(lo), x.dtype.type(hi))


def clip_grad(y, dy, min=None, max=None):
    lo = -np.inf if min is None else min
    hi = np.inf if max is None else max
    return np.where((y > lo) & (y < hi), dy, np.zeros((), dy.dtype))


# --- losses and metrics
class LabelError(ValueError):
    """A label outside [0, D): no probability to pick (Caffe2 refuses it too)."""


def _label_rows(x, label):
    """(X as Caffe2's [N, D] matrix, the labels as int64 [N]), the labels checked."""
    x2 = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], _prod(x.shape[1:]))
    lab = label.reshape(-1).astype(np.int64)
    bad = (lab < 0) | (lab >= x2.shape[1])
    if bad.any():
        k = int(np.argmax(bad))
        raise LabelError(f"label {int(lab[k])} (row {k}) is outside [0, {x2.shape[1]}): "
                         f"LabelCrossEntropy picks the probability of class label[i] of each row")
    return x2, lab


def label_cross_entropy(x, label):
    x2, lab = _label_rows(x, label)
    picked = np.maximum(x2[np.arange(x2.shape[0]), lab], x.dtype.type(LOG_THRESHOLD))
    return -np.log(picked)


def label_cross_entropy_grad(x, label, dy):
    x2, lab = _label_rows(x, label)
    rows = np.arange(x2.shape[0])
    dx = np.zeros_like(x2)
    dx[rows, lab] = -dy / np.maximum(x2[rows, lab], x.dtype.type(LOG_THRESHOLD))
    return dx.reshape(x.shape)


def _loss_weights(n, weights, dtype):
    return np.ones(n, dtype) if weights is None else weights.reshape(n).astype(dtype)


def softmax_with_loss(logits, labels, weights=None, label_prob=0, axis=1, scale=1.0):
    """(softmax, average loss); labels are class indices, or distributions if label_prob."""
    p = softmax(logits, axis)
    p2 = as_2d(p, axis)
    n = p2.shape[0]
    w = _loss_weights(n, weights, p2.dtype)
    if label_prob:
        per_row = -(labels.reshape(p2.shape) * np.log(np.maximum(p2, LOG_THRESHOLD))).sum(axis=1)
    else:
        picked = p2[np.arange(n), labels.reshape(n).astype(np.int64)]
        per_row = -np.log(np.maximum(picked, p2.dtype.type(LOG_THRESHOLD)))
    total = w.sum()
    loss = (per_row * w).sum() / total * p2.dtype.type(scale) if total > 0 else p2.dtype.type(0)
    return p, np.asarray(loss, dtype=p2.dtype)[()]


def softmax_with_loss_grad(logits, labels, *rest, label_prob=0, axis=1, scale=1.0):
    """d logits; ``rest`` is (weights, softmax, d_loss) or (softmax, d_loss)."""
    weights = rest[0] if len(rest) == 3 else None
    p, dloss = rest[-2], rest[-1]
    p2 = as_2d(p, axis)
    n = p2.shape[0]
    w = _loss_weights(n, weights, p2.dtype)
    if label_prob:
        target = labels.reshape(p2.shape).astype(p2.dtype)
    else:  # (one-hot rows, made in place: np.eye of the classes was classes^2, 10 GB for 50000)
        target = np.zeros_like(p2)
        target[np.arange(n), labels.reshape(n).astype(np.int64)] = 1
    total = w.sum()
    coef = np.asarray(dloss).reshape(()) * p2.dtype.type(scale) / total if total > 0 else 0
    return ((p2 - target) * w[:, None] * coef).astype(p2.dtype).reshape(logits.shape)


def squared_l2_distance(x, y):
    d = (x - y).reshape(x.shape[0] if x.ndim else 1, -1)
    return (0.5 * (d * d).sum(axis=1)).astype(x.dtype)


def squared_l2_distance_grad(x, y, dd):
    diff = x - y
    g = diff * dd.reshape((-1,) + (1,) * (x.ndim - 1)) if x.ndim else diff * dd
    return g, -g


def averaged_loss(x):
    return np.asarray(x.mean(), dtype=x.dtype)[()]


def averaged_loss_grad(x, dy):
    return np.full(x.shape, np.asarray(dy).reshape(()) / x.size, dtype=x.dtype)


def accuracy(pred, label, top_k=1):
    """Fraction of rows whose label is among the top_k scores (ties go to the lower index)."""
    n = pred.shape[0]
    lab = label.reshape(n).astype(np.int64)
    score = pred[np.arange(n), lab][:, None]
    cols = np.arange(pred.shape[1])[None, :]
    better = (pred > score) | ((pred == score) & (cols < lab[:, None]))
    return np.float32((better.sum(axis=1) < top_k).sum() / n)


# --- optimizer arithmetic
def iter_(it):
    return it + np.ones((), it.dtype)


def learning_rate(it, base_lr=None, policy=None, gamma=0.0, stepsize=0, power=0.0, **a):
    """Caffe2's arithmetic: float32 throughout, iter / stepsize in integers (truncated)."""
    t = int(np.asarray(it).reshape(-1)[0])
    f32 = np.float32
    if policy == "fixed":
        f = f32(1)
    elif policy == "step":
        q = abs(t) // int(stepsize)
        f = f32(gamma) ** f32(-q if t < 0 else q)
    elif policy == "exp":
        f = f32(gamma) ** f32(t)
    elif policy == "inv":
        f = (f32(1) + f32(gamma) * f32(t)) ** -f32(power)
    else:
        f = f32(_multiplier(policy, t, gamma, power, a))
    return f32(f32(base_lr) * f)


def _warmup(t, start, n):
    return start + (1.0 - start) * t / n if t < n else 1.0


def _multiplier(policy, t, gamma, power, a):
    """The multiplier of the policies past Caffe2's first four (their arguments in ``a``)."""
    if policy == "poly":
        return (1.0 - t / float(a["max_iter"])) ** float(power)
    if policy == "linearWarmup":
        return _warmup(t, float(a["start_multiplier"]), int(a["num_iter"]))
    if policy == "constantWarmup":
        return float(a["multiplier"]) if t < int(a["num_iter"]) else 1.0
    if policy == "alter":
        on, off = int(a["active_period"]), int(a["inactive_period"])
        r = t % (on + off)
        return float(r < on) if a["active_first"] else float(r >= off)
    if policy == "hill":
        n = int(a["num_iter"])
        if t < n:
            return _warmup(t, float(a["start_multiplier"]), n)
        return max(float(a["end_multiplier"]), (1.0 + float(gamma) * (t - n)) ** -float(power))
    if policy == "slope":
        n1, n2 = int(a["num_iter_1"]), int(a["num_iter_2"])
        m1, m2 = float(a["multiplier_1"]), float(a["multiplier_2"])
        return m1 if t <= n1 else m2 if t >= n2 else m1 + (m2 - m1) * (t - n1) / (n2 - n1)
    return float(a["multiplier_1"]) if t < int(a["num_iter"]) else float(a["multiplier_2"])  # gate


def weighted_sum(*xs):
    out = xs[0] * xs[1].reshape(())
    for k in range(2, len(xs), 2):
        out = out + xs[k] * xs[k + 1].reshape(())
    return out.astype(xs[0].dtype, copy=False)


def weighted_sum_grad(dy, *pairs, grad_on_w=0):
    xs, ws = pairs[0::2], pairs[1::2]
    dxs = tuple((dy * w.reshape(())).astype(x.dtype, copy=False) for x, w in zip(xs, ws))
    if not grad_on_w:
        return dxs if len(dxs) > 1 else dxs[0]
    dws = tuple(np.array([np.sum(dy * x, dtype=np.float64)], dtype=w.dtype).reshape(w.shape) for x, w in zip(xs, ws))
    return dxs + dws


def momentum_sgd_update(g, m, lr, p, momentum=0.0, nesterov=0):
    """(grad out, moment out, param out): Caffe2's MomentumSGDUpdate."""
    lr = lr.reshape(())
    mu = g.dtype.type(momentum)
    if not nesterov:
        adjusted = lr * g + mu * m
        return adjusted, adjusted, p - adjusted
    new_m = mu * m + lr * g
    adjusted = (1 + mu) * new_m - mu * m
    return adjusted, new_m, p - adjusted


def float_moment(p, m):
    """Moment ``m`` in the parameter's float type (a copy; Caffe2's Adagrads take integer
    zeros for a moment: see ir/ops/optim.py)."""
    return m.astype(p.dtype) if m.dtype != p.dtype and m.dtype.kind in "iu" else m


def adagrad(p, m, g, lr, epsilon=1e-5, decay=1.0, weight_decay=0.0, n_results=2):
    """(param out, moment out[, effective learning rate[, update]]); ``weight_decay`` adds
    weight_decay * param to the gradient first."""
    m = float_moment(p, m)
    if weight_decay:
        g = (g + g.dtype.type(weight_decay) * p).astype(g.dtype)
    new_m = m * g.dtype.type(decay) + g * g
    if n_results == 2:
        return p + lr.reshape(()) * g / (np.sqrt(new_m) + g.dtype.type(epsilon)), new_m
    effective = lr.reshape(()) / (np.sqrt(new_m) + g.dtype.type(epsilon))
    update = effective * g
    return (p + update, new_m, effective, update)[:n_results]


def adam(p, m1, m2, g, lr, it, beta1=0.9, beta2=0.999, epsilon=1e-5, n_out=3):
    """(param out, first moment out, second moment out[, the step before the learning rate]),
    in Caffe2's order of operations: the bias correction in double from the float betas,
    t = iter + 1."""
    dt = g.dtype.type
    b1, b2 = dt(beta1), dt(beta2)
    t = float(np.asarray(it).reshape(-1)[0]) + 1
    correction = dt(np.sqrt(1.0 - float(b2) ** t) / (1.0 - float(b1) ** t))
    n1 = m1 * b1 + g * (1 - b1)
    n2 = m2 * b2 + g * g * (1 - b2)
    if n_out == 4:  # (Caffe2 then adds lr times the step it returns)
        step = correction * n1 / (np.sqrt(n2) + dt(epsilon))
        return p + lr.reshape(()) * step, n1, n2, step
    return p + lr.reshape(()) * correction * n1 / (np.sqrt(n2) + dt(epsilon)), n1, n2


def dropout(x, mask_draw, ratio=0.5, is_test=0):
    """(y, mask) given uniform draws in [0, 1) (training: keep where draw >= ratio)."""
    if is_test or ratio == 0:
        return x.copy(), np.ones(x.shape, dtype=np.bool_)
    mask = mask_draw >= ratio
    return (x * mask * x.dtype.type(1.0 / (1.0 - ratio))).astype(x.dtype), mask


def dropout_grad(dy, mask, ratio=0.5, is_test=0):
    if is_test or ratio == 0:
        return dy.copy()
    return (dy * mask * dy.dtype.type(1.0 / (1.0 - ratio))).astype(dy.dtype)


def sum_reduce_like(dy, like, broadcast=0, axis=-1):
    """dy summed over the dims broadcasting added or stretched to reach it from like's shape."""
    shape = np.shape(like)
    if broadcast:  # Caffe2's legacy rule: like's core dims line up with dy's at axis
        aligned = legacy_align(dy, np.empty(shape, np.int8), int(axis)).shape
        return sum_reduce_like(dy, np.empty(aligned, np.int8)).reshape(shape)
    dy = np.asarray(dy)
    lead = dy.ndim - len(shape)
    out = dy.sum(axis=tuple(range(lead))) if lead > 0 else dy
    stretched = tuple(k for k, d in enumerate(shape) if d == 1 and out.shape[k] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True)
    return np.asarray(out, dtype=dy.dtype).reshape(shape)


# --- sparse updates (VALUES[i] is the gradient of row INDICES[i])
def _occurrences(idx):
    """Positions of idx grouped in rounds: round k holds the k-th occurrence of each row
    (within a round every row appears once, so a round updates with one numpy call). Ids
    without a repeat (the common batch) are one round, every position; with a few repeats,
    the first occurrences are one round and the repeats' positions, few, are grouped again."""
    if idx.size == 0:
        return []
    order = np.argsort(idx, kind="stable")
    ordered = idx[order]
    again = ordered[1:] == ordered[:-1]  # (an occurrence after the first, in sorted order)
    if not again.any():
        return [slice(None)]
    rounds = []
    while order.size:
        first = np.concatenate(([True], ~again))
        rounds.append(order[first])
        order, ordered = order[~first], ordered[~first]  # (still sorted, still stable)
        again = ordered[1:] == ordered[:-1]
    return rounds


# The sparse updates write into their parameter (and moment) arrays when ``inplace``: the
# caller promises nothing else holds them (backends/interp/kernels_nn.py checks).


def scatter_weighted_sum(data, w0, indices, *pairs, inplace=False):
    idx = updated_rows("ScatterWeightedSum", indices, data)
    out = data if inplace else data.copy()
    scale = w0.reshape(())
    if scale != 1:
        rows, counts = np.unique(idx, return_counts=True)
        out[rows] *= (scale ** counts.astype(data.dtype)).reshape((-1,) + (1,) * (data.ndim - 1))
    for k in range(0, len(pairs), 2):
        slices = pairs[k].reshape((idx.size,) + data.shape[1:])
        add_rows(out, idx, slices * pairs[k + 1].reshape(()))
    return out


def add_rows(out, idx, rows):
    """out[idx[i]] += rows[i] for i = 0, 1, ... in turn, as Caffe2 adds them (a repeated row
    gets each of its rows in order). One indexed add for all of them, which leaves a repeated
    id with only its last row added; those ids (few in a batch drawn from a large table) are
    then set back and get all their rows in order from np.add.at, which adds one row at a
    time (~4x slower per row than an indexed add, and right with repeats)."""
    if idx.size == 0:
        return
    before = np.take(out, idx, axis=0)
    order = np.argsort(idx, kind="stable")
    ordered = idx[order]
    again = ordered[1:] == ordered[:-1]  # (the same id as the one before, in sorted order)
    out[idx] = before + rows
    if not again.any():
        return
    shared = np.zeros(idx.size, dtype=bool)  # (in sorted order: an id that repeats)
    shared[1:] |= again
    shared[:-1] |= again
    at = np.sort(order[shared])  # (their positions, in turn)
    out[idx[at]] = before[at]
    np.add.at(out, idx[at], rows[at])


def sparse_adagrad(p, m, indices, g, lr, epsilon=1e-5, weight_decay=0.0, inplace=False):
    m = float_moment(p, m)
    idx = updated_rows("SparseAdagrad", indices, p)
    g = g.reshape((idx.size,) + p.shape[1:])
    if not inplace:
        p, m = p.copy(), m.copy()
    lr, eps, wd = lr.reshape(()), p.dtype.type(epsilon), p.dtype.type(weight_decay)
    for at in _occurrences(idx):
        rows, gi = idx[at], g[at]
        if weight_decay:
            gi = gi + wd * p[rows]  # (the row as this occurrence finds it)
        m[rows] += gi * gi
        p[rows] += lr * gi / (np.sqrt(m[rows]) + eps)
    return p, m


def row_wise_sparse_adagrad(p, m, indices, g, lr, counter=None, epsilon=1e-5, weight_decay=0.0,
                            counter_halflife=-1, inplace=False):
    m = float_moment(p, m)
    idx = updated_rows("RowWiseSparseAdagrad", indices, p)
    g = g.reshape((idx.size, int(np.prod(p.shape[1:], dtype=np.int64))))  # (an empty batch has no -1 to infer)
    if not inplace:
        p, m = p.copy(), m.copy()
    lr, eps, wd = lr.reshape(()), p.dtype.type(epsilon), p.dtype.type(weight_decay)
    flat = p.reshape(p.shape[0], int(np.prod(p.shape[1:], dtype=np.int64)))
    for at in _occurrences(idx):
        rows, gi = idx[at], g[at]
        if weight_decay:
            if counter is not None and counter_halflife > 0:
                # (a row updated seldom decays more per update: as often as it would have)
                c = counter.reshape(-1)[rows]
                freq = np.where(c > 0, counter_halflife / np.where(c > 0, c, 1), 1.0)
                gi = gi + (wd * freq.astype(p.dtype))[:, None] * flat[rows]
            else:
                gi = gi + wd * flat[rows]
        m[rows] += np.mean(gi * gi, axis=1, dtype=p.dtype)
        flat[rows] += lr * gi / (np.sqrt(m[rows])[:, None] + eps)
    return p, m


def row_wise_counter(prev, counter, indices, it, counter_halflife=-1, inplace=False):
    """(prev_iter, counter) after the rows at ``indices`` were updated at iteration ``it``."""
    idx = updated_rows("RowWiseCounter", indices, prev)
    if not inplace:
        prev, counter = prev.copy(), counter.copy()
    if counter_halflife <= 0:  # (Caffe2's counter counts only with a half-life)
        return prev, counter
    now = int(np.asarray(it).reshape(-1)[0])
    rho = np.log(2.0) / counter_halflife
    for at in _occurrences(idx):  # (a row listed twice is counted twice, the second time at once)
        rows = idx[at]
        counter[rows] = 1.0 + counter[rows] * np.exp(-rho * np.maximum(now - prev[rows], 0))
        prev[rows] = np.maximum(prev[rows], now)  # (an earlier iteration does not move it back)
    return prev, counter


def _softplus(x):
    """log(1 + exp(x)), without overflow."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _xent(x, t, log_D_trick=0, unjoined_lr_loss=0):
    """Per element: the loss and its derivative in x."""
    sig = 1 / (1 + np.exp(-x))
    if log_D_trick:  # -(2t - 1) log sigmoid(x)
        return (2 * t - 1) * _softplus(-x), -(2 * t - 1) * (1 - sig)
    if unjoined_lr_loss:
        return (1 - t) * _softplus(x) - t * x, (1 - t) * sig - t
    return _softplus(x) - x * t, sig - t


def sigmoid_cross_entropy_with_logits(x, t, log_D_trick=0, unjoined_lr_loss=0, w=None):
    per = _xent(x, t, log_D_trick, unjoined_lr_loss)[0]
    return (per if w is None else w * per).mean(axis=-1).astype(x.dtype)


def sigmoid_cross_entropy_with_logits_grad(dy, x, t, log_D_trick=0, unjoined_lr_loss=0, w=None):
    slope = _xent(x, t, log_D_trick, unjoined_lr_loss)[1]
    return (dy[..., None] * (slope if w is None else w * slope) / x.shape[-1]).astype(x.dtype)


def weighted_sigmoid_cross_entropy_with_logits(x, t, w):
    return sigmoid_cross_entropy_with_logits(x, t, w=w)


def weighted_sigmoid_cross_entropy_with_logits_grad(dy, x, t, w):
    return sigmoid_cross_entropy_with_logits_grad(dy, x, t, w=w)


def make_two_class(p):
    return np.stack([1 - p, p], axis=-1).astype(p.dtype)


def make_two_class_grad(dy):
    return (dy[..., 1] - dy[..., 0]).astype(dy.dtype)


def pick_grad(y, dy, *xs):
    """Max's and Min's gradient: dy where an input equals the output (ties: every such input)."""
    zero = np.zeros((), dy.dtype)
    out = tuple(np.where(x == y, dy, zero).astype(dy.dtype, copy=False) for x in xs)
    return out if len(out) > 1 else out[0]


def momentum_sgd(g, m, lr, momentum=0.0, nesterov=0):
    mu, lr = g.dtype.type(momentum), lr.reshape(())
    new_m = mu * m + lr * g
    adjusted = (1 + mu) * new_m - mu * m if nesterov else new_m
    return adjusted.astype(g.dtype), new_m.astype(g.dtype)


def rms_prop(g, ms, mom, lr, decay=0.9, momentum=0.0, epsilon=1e-5):
    dt = g.dtype.type
    new_ms = ms + (1 - dt(decay)) * (g * g - ms)
    new_mom = dt(momentum) * mom + lr.reshape(()) * g / np.sqrt(dt(epsilon) + new_ms)
    return new_mom.astype(g.dtype), new_ms.astype(g.dtype), new_mom.astype(g.dtype)


def adadelta(p, ms, delta, g, lr, epsilon=1e-5, decay=0.95):
    dt = g.dtype.type
    d, eps = dt(decay), dt(epsilon)
    new_ms = d * ms + (1 - d) * g * g
    update = np.sqrt(delta + eps) / np.sqrt(new_ms + eps) * g
    new_delta = d * delta + (1 - d) * update * update
    return (p + lr.reshape(()) * update).astype(p.dtype), new_ms.astype(g.dtype), new_delta.astype(g.dtype)


def ftrl(w, nz, g, alpha=0.01, beta=1e-4, lambda1=0.0, lambda2=0.0):
    n, z = nz[..., 0], nz[..., 1]
    new_n = n + g * g
    sigma = (np.sqrt(new_n) - np.sqrt(n)) / alpha
    new_z = z + g - sigma * w
    new_w = np.where(np.abs(new_z) <= lambda1, 0,
                     (np.sign(new_z) * lambda1 - new_z) / ((beta + np.sqrt(new_n)) / alpha + lambda2))
    return new_w.astype(w.dtype), np.stack([new_n, new_z], axis=-1).astype(nz.dtype)


def gftrl(w, nz, g, alpha=0.01, beta=1e-4, lambda1=0.0, lambda2=0.0):
    """Group-lasso FTRL: the parameter as [M, N] (M = dims[0]), each column a group of M."""
    n, z = nz[..., 0], nz[..., 1]
    new_n = n + g * g
    sigma = (np.sqrt(new_n) - np.sqrt(n)) / alpha
    new_z = z + g - sigma * w
    m = w.shape[0] if w.ndim else 1
    z2 = new_z.reshape(m, -1)
    norm = np.sqrt(np.sum(z2 * z2, axis=0, dtype=np.float64))  # (each column's)
    threshold = lambda1 * np.sqrt(m)
    shrink = np.where(norm > threshold, 1 - threshold / np.where(norm > 0, norm, 1), 0.0)
    step = np.where(shrink > 0, (-z2 / ((beta + np.sqrt(new_n.reshape(m, -1))) / alpha + lambda2)) * shrink, 0.0)
    return step.reshape(w.shape).astype(w.dtype), np.stack([new_n, new_z], axis=-1).astype(nz.dtype)


def sparse_momentum_sgd_update(g, m, lr, p, indices, momentum=0.0, nesterov=0, inplace=False):
    idx = updated_rows("SparseMomentumSGDUpdate", indices, p)
    rows = g.reshape((idx.size,) + p.shape[1:])
    if not inplace:
        m, p = m.copy(), p.copy()
    out = np.empty_like(rows)
    mu, lr = p.dtype.type(momentum), lr.reshape(())
    for at in _occurrences(idx):
        r, gi = idx[at], rows[at]
        old = m[r]
        new = mu * old + lr * gi
        m[r] = new
        step = (1 + mu) * new - mu * old if nesterov else new
        p[r] -= step
        out[at] = step
    return out.reshape(g.shape), m, p


def sparse_adam(p, m1, m2, indices, g, lr, it, beta1=0.9, beta2=0.999, epsilon=1e-5, enableRAdam=0, inplace=False,
                row_wise=False, **_):
    """SparseAdam; ``row_wise`` (RowWiseSparseAdam): one second moment per row, from the mean
    of the row's squared gradient. ``enableRAdam`` (SparseAdam only, as in Caffe2): RAdam's
    rectified step, or while the second moment's variance is not yet tractable (rho_t <= 5)
    the first moment's bias-corrected value alone (no denominator)."""
    idx = updated_rows("RowWiseSparseAdam" if row_wise else "SparseAdam", indices, p)
    rows = g.reshape((idx.size,) + p.shape[1:])
    if not inplace:
        p, m1, m2 = p.copy(), m1.copy(), m2.copy()
    dt = p.dtype.type
    b1, b2 = dt(beta1), dt(beta2)
    t = float(np.asarray(it).reshape(-1)[0]) + 1
    correction = dt(np.sqrt(1.0 - float(b2) ** t) / (1.0 - float(b1) ** t))
    rectifier = _radam_rectifier(float(b2), t) if enableRAdam and not row_wise else 1.0
    if rectifier is None:  # (RAdam's early steps: momentum SGD with a bias-corrected moment)
        unrectified = dt(1.0 / (1.0 - float(b1) ** t))
    elif enableRAdam and not row_wise:
        correction = dt(float(correction) * rectifier)
    step = lr.reshape(()) * correction
    steps = np.empty_like(rows)  # (each grad row's step before the learning rate: a 4th output)
    for at in _occurrences(idx):
        r, gi = idx[at], rows[at]
        m1[r] = b1 * m1[r] + (1 - b1) * gi
        m2[r] = b2 * m2[r] + (1 - b2) * (_row_means(gi * gi) if row_wise else gi * gi)
        if rectifier is None:
            steps[at] = unrectified * m1[r]
            p[r] += lr.reshape(()) * steps[at]
            continue
        denom = np.sqrt(m2[r]) + dt(epsilon)
        if row_wise:  # (one per row: along the rows' other axes)
            denom = denom.reshape(denom.shape + (1,) * (p.ndim - 1))
        steps[at] = correction * m1[r] / denom
        p[r] += step * m1[r] / denom
    return p, m1, m2, steps.reshape(g.shape)


def _radam_rectifier(beta2, t):
    """RAdam's rectification r_t at step t, or None while rho_t <= 5 (rho: the length of the
    second moment's approximated simple moving average; rho_inf = 2 / (1 - beta2) - 1)."""
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    b2t = beta2 ** t
    rho = rho_inf - 2.0 * t * b2t / (1.0 - b2t)
    if not rho > 5.0:
        return None
    return math.sqrt((rho - 4.0) * (rho - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho))


def smart_decay_sparse_adam(p, m1, m2, last_seen, indices, g, lr, it, beta1=0.9, beta2=0.999, epsilon=1e-5,
                            inplace=False):
    """SmartDecaySparseAdam: row r, last updated at step last_seen[r], catches up the k
    steps since in closed form: m2 = beta2^k m2 + (1 - beta2) g^2; m1 decays k times and
    takes the gradient at the last, param moving by each of those k values of m1."""
    idx = updated_rows("SmartDecaySparseAdam", indices, p)
    rows = g.reshape((idx.size,) + p.shape[1:])
    if not inplace:
        p, m1, m2, last_seen = p.copy(), m1.copy(), m2.copy(), last_seen.copy()
    dt = p.dtype.type
    t = int(np.asarray(it).reshape(-1)[0]) + 1
    lr = lr.reshape(())
    effective = np.empty_like(rows)
    shape = (-1,) + (1,) * (p.ndim - 1)
    for at in _occurrences(idx):
        r, gi = idx[at], rows[at]
        k = (t - last_seen[r]).astype(np.float64)
        b1k = np.power(float(beta1), k)
        b2k = np.power(dt(beta2), k.astype(p.dtype))  # (in the parameter's precision, as Caffe2's)
        # (beta1 + ... + beta1^k: the m1 factors of the k steps; a row met again in the same
        # batch (k = 0) takes a step with its new m1, as Caffe2's kernel does: factor 1)
        total = k if beta1 == 1 else beta1 * (1 - b1k) / (1 - beta1)
        total = np.where(k == 0, 1.0, total)
        m2[r] = (b2k.reshape(shape) * m2[r] + (1 - dt(beta2)) * gi * gi).astype(p.dtype)
        denom = np.sqrt(m2[r]) + dt(epsilon)
        p[r] += (lr * (m1[r] * total.astype(p.dtype).reshape(shape) + (1 - dt(beta1)) * gi) / denom).astype(p.dtype)
        m1[r] = (b1k.reshape(shape) * m1[r] + (1 - dt(beta1)) * gi).astype(p.dtype)
        effective[at] = m1[r] / denom
        last_seen[r] = t
    return p, m1, m2, last_seen, effective.reshape(g.shape)


def _row_means(x):
    """The mean of each row of ``x`` (rows along the first axis)."""
    return x.reshape(x.shape[0], -1).mean(axis=1, dtype=x.dtype) if x.ndim > 1 else x


def row_wise_sparse_adam(*xs, **kw):
    return sparse_adam(*xs, row_wise=True, **kw)


def _row_by_row(name, dense, arrays, indices, g, inplace, *args):
    """``dense``'s update (the arrays' rows, then the gradient rows, then ``args``) applied to
    each indexed row of ``arrays``, a repeated row once per occurrence, in order."""
    idx = updated_rows(name, indices, arrays[0])
    rows = g.reshape((idx.size,) + arrays[0].shape[1:])
    if not inplace:
        arrays = [a.copy() for a in arrays]
    for at in _occurrences(idx):
        r = idx[at]
        for a, new in zip(arrays, dense(*(a[r] for a in arrays), rows[at], *args)):
            a[r] = new
    return tuple(arrays)


def sparse_adadelta(p, ms, delta, indices, g, lr, epsilon=1e-5, decay=0.95, inplace=False, **_):
    """Adadelta's update of each indexed row, a repeated row once per occurrence, in order."""
    return _row_by_row("SparseAdadelta", adadelta, [p, ms, delta], indices, g, inplace, lr, epsilon, decay)


def sparse_ftrl(w, nz, indices, g, alpha=0.01, beta=1e-4, lambda1=0.0, lambda2=0.0, inplace=False, **_):
    """FTRL's update of each indexed row, a repeated row once per occurrence, in order."""
    return _row_by_row("SparseFtrl", ftrl, [w, nz], indices, g, inplace, alpha, beta, lambda1, lambda2)


def abs_grad(x, dy):
    return (np.sign(x) * dy).astype(dy.dtype, copy=False)


def cross_entropy(x, t):
    eps = 1e-20  # (Caffe2 clamps the probabilities at 1e-20 before the log)
    return (-(t * np.log(np.maximum(x, eps))).reshape(x.shape[0], -1).sum(axis=1)).astype(x.dtype)


def cross_entropy_grad(x, t, dy):
    eps = 1e-20
    return (-dy.reshape((-1,) + (1,) * (x.ndim - 1)) * t / np.maximum(x, eps)).astype(x.dtype)
