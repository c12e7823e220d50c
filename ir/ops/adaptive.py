"""Optimizer updates whose step adapts to the gradients seen: Wngrad, Storm, DecayAdagrad
(Caffe2's operators of those names, and the sparse forms of the first two); ``FUNCTIONS``
holds their numpy semantics. ``lr`` is the signed learning rate (negative to descend).

    Wngrad(param, b, grad, lr)        b' = b + |grad|^2 / (b + eps);  param' = param + lr / (b + eps) grad
                                      (SparseWngrad: b' = b + |grad rows|^2 / b, as Caffe2's)
    Storm(param, m, s, grad, lr)      s' = s + |grad|^2;  k = lr (beta + s')^(-1/3);  a = momentum k^2
                                      m' = grad + (1 - a)(m - grad);  param' = param + k m'
    DecayAdagrad(param, m1, m2, grad, lr, iter)
                                      m1' = beta1 m1 + (1 - beta1) grad;  m2' = m2 + grad^2
                                      param' = param + lr (m1' / c / (sqrt(m2') + eps) + weight_decay param)
                                      c = 1 - beta1^(iter + 1) with bias_correction_first, else 1

The sparse forms update the rows at INDICES (the accumulators still see every row's gradient).
"""
from __future__ import annotations

import numpy as np

from ..gradients import no_gradient
from ..opdef import PURE, declare
from ..types import TensorType
from .ids import updated_rows
from .infer import tensors
from .nn import floats


def _same_as_inputs(name, outs):
    """Result k has the type of input ``outs[k]`` (the parameter a float tensor)."""
    def infer(types, attrs, n):
        floats(name, types[:1])
        ts = tensors(name, types)
        return [ts[k] for k in outs][:n]
    return infer


declare("Wngrad", 4, _same_as_inputs("Wngrad", (0, 1, 1, 2)), results=(2, 4), attrs={"epsilon": 1e-5},
        traits={PURE}, doc="(param, b [1], grad, lr) -> (param', b'[, the effective lr, the update]): WNGrad")
declare("SparseWngrad", 5, _same_as_inputs("SparseWngrad", (0, 1)), results=2, attrs={"epsilon": 1e-5},
        traits={PURE}, doc="(param, b [1], INDICES, grad rows, lr) -> (param', b'): WNGrad of the rows at INDICES")
declare("Storm", 5, _same_as_inputs("Storm", (0, 1, 2)), results=3, attrs={"momentum": 10.0, "beta": 0.1},
        traits={PURE}, doc="(param, moment, grad_sq_sum [1], grad, lr) -> (param', moment', grad_sq_sum'): STORM")
declare("SparseStorm", 6, _same_as_inputs("SparseStorm", (0, 1, 2)), results=3,
        attrs={"momentum": 10.0, "beta": 0.1}, traits={PURE},
        doc="(param, moment, grad_sq_sum, grad rows, INDICES, lr) -> (param', moment', grad_sq_sum'): STORM of "
            "the rows at INDICES")
declare("DecayAdagrad", 6, _same_as_inputs("DecayAdagrad", (0, 1, 2)), results=3,
        attrs={"beta1": 0.0, "beta2": 0.999, "epsilon": 0.1, "weight_decay": 0.0, "bias_correction_first": 1},
        traits={PURE}, doc="(param, m1, m2, grad, lr, iter) -> (param', m1', m2'): Adagrad with a decaying first "
                           "moment and weight decay")
for _name in ("Wngrad", "SparseWngrad", "Storm", "SparseStorm", "DecayAdagrad"):
    no_gradient(_name)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def wngrad(param, b, grad, lr, epsilon=1e-5, n_out=2):
    b0 = float(_f64(b).reshape(-1)[0])
    effective = float(_f64(lr).reshape(-1)[0]) / (b0 + epsilon)
    update = (effective * _f64(grad)).astype(param.dtype)
    b_out = np.array([b0 + float((_f64(grad) ** 2).sum()) / (b0 + epsilon)], dtype=b.dtype).reshape(b.shape)
    out = ((param + update).astype(param.dtype), b_out,
           np.array([effective], dtype=param.dtype).reshape(b.shape), update)
    return out[:n_out]


def sparse_wngrad(param, b, indices, grad, lr, epsilon=1e-5):
    idx = updated_rows("SparseWngrad", indices, param)
    rows = grad.reshape((idx.size,) + param.shape[1:])
    b0 = float(_f64(b).reshape(-1)[0])
    out = param.copy()
    if idx.size:
        np.add.at(out, idx, (float(_f64(lr).reshape(-1)[0]) / (b0 + epsilon) * _f64(rows)).astype(param.dtype))
    # (Caffe2's sparse form divides by b itself, its dense form by b + epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_out = np.array([b0 + float((_f64(rows) ** 2).sum()) / b0], dtype=b.dtype).reshape(b.shape)
    return out, b_out


def _storm_rates(s, grad, lr, momentum, beta):
    s_out = float(_f64(s).reshape(-1)[0]) + float((_f64(grad) ** 2).sum())
    k = float(_f64(lr).reshape(-1)[0]) * (beta + s_out) ** (-1.0 / 3.0)
    return s_out, k, momentum * k * k


def storm(param, moment, s, grad, lr, momentum=10.0, beta=0.1):
    s_out, k, a = _storm_rates(s, grad, lr, momentum, beta)
    m = grad + (1 - a) * (moment - grad)
    return ((param + k * m).astype(param.dtype), m.astype(moment.dtype),
            np.array([s_out], dtype=s.dtype).reshape(s.shape))


def sparse_storm(param, moment, s, grad, indices, lr, momentum=10.0, beta=0.1):
    idx = updated_rows("SparseStorm", indices, param)
    rows = grad.reshape((idx.size,) + param.shape[1:])
    s_out, k, a = _storm_rates(s, rows, lr, momentum, beta)
    p, m = param.copy(), moment.copy()
    for i, r in enumerate(idx):  # (in order: a repeated row moves twice, as in Caffe2)
        m[r] = rows[i] + (1 - a) * (m[r] - rows[i])
        p[r] = p[r] + k * m[r]
    return p, m, np.array([s_out], dtype=s.dtype).reshape(s.shape)


def decay_adagrad(param, m1, m2, grad, lr, it, beta1=0.0, beta2=0.999, epsilon=0.1, weight_decay=0.0,
                  bias_correction_first=1):
    t = float(np.asarray(it).reshape(-1)[0]) + 1
    m1_out = beta1 * m1 + (1 - beta1) * grad
    m2_out = m2 + grad * grad
    c = 1 - beta1 ** t if bias_correction_first else 1.0
    step = m1_out / c / (np.sqrt(m2_out) + epsilon) + weight_decay * param
    return ((param + float(_f64(lr).reshape(-1)[0]) * step).astype(param.dtype), m1_out.astype(m1.dtype),
            m2_out.astype(m2.dtype))


def _lars(types, attrs, n):
    ts = floats("Lars", types)
    return [TensorType(ts[0].dtype, (1,))]


declare("Lars", 5, _lars, attrs={"offset": 0.5, "lr_min": 0.02}, traits={PURE},
        doc="(X, dX, weight_decay, trust, lr_max) -> the learning-rate factor of layer-wise adaptive "
            "rate scaling, trust / (|dX| / |X| + weight_decay + offset) (1 if a norm is 0), clipped "
            "to [lr_min, lr_max]; shape [1]")
no_gradient("Lars")


def lars(x, dx, wd, trust, lr_max, offset=0.5, lr_min=0.02):
    x_norm = np.sqrt(np.sum(np.square(x, dtype=np.float64)))
    dx_norm = np.sqrt(np.sum(np.square(dx, dtype=np.float64)))
    val = 1.0
    if x_norm > 0 and dx_norm > 0:
        val = float(trust.reshape(-1)[0]) / (dx_norm / x_norm + float(wd.reshape(-1)[0]) + offset)
    val = min(max(val, lr_min), float(lr_max.reshape(-1)[0]))
    return np.array([val], dtype=x.dtype)


FUNCTIONS = {"Lars": lars, "SparseWngrad": sparse_wngrad, "Storm": storm, "SparseStorm": sparse_storm,
             "DecayAdagrad": decay_adagrad}
