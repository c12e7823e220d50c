"""The xla backend's kernels: jax.numpy forms of the ops the op table declares.

``@kernel("Add")`` registers a factory ``f(op)`` that returns a function of the op's
operands (jax values while a region is traced) giving its result, or a tuple of its
results. A factory that cannot give Caffe2's answer for this op (an attribute, a layout,
a dtype it does not handle) raises ``Refused`` with the reason; the region then runs
that op on the interpreter, and ``dslc compile --backend xla`` prints the reason.

The numpy semantics are in ``ir/ops`` (numeric, nn_math, conv_math, normalization); each
kernel here computes the same values, in the result's dtype from the IR's types (never
jax's own promotion rules). A kernel whose op may fail (a label outside the classes, an
integer divided by zero) states the condition with ``check``; a traced region whose
checks do not all hold returns nothing, and its ops run on the interpreter, which
reports the error at the user's line.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from dslc.ir.ops import nn_math as nm
from dslc.ir.ops import numeric as num
from dslc.ir.types import NUMPY_DTYPES, TensorType

KERNELS: dict = {}
_CHECKS: list = []  # the conditions of the region being traced (``checking``)


class Refused(Exception):
    """This op, with its attributes and types, has no xla kernel: the reason says why."""


def kernel(*names):
    def register(factory):
        for n in names:
            KERNELS[n] = factory
        return factory
    return register


def check(ok) -> None:
    """Record a condition the interpreter's kernel would raise an error without."""
    _CHECKS.append(jnp.all(ok))


class checking:
    """Collect the ``check``s of a region while it is traced (``with checking() as c``)."""

    def __enter__(self):
        self.start = len(_CHECKS)
        return self

    def all(self):
        got = _CHECKS[self.start:]
        return jnp.all(jnp.stack(got)) if got else jnp.bool_(True)

    def __exit__(self, *exc):
        del _CHECKS[self.start:]


def dtype(v):
    """The numpy dtype of IR value ``v`` (its type must be a known tensor type)."""
    return np.dtype(NUMPY_DTYPES[v.type.dtype])


def shape(v):
    return tuple(v.type.shape)


def static(v) -> bool:
    """Whether ``v`` is a tensor of a numeric dtype and fully known shape (what XLA traces)."""
    t = v.type
    return isinstance(t, TensorType) and t.dtype not in (None, "str", "f16") and t.shape is not None and \
        None not in t.shape


def _attr(op, name, default=None):
    v = op.attrs.get(name)
    return default if v is None else v


# ----------------------------------------------------------------------------- elementwise
def _aligned(op, a, b):
    """b as Caffe2's ``broadcast=1, axis=k`` lines it up with a (numeric.legacy_align)."""
    if not op.attrs.get("broadcast"):
        return b
    lo, hi = num.legacy_core(b.shape)
    axis = int(_attr(op, "axis", -1))
    start = a.ndim - b.ndim if axis == -1 else axis
    return b.reshape(b.shape[lo:hi] + (1,) * (a.ndim - start - hi))


def _binary(fn):
    def factory(op):
        dt = dtype(op.result)

        def run(a, b):
            return fn(jnp.asarray(a).astype(dt), _aligned(op, jnp.asarray(a), jnp.asarray(b)).astype(dt))
        return run
    return factory


kernel("Add")(_binary(jnp.add))
kernel("Sub")(_binary(jnp.subtract))
kernel("Mul")(_binary(jnp.multiply))


@kernel("Div")
def _div(op):
    dt = dtype(op.result)
    if dt.kind == "f":
        return _binary(jnp.true_divide)(op)

    def int_div(a, b):  # C++: truncating (lax.div), a zero divisor the interpreter's error
        a, b = jnp.asarray(a).astype(dt), _aligned(op, jnp.asarray(a), jnp.asarray(b)).astype(dt)
        check(b != 0)
        return lax.div(a, jnp.where(b == 0, jnp.ones((), dt), b))
    return int_div


def _unary(name, fn):
    def factory(op):
        dt = dtype(op.result)
        return lambda x: fn(jnp.asarray(x)).astype(dt)
    kernel(name)(factory)


for _n, _f in [("Negative", jnp.negative), ("Abs", jnp.abs), ("Sqr", lambda x: x * x), ("Sqrt", jnp.sqrt),
               ("Exp", jnp.exp), ("Log", jnp.log), ("Relu", lambda x: jnp.maximum(x, jnp.zeros((), x.dtype))),
               ("Copy", lambda x: x), ("StopGradient", lambda x: x),
               ("Sigmoid", lambda x: 1 / (1 + jnp.exp(-x))), ("Tanh", jnp.tanh)]:
    _unary(_n, _f)


@kernel("Scale")
def _scale(op):
    dt = dtype(op.result)
    s = dt.type(op.attrs["scale"])
    return lambda x: (x * s).astype(dt)


@kernel("Sum")
def _sum(op):
    dt = dtype(op.result)

    def run(*xs):
        out = jnp.asarray(xs[0]).astype(dt)
        for x in xs[1:]:
            out = out + x
        return out.astype(dt)
    return run


@kernel("ReluGradient")
def _relu_grad(op):
    return lambda y, dy: jnp.where(y > 0, dy, jnp.zeros((), dy.dtype))


@kernel("SigmoidGradient")
def _sigmoid_grad(op):
    return lambda y, dy: dy * y * (1 - y)


@kernel("TanhGradient")
def _tanh_grad(op):
    return lambda y, dy: dy * (1 - y * y)


@kernel("ConstantFill")
def _constant_fill(op):
    if op.attrs.get("input_as_shape"):
        raise Refused("ConstantFill with input_as_shape: its shape is a value, not a type")
    if len(op.operands) == 2:
        raise Refused("ConstantFill with a value input: the value is read when it runs")
    dt, s = dtype(op.result), shape(op.result)
    value = dt.type(op.attrs.get("value") or 0)
    return lambda *_: jnp.full(s, value, dt)


@kernel("Flatten", "FlattenToVec", "Reshape", "ExpandDims", "Squeeze")
def _reshape(op):
    s = shape(op.results[0])
    if op.name != "Reshape":
        return lambda x, *_: jnp.reshape(x, s)
    old = np.asarray(shape(op.operands[0]), np.int64)
    if len(op.results) > 1 and not static(op.results[1]):
        raise Refused("Reshape: the old shape's type is unknown")
    return lambda x, *_: (jnp.reshape(x, s), jnp.asarray(old)) if len(op.results) > 1 else jnp.reshape(x, s)


@kernel("Transpose")
def _transpose(op):
    axes = tuple(op.attrs.get("axes") or ()) or None
    return lambda x: jnp.transpose(x, axes)


# ----------------------------------------------------------------------------- products
def _prod(dims):
    return int(math.prod(dims))


def _rows(x, axis):
    return x.reshape(_prod(x.shape[:axis]), _prod(x.shape[axis:]))


def _mm(a, b, ta=False, tb=False, dt=None):
    """a (or a^T) times b (or b^T), 2-D, as one dot_general naming the contracted dims:
    jnp.dot of a ``.T`` makes XLA's CPU runtime take a path many times slower for a
    matrix-vector product (FC of AlexNet's 9216 x 4096 weights at batch 1, one thread:
    357 ms against 13.6, numpy's 13.1)."""
    return lax.dot_general(a, b, (((0 if ta else 1,), (1 if tb else 0,)), ((), ())), preferred_element_type=dt)


@kernel("FC")
def _fc(op):
    axis, axis_w, out = int(op.attrs.get("axis", 1)), int(op.attrs.get("axis_w", 1)), shape(op.result)
    dt = dtype(op.result)

    def fc(x, w, b):
        y = _mm(_rows(x, axis), _rows(w, axis_w), tb=True, dt=dt) + b
        return y.reshape(out).astype(dt)
    return fc


@kernel("FCGradient")
def _fc_grad(op):
    axis, axis_w = int(op.attrs.get("axis", 1)), int(op.attrs.get("axis_w", 1))
    with_dx = len(op.results) == 3

    def fc_grad(x, w, dy):
        x2, w2 = _rows(x, axis), _rows(w, axis_w)
        dy2 = dy.reshape(x2.shape[0], w2.shape[0])
        dw = _mm(dy2, x2, ta=True).reshape(w.shape)
        db = dy2.sum(axis=0)
        if not with_dx:
            return dw, db
        return dw, db, _mm(dy2, w2).reshape(x.shape)
    return fc_grad


@kernel("MatMul")
def _matmul(op):
    ta, tb = int(op.attrs.get("trans_a", 0)), int(op.attrs.get("trans_b", 0))
    aa, ab = int(op.attrs.get("axis_a", 1)), int(op.attrs.get("axis_b", 1))
    out = shape(op.result)

    def matmul(a, b, *_):
        a2, b2 = _rows(a, aa), _rows(b, ab)
        return _mm(a2, b2, ta, tb).reshape(out)
    return matmul


# ----------------------------------------------------------------------------- softmax and losses
LOG_THRESHOLD = 1e-20  # (nn_math's: the smallest probability -log is taken of)


def _axis2(x, axis):
    return _rows(x, axis)


@kernel("Softmax")
def _softmax(op):
    axis = int(op.attrs.get("axis", 1))

    def softmax(x):
        x2 = _axis2(x, axis)
        e = jnp.exp(x2 - x2.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)
    return softmax


@kernel("SoftmaxGradient")
def _softmax_grad(op):
    axis = int(op.attrs.get("axis", 1))

    def softmax_grad(y, dy):
        y2, dy2 = _axis2(y, axis), _axis2(dy, axis)
        return ((dy2 - (dy2 * y2).sum(axis=1, keepdims=True)) * y2).reshape(y.shape)
    return softmax_grad


def _labels(labels, n, classes):
    lab = labels.reshape(n).astype(jnp.int32)
    check((lab >= 0) & (lab < classes))
    return lab


def _picked(p2, lab):
    return jnp.take_along_axis(p2, lab[:, None], axis=1)[:, 0]


def _weights(n, rest, dt):
    return jnp.ones(n, dt) if not rest else rest[0].reshape(n).astype(dt)


def _swl_checked(op):
    if op.attrs.get("label_prob"):
        raise Refused(f"{op.name} with label_prob: the xla kernel takes class labels only")
    if len(op.operands[0].type.shape) < 2:
        raise Refused(f"{op.name} of a vector")
    return int(op.attrs.get("axis", 1)), op.attrs.get("scale", 1.0)


@kernel("SoftmaxWithLoss")
def _softmax_with_loss(op):
    axis, scale = _swl_checked(op)
    dt = dtype(op.results[0])
    sm = _softmax(op)

    def swl(logits, labels, *weights):
        p = sm(logits)
        p2 = _axis2(p, axis)
        n = p2.shape[0]
        w = _weights(n, weights, dt)
        per_row = -jnp.log(jnp.maximum(_picked(p2, _labels(labels, n, p2.shape[1])), dt.type(LOG_THRESHOLD)))
        total = w.sum()
        loss = jnp.where(total > 0, (per_row * w).sum() / total * dt.type(scale), dt.type(0))
        return p, loss.astype(dt)
    return swl


@kernel("SoftmaxWithLossGradient")
def _softmax_with_loss_grad(op):
    axis, scale = _swl_checked(op)
    dt = dtype(op.result)

    def swl_grad(logits, labels, *rest):
        weights = rest[:1] if len(rest) == 3 else ()
        p, dloss = rest[-2], rest[-1]
        p2 = _axis2(p, axis)
        n, classes = p2.shape
        w = _weights(n, weights, dt)
        target = (_labels(labels, n, classes)[:, None] == jnp.arange(classes)[None, :]).astype(dt)
        total = w.sum()
        coef = jnp.where(total > 0, jnp.reshape(dloss, ()) * dt.type(scale) / total, dt.type(0))
        return ((p2 - target) * w[:, None] * coef).astype(dt).reshape(logits.shape)
    return swl_grad


def _lce_rows(op):
    if len(op.operands[0].type.shape) not in (1, 2):
        raise Refused(f"{op.name} of rank {len(op.operands[0].type.shape)}")


@kernel("LabelCrossEntropy")
def _lce(op):
    _lce_rows(op)
    dt = dtype(op.result)

    def lce(x, label):
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        lab = _labels(label, x2.shape[0], x2.shape[1])
        return -jnp.log(jnp.maximum(_picked(x2, lab), dt.type(LOG_THRESHOLD)))
    return lce


@kernel("LabelCrossEntropyGradient")
def _lce_grad(op):
    _lce_rows(op)
    dt = dtype(op.result)

    def lce_grad(x, label, dy):
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        n, classes = x2.shape
        lab = _labels(label, n, classes)
        hot = lab[:, None] == jnp.arange(classes)[None, :]
        g = -dy.reshape(n) / jnp.maximum(_picked(x2, lab), dt.type(LOG_THRESHOLD))
        return jnp.where(hot, g[:, None], dt.type(0)).astype(dt).reshape(x.shape)
    return lce_grad


@kernel("AveragedLoss")
def _averaged_loss(op):
    dt = dtype(op.result)
    return lambda x: jnp.mean(x).astype(dt)


@kernel("AveragedLossGradient")
def _averaged_loss_grad(op):
    dt, s = dtype(op.result), shape(op.result)
    size = max(1, _prod(s))
    return lambda x, dy: jnp.full(s, jnp.reshape(dy, ()) / dt.type(size), dt) if size else jnp.zeros(s, dt)


@kernel("SquaredL2Distance")
def _sql2(op):
    dt = dtype(op.result)

    def sql2(x, y):
        d = (x - y).reshape(x.shape[0] if x.ndim else 1, -1)
        return (0.5 * (d * d).sum(axis=1)).astype(dt)
    return sql2


@kernel("SquaredL2DistanceGradient")
def _sql2_grad(op):
    def sql2_grad(x, y, dd):
        diff = x - y
        g = diff * dd.reshape((-1,) + (1,) * (x.ndim - 1)) if x.ndim else diff * dd
        return g, -g
    return sql2_grad


@kernel("Accuracy")
def _accuracy(op):
    top_k = int(op.attrs.get("top_k", 1))

    def accuracy(pred, label):
        n, classes = pred.shape
        lab = _labels(label, n, classes)
        score = _picked(pred, lab)[:, None]
        cols = jnp.arange(classes)[None, :]
        better = (pred > score) | ((pred == score) & (cols < lab[:, None]))
        return ((better.sum(axis=1) < top_k).sum().astype(jnp.float32) / jnp.float32(n)).astype(jnp.float32)
    return accuracy


# ----------------------------------------------------------------------------- optimizers
@kernel("WeightedSum")
def _weighted_sum(op):
    dt = dtype(op.result)

    def weighted_sum(*xs):
        out = xs[0] * jnp.reshape(xs[1], ())
        for k in range(2, len(xs), 2):
            out = out + xs[k] * jnp.reshape(xs[k + 1], ())
        return out.astype(dt)
    return weighted_sum


@kernel("MomentumSGDUpdate")
def _momentum_sgd_update(op):
    # (nn_math's own function: its arithmetic is the same on jax values)
    momentum, nesterov = op.attrs.get("momentum", 0.0), int(op.attrs.get("nesterov", 0))
    return lambda g, m, lr, p: nm.momentum_sgd_update(g, m, lr, p, momentum=momentum, nesterov=nesterov)


@kernel("Adam")
def _adam(op):
    dt = dtype(op.operands[0])
    b1, b2 = dt.type(op.attrs.get("beta1", 0.9)), dt.type(op.attrs.get("beta2", 0.999))
    eps = dt.type(op.attrs.get("epsilon", 1e-5))
    n_out = len(op.results)
    if n_out not in (3, 4) or len(op.operands) != 6:
        raise Refused("Adam with other than its six inputs and three or four outputs")

    def adam(p, m1, m2, g, lr, it):
        # the bias correction in double from the float betas, t = iter + 1 (nn_math.adam):
        # computed in float64 when x64 is on for the region (it reads an int64 counter)
        t = jnp.reshape(it, (-1,))[0].astype(jnp.float64) + 1
        correction = (jnp.sqrt(1.0 - jnp.float64(b2) ** t) / (1.0 - jnp.float64(b1) ** t)).astype(dt)
        n1 = m1 * b1 + g * (1 - b1)
        n2 = m2 * b2 + g * g * (1 - b2)
        lr = jnp.reshape(lr, ())
        if n_out == 4:
            step = correction * n1 / (jnp.sqrt(n2) + eps)
            return p + lr * step, n1, n2, step
        return p + lr * correction * n1 / (jnp.sqrt(n2) + eps), n1, n2
    return adam


@kernel("Iter")
def _iter(op):
    return lambda it: it + jnp.ones((), it.dtype)


@kernel("LearningRate")
def _learning_rate(op):
    policy = op.attrs.get("policy")
    if policy != "fixed":
        raise Refused(f"LearningRate policy {policy!r}: the xla kernel computes the fixed policy only")
    lr = np.float32(op.attrs["base_lr"])
    return lambda it: jnp.float32(lr)


@kernel("Dropout")
def _dropout(op):
    if not op.attrs.get("is_test") and op.attrs.get("ratio", 0.5) != 0:
        raise Refused("Dropout in training: its draws come from the workspace's random stream")
    if len(op.results) > 1:
        return lambda x: (x, jnp.ones(x.shape, jnp.bool_))
    return lambda x: x
