"""YellowFin (arXiv 1706.03471): momentum SGD whose learning rate and momentum tune
themselves per parameter, as Caffe2's ``YellowFin`` operator; ``FUNCTIONS`` holds the numpy
semantics the interpreter runs.

One op does a step and the tuning for the next one. It reads the lr and mu that earlier
steps tuned, takes the momentum step with them, then updates its moving averages (factor
``beta``) of g, g^2, |g|^2, |g|, the least and greatest log |g|^2 over the last
``curv_win_width`` steps (the curvature range h_min, h_max) and the distance estimate
|g| / |g|^2, and, from the second iteration on, moves lr and mu towards the solution of
YellowFin's single-step problem (a cubic in sqrt(mu), solved in closed form).

    YellowFin(param, moment, lr [1], mu [1], curv_win [W], g_avg, g2_avg, scalars [5], grad, iter)
        -> (param', moment', lr', mu', curv_win', g_avg', g2_avg', scalars')

The state lives in blobs Caffe2's optimizer names ``<param>_moment``, ``_lr_avg``,
``_mu_avg``, ``_curv_win``, ``_g_avg``, ``_g2_avg`` and ``_scalars_memory`` (the five
scalar averages: |g|, |g|^2, log min |g|^2, log max |g|^2, distance). Arithmetic is in the
parameter's float type in Caffe2's order, so the figures follow Caffe2's to rounding.
"""
from __future__ import annotations

import numpy as np

from ..opdef import PURE, declare, type_error
from .nn import floats
from .optim import _iter, _same, _size

SCALARS = 5  # (the scalars memory: the averages of |g|, |g|^2, log min |g|^2, log max |g|^2, distance)


def _yellowfin(types, attrs, n):
    ts = floats("YellowFin", types[:9])
    _same("YellowFin", ts, [(0, 1), (0, 5), (0, 6), (0, 8)])
    _iter(types[9:], attrs, 1)
    width = int(attrs["curv_win_width"])
    if width < 1:
        type_error(f"YellowFin's curv_win_width must be >= 1, got {width}",
                   "the window holds the last curv_win_width log |g|^2 (Caffe2's default: 20)")
    for k, what, size in ((2, "lr", 1), (3, "mu", 1), (4, "curv_win", width), (7, "scalars_memory", SCALARS)):
        s = ts[k].shape
        if s is not None and None not in s and _size(s) != size:
            type_error(f"YellowFin's {what} (input {k}) must hold {size} values, got shape {list(s)}",
                       f"fill it with ConstantFill([], ..., shape=[{size}])")
    return ts[:8]


declare("YellowFin", 10, _yellowfin, results=8,
        attrs={"beta": 0.999, "curv_win_width": 20, "epsilon": 1e-6, "nesterov": 0, "zero_debias": 1},
        traits={PURE},
        doc="(param, moment, lr, mu, curv_win, g_avg, g2_avg, scalars_memory, grad, iter) -> the first eight "
            "updated: a momentum step with the tuned lr and mu (moment' = mu m + lr g, param' = param - "
            "moment'; nesterov: param - (1 + mu) moment' + mu m), then the tuning for the next step (moving "
            "averages with factor beta, debiased by 1 / (1 - beta^iter) when zero_debias, of g, g^2, |g|^2, "
            "|g|, the curvature range over the last curv_win_width steps and the distance; lr and mu move "
            "from iter 2 on); iter counts from 1. No gradient, as in Caffe2")


def yellowfin(p, m, lr, mu, curv_win, g_avg, g2_avg, mem, g, it, beta=0.999, curv_win_width=20, epsilon=1e-6,
              nesterov=0, zero_debias=1):
    t = int(np.asarray(it).reshape(-1)[0])
    width = int(curv_win_width)
    if t < 1:
        raise ValueError(f"YellowFin: the iteration is {t}; it counts from 1 (count it up before the op: "
                         "AtomicIter or Iter on a counter filled with 0)")
    if curv_win.size != width or mem.size != SCALARS or lr.size != 1 or mu.size != 1:
        raise ValueError(f"YellowFin: curv_win holds {curv_win.size} values (curv_win_width is {width}), "
                         f"scalars_memory {mem.size} (needs {SCALARS}), lr {lr.size} and mu {mu.size} (need 1)")
    for k, x in ((1, m), (5, g_avg), (6, g2_avg), (8, g)):
        if x.shape != p.shape:
            raise ValueError(f"YellowFin: input {k} has shape {list(x.shape)}, the parameter {list(p.shape)}")
    dt = p.dtype.type
    one, b, eps = dt(1), dt(beta), dt(epsilon)
    # (1 - beta^t in double from the float beta, as Caffe2's std::pow(float, int))
    deb = dt(1.0 / (1.0 - float(b) ** t)) if zero_debias else one

    def average(x, avg):  # (the new average, and it debiased)
        new = (b * avg + (one - b) * x).astype(p.dtype)
        return new, (deb * new).astype(p.dtype)

    mu0, lr0 = mu.reshape(-1)[0], lr.reshape(-1)[0]
    new_m = (mu0 * m + lr0 * g).astype(p.dtype)
    if nesterov:
        new_p = p - (one + mu0) * new_m + mu0 * m
    else:
        new_p = p - new_m
    with np.errstate(all="ignore"):  # (a zero gradient gives inf and nan, as in Caffe2)
        new_g_avg, g_deb = average(g, g_avg)
        new_g2_avg, _ = average(g * g, g2_avg)
        old = mem.reshape(-1)
        new_mem = np.empty(SCALARS, mem.dtype)
        norm2 = max(eps, dt(np.dot(g.reshape(-1), g.reshape(-1))))
        new_mem[1], norm2_deb = average(norm2, old[1])
        new_mem[0], _ = average(dt(np.sqrt(norm2)), old[0])
        window = curv_win.reshape(-1).copy()
        window[(t - 1) % width] = np.log(norm2)
        seen = window[:min(width, t)]
        new_mem[2], h_min = average(seen.min(), old[2])
        new_mem[3], h_max = average(seen.max(), old[3])
        h_min, h_max = max(eps, dt(np.exp(h_min))), max(eps, dt(np.exp(h_max)))
        variance = max(eps, dt(norm2_deb - dt(np.dot(g_deb.reshape(-1), g_deb.reshape(-1)))))
        new_mem[4], distance = average(new_mem[0] / new_mem[1], old[4])
        new_lr, new_mu = lr.copy(), mu.copy()
        if t > 1:
            tuned_mu, tuned_lr = _lr_mu(dt, h_min, h_max, distance, variance)
            new_mu.reshape(-1)[0], _ = average(tuned_mu, mu0)
            new_lr.reshape(-1)[0], _ = average(tuned_lr, lr0)
    return (new_p.astype(p.dtype), new_m, new_lr, new_mu, window.reshape(curv_win.shape), new_g_avg, new_g2_avg,
            new_mem.reshape(mem.shape))


def _lr_mu(dt, h_min, h_max, distance, variance):
    """The step's (mu, lr): the larger of the squared root of YellowFin's cubic and the
    momentum the curvature range needs, and lr = (1 - sqrt(mu))^2 / h_min."""
    one, two, three = dt(1), dt(2), dt(3)
    ratio = np.sqrt(h_max / h_min)
    mu_limit = (ratio - one) / (ratio + one)
    pre_p = distance * h_min
    p = pre_p * pre_p / (two * variance)
    w3 = (-np.sqrt(p * p + dt(4.0 / 27.0) * p * p * p) - p) / two
    w = (one if w3 > 0 else -one) * np.power(np.abs(w3), dt(1.0 / 3.0))
    root = w - p / three / w + one
    mu = max(root * root, mu_limit * mu_limit)
    lr = dt(float(one - np.sqrt(mu)) ** 2 / float(h_min))  # (Caffe2's std::pow(float, 2): in double)
    return mu, lr


FUNCTIONS = {"YellowFin": yellowfin}
