"""Activation functions with their gradients, one row each, with Caffe2's names and arguments.

A row declares the forward op (float, elementwise), its gradient op, and the gradient
maker linking them; ``FUNCTIONS`` holds the numpy semantics of both, which the
interpreter runs. The gradient op takes what Caffe2's takes, in Caffe2's order: the
forward's output ``Y`` or input ``X`` (or both) and ``dY``.

    LeakyRelu(X) -> Y;  dX = LeakyReluGradient(Y, dY)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import ELEMENTWISE, PURE, declare, type_error
from ..types import FLOAT_DTYPES
from .infer import binary_shape, elementwise
from .nn import floats


@dataclass(frozen=True)
class Activation:
    name: str
    doc: str              # the forward's semantics, one line
    forward: Callable     # numpy: f(x, **attrs)
    grad_inputs: tuple    # the gradient op's inputs, from "X", "Y", "dY"
    grad_doc: str
    backward: Callable    # numpy: g(*grad_inputs, **attrs) -> dX
    attrs: dict = field(default_factory=dict)
    elementwise: bool = True  # False: fusion leaves it alone (no numba scalar form)


def _pow(x, e=None, exponent=1.0, broadcast=0, axis=-1):
    if e is None:
        return np.power(x, exponent)
    if broadcast:  # (Caffe2's legacy broadcast: E's dims line up from ``axis``)
        from .numeric import legacy_align
        e = legacy_align(x, e, int(axis))
    return np.power(x, e)


def _where(cond, a, b):
    return np.where(cond, a, b)


def _erf(x):
    from scipy.special import erf
    return erf(x)


_GELU_A, _GELU_B = np.sqrt(2 / np.pi), 0.044715  # (Caffe2's fast_gelu: the tanh approximation)


def _gelu(x, fast):
    if fast:
        return x * (1 + np.tanh(_GELU_A * (x + _GELU_B * x ** 3))) / 2
    return x * (1 + _erf(x / np.sqrt(2))) / 2


def _gelu_slope(x, fast):
    if fast:
        t = np.tanh(_GELU_A * (x + _GELU_B * x ** 3))
        return (1 + t) / 2 + x * (1 - t * t) * _GELU_A * (1 + 3 * _GELU_B * x * x) / 2
    return (1 + _erf(x / np.sqrt(2))) / 2 + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _mish_slope(x):
    t = np.tanh(np.logaddexp(0, x))
    return t + x * _sigmoid(x) * (1 - t * t)


def _logit(x, eps):
    z = np.clip(x, eps, 1 - eps)
    return np.log(z / (1 - z))


ACTIVATIONS = [
    Activation("LeakyRelu", "y = x if x > 0 else alpha x", lambda x, alpha: _where(x > 0, x, x * alpha),
               ("Y", "dY"), "dX = dY if y > 0 else alpha dY",
               lambda y, dy, alpha: _where(y > 0, dy, dy * alpha), {"alpha": 0.01}),
    Activation("Elu", "y = x if x > 0 else alpha (exp(x) - 1)",
               lambda x, alpha: _where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
               ("Y", "dY"), "dX = dY if y > 0 else dY (y + alpha)",
               lambda y, dy, alpha: _where(y > 0, dy, dy * (y + alpha)), {"alpha": 1.0}),
    Activation("ReluN", "y = min(max(x, 0), n)", lambda x, n: np.minimum(np.maximum(x, 0), n),
               ("Y", "dY"), "dX = dY where 0 < y < n, else 0",
               lambda y, dy, n: _where((y > 0) & (y < n), dy, 0), {"n": 6.0}),
    Activation("Softsign", "y = x / (1 + |x|)", lambda x: x / (1 + np.abs(x)),
               ("X", "dY"), "dX = dY / (1 + |x|)^2", lambda x, dy: dy / np.square(1 + np.abs(x))),
    Activation("Softplus", "y = log(1 + exp(x))", lambda x: np.logaddexp(0, x),
               ("Y", "dY"), "dX = dY (1 - exp(-y))", lambda y, dy: dy * -np.expm1(-y)),
    Activation("Swish", "y = x sigmoid(x)", lambda x: x * _sigmoid(x),
               ("X", "Y", "dY"), "dX = dY (y + sigmoid(x) (1 - y))",
               lambda x, y, dy: dy * (y + _sigmoid(x) * (1 - y))),
    Activation("HardSigmoid", "y = max(0, min(1, alpha x + beta))",
               lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
               ("Y", "dY"), "dX = alpha dY where 0 < y < 1, else 0",
               lambda y, dy, alpha, beta: _where((y > 0) & (y < 1), dy * alpha, 0), {"alpha": 0.2, "beta": 0.5}),
    Activation("Cube", "y = x^3", lambda x: x * x * x,
               ("dY", "X"), "dX = 3 x^2 dY", lambda dy, x: dy * x * x * 3),
    Activation("Reciprocal", "y = 1 / x", lambda x: 1 / x,
               ("Y", "dY"), "dX = -dY y^2", lambda y, dy: -(dy * y * y)),
    Activation("Rsqrt", "y = 1 / sqrt(x)", lambda x: 1 / np.sqrt(x),
               ("dY", "Y"), "dX = -dY y^3 / 2", lambda dy, y: dy * y * y * y * -0.5),
    Activation("Cbrt", "y = cube root of x", lambda x: np.cbrt(x),
               ("dY", "Y"), "dX = dY / (3 y^2)", lambda dy, y: dy / (y * y * 3)),
    Activation("Log1p", "y = log(1 + x)", np.log1p, ("X", "dY"), "dX = dY / (1 + x)",
               lambda x, dy: dy / (1 + x)),
    Activation("Sin", "y = sin(x)", np.sin, ("X", "dY"), "dX = dY cos(x)", lambda x, dy: dy * np.cos(x)),
    Activation("Cos", "y = cos(x)", np.cos, ("X", "dY"), "dX = -dY sin(x)", lambda x, dy: -(dy * np.sin(x))),
    Activation("Pow", "y = x^exponent, or x^E for a second input E (broadcast)", lambda *xs, **a: _pow(*xs, **a),
               ("X", "dY"), "dX = dY exponent x^(exponent - 1)",
               lambda x, dy, exponent, **_: dy * exponent * np.power(x, exponent - 1),
               {"exponent": 1.0, "broadcast": 0, "axis": -1}),
    Activation("Mish", "y = x tanh(softplus(x))", lambda x: x * np.tanh(np.logaddexp(0, x)),
               ("X", "Y", "dY"), "dX = dY (tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)), sp = softplus(x)",
               lambda x, y, dy: dy * _mish_slope(x)),
    Activation("Logit", "y = log(z / (1 - z)), z = x clipped into [eps, 1 - eps]",
               lambda x, eps: _logit(x, eps), ("X", "dY"), "dX = dY / (x (1 - x)) inside [eps, 1 - eps], else 0",
               lambda x, dy, eps: _where((x < eps) | (x > 1 - eps), 0, dy / (x * (1 - x))), {"eps": 1e-6}),
    Activation("Gelu", "y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2; fast_gelu: Phi(x) as "
               "(1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2",
               lambda x, fast_gelu: _gelu(x, fast_gelu),
               ("dY", "X"), "dX = dY (Phi(x) + x phi(x)), or the derivative of the tanh form",
               lambda dy, x, fast_gelu: dy * _gelu_slope(x, fast_gelu), {"fast_gelu": 0},
               elementwise=False),
]


def _typed(fn):
    """``fn`` with its result in the first array argument's dtype (Python floats in the
    arguments would otherwise widen float32)."""
    def run(*args, **attrs):
        dtype = next(a.dtype for a in args if isinstance(a, np.ndarray) or isinstance(a, np.generic))
        return np.asarray(fn(*args, **attrs)).astype(dtype, copy=False)
    return run


FUNCTIONS: dict = {}  # op name -> its numpy semantics (the interpreter's kernel)


def _declare(a: Activation) -> None:
    traits = {PURE, ELEMENTWISE} if a.elementwise else {PURE}
    if a.name == "Pow":  # (Caffe2's Pow also takes its exponent as a tensor)
        declare(a.name, (1, 2), _infer_pow, attrs=dict(a.attrs), traits=traits, doc=a.doc)
    else:
        declare(a.name, 1, lambda t, at, n, _n=a.name: [floats(_n, t)[0]], attrs=dict(a.attrs), traits=traits,
                doc=a.doc)
    grad = a.name + "Gradient"
    arity = len(a.grad_inputs)
    declare(grad, arity, lambda t, at, n, _g=grad: [floats(_g, t)[0]],
            attrs=dict(a.attrs), traits=traits, doc=f"{a.grad_doc}; inputs {', '.join(a.grad_inputs)}")
    FUNCTIONS[a.name] = _typed(a.forward)
    FUNCTIONS[grad] = _typed(a.backward)

    @gradient(a.name)
    def make(g):
        if len(g.I) == 2:  # Pow(X, E)
            return _pow_grad(g)
        pick = {"X": g.I[0], "Y": g.O[0], "dY": g.GO[0]}
        return [GradOp(grad, [pick[k] for k in a.grad_inputs], [g.GI[0]], g.pick(*a.attrs))]


def _infer_pow(types, attrs, n):
    if len(types) == 1:
        return [floats("Pow", types)[0]]
    floats("Pow", types)
    return elementwise("Pow", types, FLOAT_DTYPES, "float", shape_rule=binary_shape(attrs))


def _pow_grad(g):
    """Pow(X, E): dX = dY E X^(E - 1), dE = dY Y log(X), each summed back to its operand's shape."""
    bc = g.pick("broadcast", "axis")
    x, e, y, dy = g.I[0], g.I[1], g.O[0], g.GO[0]

    def tmp(what):
        return f"{g.GI[0] or g.GI[1]}_pow_{what}"
    ops = [GradOp("ConstantFill", [e], [tmp("one")], {"value": 1.0}),
           GradOp("Sub", [e, tmp("one")], [tmp("em1")]),
           GradOp("Pow", [x, tmp("em1")], [tmp("xpow")], bc),
           GradOp("Mul", [tmp("xpow"), e], [tmp("slope")], bc),
           GradOp("Mul", [dy, tmp("slope")], [tmp("dx")]),
           GradOp("SumReduceLike", [tmp("dx"), x], [g.GI[0]]),
           GradOp("Log", [x], [tmp("logx")]),
           GradOp("Mul", [y, tmp("logx")], [tmp("ylog")]),
           GradOp("Mul", [dy, tmp("ylog")], [tmp("de")]),
           GradOp("SumReduceLike", [tmp("de"), e], [g.GI[1]], bc)]
    return ops


for _a in ACTIVATIONS:
    _declare(_a)

BY_NAME = {a.name: a for a in ACTIVATIONS}


# PRelu: a leaky Relu whose slope is a parameter, one per channel (or one for all)
def _prelu(types, attrs, n):
    x, w = floats("PRelu", types)
    if w.shape is not None and len(w.shape) != 1:
        type_error(f"PRelu's slope must be 1-D, got {list(w.shape)}", "one slope per channel, or one for all")
    return [x]


declare("PRelu", 2, _prelu, attrs={"order": "NCHW"}, traits={PURE},
        doc="y = x if x > 0 else slope[c] x, c the channel (axis 1 in NCHW, last in NHWC; one slope: all)")
declare("PReluGradient", 4, lambda t, a, n: [floats("PReluGradient", t)[2], floats("PReluGradient", t)[3]],
        results=2, attrs={"order": "NCHW"}, traits={PURE},
        doc="(dX, dSlope) from (Y, dY, X, slope) of PRelu")
no_gradient("PReluGradient")


@gradient("PRelu")
def _(g):
    return [GradOp("PReluGradient", [g.O[0], g.GO[0], g.I[0], g.I[1]], [g.GI[0], g.GI[1]], g.pick("order"))]


def _slope(x, w, order):
    if w.size == 1:
        return w.reshape(())
    shape = [1] * x.ndim
    shape[1 if order == "NCHW" and x.ndim > 1 else x.ndim - 1] = w.size
    return w.reshape(shape)


def prelu(x, w, order="NCHW"):
    return np.where(x > 0, x, x * _slope(x, w, order)).astype(x.dtype)


def prelu_grad(y, dy, x, w, order="NCHW"):
    dx = np.where(x > 0, dy, dy * _slope(x, w, order)).astype(x.dtype)
    contrib = np.where(x > 0, 0, dy * x)
    if w.size == 1:
        dw = np.array([contrib.sum()], dtype=w.dtype)
    else:
        c_axis = 1 if order == "NCHW" and x.ndim > 1 else x.ndim - 1
        dw = contrib.sum(axis=tuple(k for k in range(x.ndim) if k != c_axis)).astype(w.dtype)
    return dx, dw


FUNCTIONS.update({"PRelu": prelu, "PReluGradient": prelu_grad})
