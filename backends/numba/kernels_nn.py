"""The numba backend's kernels for the training ops (ir/ops/nn.py, losses.py, optim.py).

Matrix products are ``np.dot``, which numba hands to BLAS (through SciPy's bindings),
with the bias and activations written around it, so a training step of known shapes
compiles into one function: forward, backward and update without returning to the
interpreter between ops. Ops with several results, or whose loops numba writes better
than numpy expressions, call small helper functions written into the same module
(``HELPERS``); the others are expressions. Anything outside what is covered here
(other axes, unknown ranks, label probabilities, random ops) stays on the interpreter.
"""
from __future__ import annotations

from dslc.ir.ops.tensor import fill_value

from .failures import CHECKS, interpreted
from .kernels import HELPERS, NP, exact, literal, scalar, tensor
from .kernels import kernel as kernel_at  # (a kernel f(op, args, site) that numbers failure sites)

NN_HELPERS: dict[str, str] = {}  # op name -> the source of the helper its expression calls


def kernel(*names, pointwise: bool = False):
    """Register a kernel ``f(op, args)`` (these never number a failure site; ``pointwise``:
    as kernels.kernel's)."""
    def register(f):
        kernel_at(*names, pointwise=pointwise)(lambda op, a, site=None: f(op, a))
        return f
    return register


def elements(op) -> float:
    """Work of one run of a training op, in element operations: a product counts M N K."""
    sizes = []
    for v in list(op.operands) + list(op.results):
        t = tensor(v)
        n = 1
        for d in (t.shape if t is not None else ()):
            n *= 1000 if d is None else d
        sizes.append(n)
    if op.name in ("FC", "FCGradient", "MatMul") and len(sizes) >= 2:
        big = sorted(sizes)
        return float(big[-1]) * max(1, min(big[-2], 4096)) ** 0.5
    return float(max(sizes or [1]))


def helper(names, source: str):
    """``source`` defines the helper function(s) the kernels of op ``names`` (a name or a
    tuple of them) call; the writer adds the text to a module whose code calls any of its
    functions (kernels.HELPERS, by function name). The ops count as training ops for the
    islands' work threshold."""
    text = "\n\n@njit(nogil=True)\n" + source.strip("\n") + "\n"
    for name in (names,) if isinstance(names, str) else names:
        NN_HELPERS[name] = text
    for part in text.split("def ")[1:]:
        fname = part.split("(", 1)[0]
        if "_DT" in fname:  # one per dtype (the loss keeps its type)
            for dt in ("float32", "float64"):
                HELPERS[fname.replace("DT", dt)] = text.replace("DT", dt)
        else:
            HELPERS[fname] = text


def _dt(op, i=0):
    t = tensor(op.results[i])
    return t.dtype if t is not None else None


def _rank(v):
    t = tensor(v)
    return None if t is None else len(t.shape)


def _float_ranks(op, *ranks):
    """Every operand a float tensor of the given rank (None: any)."""
    for v, r in zip(op.operands, ranks):
        t = tensor(v)
        if t is None or t.dtype not in ("f32", "f64") or (r is not None and len(t.shape) != r):
            return False
    return True


def _plain_fc(op):
    return int(op.attrs.get("axis", 1)) == 1 and int(op.attrs.get("axis_w", 1)) == 1 and \
        _float_ranks(op, 2, 2)


helper("FC", """
def _fc(x, w, b):
    # Y = X W^T + b, the bias added in place (numpy's y += b: one rounding per element)
    y = np.dot(x, w.T)
    n, m = y.shape
    for i in range(n):
        for j in range(m):
            y[i, j] += b[j]
    return y
""")


@kernel("FC")
def _fc(op, a):
    if not _plain_fc(op) or _rank(op.operands[2]) != 1:
        return None
    return f"_fc({a[0]}, {a[1]}, {a[2]})"


helper("FCGradient", """
def _fc_grad(x, w, dy):
    # (dW, db, dX) of Y = X W^T + b; db row by row, as numpy's sum(axis=0) adds
    n, m = dy.shape
    db = dy[0].copy()
    for i in range(1, n):
        for j in range(m):
            db[j] += dy[i, j]
    return np.dot(dy.T, x), db, np.dot(dy, w)
""")


helper("FCWeightGradient", """
def _fc_weight_grad(x, dy):
    # (dW, db) of Y = X W^T + b: FCGradient without its dX
    n, m = dy.shape
    db = dy[0].copy()
    for i in range(1, n):
        for j in range(m):
            db[j] += dy[i, j]
    return np.dot(dy.T, x), db
""")


@kernel("FCGradient")
def _fc_grad(op, a):
    if not _plain_fc(op) or _rank(op.operands[2]) != 2:
        return None
    if len(op.results) == 2:
        return f"_fc_weight_grad({a[0]}, {a[2]})"
    return f"_fc_grad({a[0]}, {a[1]}, {a[2]})"


helper("MatMul", """
def _as_2d(x, k):
    # x seen as [prod(dims[:k]), prod(dims[k:])] (MatMul's axis_a, axis_b)
    m, n = 1, 1
    for i in range(k):
        m *= x.shape[i]
    for i in range(k, x.ndim):
        n *= x.shape[i]
    return np.ascontiguousarray(x).reshape(m, n)
""")


@kernel("MatMul")
def _matmul(op, a):
    if not _float_ranks(op, None, None):
        return None
    sides = []
    for v, name, axis, trans in ((op.operands[0], a[0], "axis_a", "trans_a"),
                                 (op.operands[1], a[1], "axis_b", "trans_b")):
        rank, k = _rank(v), int(op.attrs[axis])
        k = k % rank if rank else 0
        m = name if (rank, k) == (2, 1) else f"_as_2d({name}, {k})"
        sides.append(f"{m}.T" if op.attrs[trans] else m)
    product = f"np.dot({sides[0]}, {sides[1]})"
    # shaped like a third input (the gradient's form): a view, np.dot's result is contiguous
    return f"{product}.reshape({a[2]}.shape)" if len(a) == 3 else product


helper("ReluGradient", """
def _relu_grad(y, dy, zero):
    # dy where y > 0, else 0 (one loop: np.where allocates a mask)
    out = np.empty(dy.shape, dy.dtype)
    ys, gs, dst = np.ascontiguousarray(y).reshape(-1), np.ascontiguousarray(dy).reshape(-1), out.reshape(-1)
    for i in range(dst.size):
        dst[i] = gs[i] if ys[i] > 0 else zero
    return out
""")


@kernel("ReluGradient", pointwise=True)
def _relu_grad(op, a):
    t0, t1 = tensor(op.operands[0]), tensor(op.operands[1])
    zero = literal(0, _dt(op))
    if scalar(op.operands[0]) and scalar(op.operands[1]):  # an element (of a fused group)
        return f"({a[1]} if {a[0]} > 0 else {zero})"
    if scalar(op.operands[0]) or t0.shape != t1.shape or None in t0.shape:
        return None
    return f"_relu_grad({a[0]}, {a[1]}, {zero})"


def _bounds(op):
    """Clip's bounds as literals of the op's dtype (an unset bound is open)."""
    dt = _dt(op)
    lo, hi = op.attrs.get("min"), op.attrs.get("max")
    return (literal(float("-inf") if lo is None else lo, dt),
            literal(float("inf") if hi is None else hi, dt))


helper("Clip", """
def _clip(x, lo, hi):
    # numpy's clip: max with lo, then min with hi; NaN stays NaN, x kept on ties (-0.0 vs 0.0)
    t = lo if x < lo else x
    return hi if t > hi else t
""")


@kernel("Clip")
def _clip(op, a):
    if not scalar(op.operands[0]):
        return None  # arrays stay interpreted (np.clip); a fused group's elements come here
    lo, hi = _bounds(op)
    return f"_clip({a[0]}, {lo}, {hi})"


@kernel("ClipGradient")
def _clip_grad(op, a):
    if not (scalar(op.operands[0]) and scalar(op.operands[1])):
        return None
    lo, hi = _bounds(op)
    return f"({a[1]} if ({a[0]} > {lo} and {a[0]} < {hi}) else {literal(0, _dt(op))})"


# one-line kernels: {0}, {1} are the operands, {one} is 1 in the result's dtype
TEMPLATES = {
    "Sigmoid": "({one} / ({one} + np.exp(-{0})))",     # 1 / (1 + e^-x)
    "SigmoidGradient": "({1} * {0} * ({one} - {0}))",  # dy y (1 - y)
    "Tanh": "np.tanh({0})",
    "TanhGradient": "({1} * ({one} - {0} * {0}))",     # dy (1 - y^2)
    "Iter": "({0} + 1)",
}


def _template(op, a):
    return TEMPLATES[op.name].format(*a, one=literal(1, _dt(op)))


kernel(*TEMPLATES, pointwise=True)(_template)


def _one(v, name):
    """A one-element weight as a scalar expression."""
    return name if scalar(v) else f"{name}.ravel()[0]"


@kernel("WeightedSum", pointwise=True)
def _weighted_sum(op, a):
    if any(tensor(v).dtype != _dt(op) for v in op.operands):
        return None
    terms = [f"{a[k]} * {_one(op.operands[k + 1], a[k + 1])}" for k in range(0, len(a), 2)]
    return "(" + " + ".join(terms) + ")"


@kernel("AveragedLoss")
def _averaged_loss(op, a):
    return f"{NP[_dt(op)]}({a[0]}.sum() / {a[0]}.size)"


@kernel("AveragedLossGradient")
def _averaged_loss_grad(op, a):
    dy = a[1] if scalar(op.operands[1]) else f"{a[1]}.ravel()[0]"
    return f"np.full({a[0]}.shape, {dy} / {a[0]}.size, {NP[_dt(op)]})"


POLICIES = {"fixed": 0, "step": 1, "exp": 2, "inv": 3}
helper("LearningRate", """
def _learning_rate(it, policy, base, gamma, stepsize, power):
    # Caffe2's arithmetic (nn_math.learning_rate): float32, iter / stepsize truncated
    if policy == 1:
        q = abs(it) // stepsize
        f = gamma ** np.float32(-q if it < 0 else q)
    elif policy == 2:
        f = gamma ** np.float32(it)
    elif policy == 3:
        f = (np.float32(1) + gamma * np.float32(it)) ** -power
    else:
        f = np.float32(1)
    return np.float32(base * f)
""")


@kernel("LearningRate")
def _learning_rate(op, a):
    if op.attrs["policy"] not in POLICIES:  # (the other policies: the interpreter's)
        return None
    f32 = [literal(op.attrs[k], "f32") for k in ("base_lr", "gamma", "power")]
    return (f"_learning_rate({_one(op.operands[0], a[0])}, {POLICIES[op.attrs['policy']]}, {f32[0]}, "
            f"{f32[1]}, {max(1, int(op.attrs['stepsize']))}, {f32[2]})")


# Adagrad and Adam (nn_math.adagrad, adam): one loop over the flattened arrays, in
# Caffe2's order of operations; a quotient is rounded to the arrays' dtype, as numpy's.
# A blob may hold a strided array (a transposed one fed): ascontiguousarray copies only those.
helper("Adagrad", """
def _adagrad_DT(p, m, g, lr, epsilon, decay):
    p_out, m_out = np.empty(p.shape, p.dtype), np.empty(m.shape, m.dtype)  # C order, as numpy's
    ps, ms = np.ascontiguousarray(p).reshape(-1), np.ascontiguousarray(m).reshape(-1)
    gs = np.ascontiguousarray(g).reshape(-1)
    po, mo = p_out.reshape(-1), m_out.reshape(-1)
    for i in range(ps.size):
        gi = gs[i]
        hi = ms[i] * decay + gi * gi
        mo[i] = hi
        po[i] = ps[i] + np.DT(lr * gi / (np.sqrt(hi) + epsilon))
    return p_out, m_out
""")
helper("Adam", """
def _adam_DT(p, m1, m2, g, lr, it, beta1, beta2, epsilon, one):
    # the bias correction in float64 from the betas as DT, t = iter + 1 (Caffe2's)
    t = np.float64(it + 1)
    corr = np.DT(np.sqrt(1.0 - np.float64(beta2) ** t) / (1.0 - np.float64(beta1) ** t))
    p_out, m1_out, m2_out = np.empty(p.shape, p.dtype), np.empty(m1.shape, m1.dtype), np.empty(m2.shape, m2.dtype)
    ps, gs = np.ascontiguousarray(p).reshape(-1), np.ascontiguousarray(g).reshape(-1)
    as_, bs = np.ascontiguousarray(m1).reshape(-1), np.ascontiguousarray(m2).reshape(-1)
    po, ao, bo = p_out.reshape(-1), m1_out.reshape(-1), m2_out.reshape(-1)
    for i in range(ps.size):
        gi = gs[i]
        mi = as_[i] * beta1 + gi * (one - beta1)
        vi = bs[i] * beta2 + gi * gi * (one - beta2)
        ao[i] = mi
        bo[i] = vi
        po[i] = ps[i] + np.DT(lr * corr * mi / (np.sqrt(vi) + epsilon))
    return p_out, m1_out, m2_out
""")


def _optimizer(op, n_arrays):
    """(dtype, True) if the first ``n_arrays`` operands and the learning rate share a float
    dtype and the arrays are not scalars; else (None, False): the interpreter's."""
    dt = _dt(op)
    if dt not in ("f32", "f64") or any(tensor(v).dtype != dt or scalar(v) for v in op.operands[:n_arrays]):
        return None, False
    return dt, tensor(op.operands[n_arrays]).dtype == dt


@kernel("Adagrad", pointwise=True)
def _adagrad(op, a):
    dt, ok = _optimizer(op, 3)
    if not ok or len(op.results) != 2 or op.attrs["weight_decay"]:  # (the interpreter's)
        return None
    return (f"_adagrad_{NP[dt][3:]}({a[0]}, {a[1]}, {a[2]}, {_one(op.operands[3], a[3])}, "
            f"{literal(op.attrs['epsilon'], dt)}, {literal(op.attrs['decay'], dt)})")


@kernel("Adam", pointwise=True)
def _adam(op, a):
    dt, ok = _optimizer(op, 4)
    if not ok or len(op.results) != 3:  # (with its step as a 4th output: the interpreter's)
        return None
    lit = [literal(op.attrs[k], dt) for k in ("beta1", "beta2", "epsilon")]
    return (f"_adam_{NP[dt][3:]}({a[0]}, {a[1]}, {a[2]}, {a[3]}, {_one(op.operands[4], a[4])}, "
            f"{_one(op.operands[5], a[5])}, {', '.join(lit)}, {literal(1, dt)})")


helper("SoftmaxWithLoss", """
def _softmax_with_loss_DT(x, label, scale):
    # (softmax of each row, mean of -log softmax[label] times scale, as DT)
    n, d = x.shape
    p = np.empty_like(x)
    total = 0.0
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(d):
            e = np.exp(x[i, j] - m)
            p[i, j] = e
            s += e
        for j in range(d):
            p[i, j] = p[i, j] / s
        total -= np.log(max(p[i, label[i]], 1e-20))
    return p, np.DT(total / n * scale)
""")
helper("SoftmaxWithLossGradient", """
def _softmax_with_loss_grad(label, p, dloss, scale):
    # (p - onehot(label)) * dloss * scale / n, in p's dtype (stores into dx convert)
    n, d = p.shape
    coef = dloss * scale / n
    dx = np.empty_like(p)
    for i in range(n):
        for j in range(d):
            dx[i, j] = p[i, j] * coef
        dx[i, label[i]] = (p[i, label[i]] - 1) * coef
    return dx
""")


def _plain_loss(op):
    return int(op.attrs.get("axis", 1)) == 1 and not op.attrs.get("label_prob") and \
        len(op.operands) in (2, 4) and _rank(op.operands[0]) == 2 and _rank(op.operands[1]) == 1


@kernel("SoftmaxWithLoss")
def _swl(op, a):
    if not _plain_loss(op) or tensor(op.operands[0]).dtype not in ("f32", "f64"):
        return None
    return f"_softmax_with_loss_{NP[_dt(op)][3:]}({a[0]}, {a[1]}, {literal(op.attrs['scale'], 'f64')})"


@kernel("SoftmaxWithLossGradient")
def _swl_grad(op, a):
    if not _plain_loss(op) or not scalar(op.operands[3]):
        return None
    dt = _dt(op)
    return (f"_softmax_with_loss_grad({a[1]}, {a[2]}, {NP[dt]}({a[3]}), "
            f"{NP[dt]}({literal(op.attrs['scale'], 'f64')}))")


helper("Accuracy", """
def _accuracy(pred, label, top_k):
    n, d = pred.shape
    correct = 0
    for i in range(n):
        score = pred[i, label[i]]
        better = 0
        for j in range(d):
            if pred[i, j] > score or (pred[i, j] == score and j < label[i]):
                better += 1
        if better < top_k:
            correct += 1
    return np.float32(correct / n)
""")


@kernel("Accuracy")
def _accuracy(op, a):
    if _rank(op.operands[0]) != 2 or _rank(op.operands[1]) != 1:
        return None
    return f"_accuracy({a[0]}, {a[1]}, {int(op.attrs['top_k'])})"


@kernel("SumReduceLike")
def _sum_reduce_like(op, a):
    same = tensor(op.operands[0]).shape == tensor(op.operands[1]).shape and None not in tensor(op.results[0]).shape
    return f"{a[0]}.copy()" if same and not scalar(op.operands[0]) else None


@kernel("ConstantFill")
def _constant_fill(op, a):  # with an input: its shape (AddGradientOperators' seed of 1s)
    if len(a) != 1 or op.attrs["input_as_shape"] or op.attrs["extra_shape"] or _dt(op) not in NP:
        return None
    value = literal(fill_value(op.attrs, _dt(op)), _dt(op))
    return value if scalar(op.operands[0]) else f"np.full({a[0]}.shape, {value}, {NP[_dt(op)]})"


@kernel("StopGradient")
def _stop_gradient(op, a):
    return a[0] if scalar(op.operands[0]) else f"{a[0]}.copy()"


helper("MomentumSGDUpdate", """
def _momentum_sgd(g, m, lr, p, momentum, one, nesterov):
    # (one: 1 in the arrays' dtype, so that nothing widens to float64)
    if not nesterov:
        adjusted = lr * g + momentum * m
        return adjusted, adjusted, p - adjusted
    new_m = momentum * m + lr * g
    adjusted = (one + momentum) * new_m - momentum * m
    return adjusted, new_m, p - adjusted
""")


@kernel("MomentumSGDUpdate", pointwise=True)
def _momentum(op, a):
    dt = _dt(op)
    if any(tensor(v).dtype != dt for v in op.operands):
        return None
    return (f"_momentum_sgd({a[0]}, {a[1]}, {_one(op.operands[2], a[2])}, {a[3]}, "
            f"{literal(op.attrs['momentum'], dt)}, {literal(1, dt)}, {int(op.attrs['nesterov'])})")


# YellowFin (ir/ops/yellowfin.py): the momentum step and the averages in one loop over the
# elements, then the scalar tuning, in the arrays' dtype and the interpreter's order.
helper("YellowFin", """
def _yellowfin_DT(p, m, lr, mu, cw, ga, g2a, mem, g, it, beta, width, eps, nesterov, zero_debias, site):
    t = it.ravel()[0]
    if t < 1 or cw.size != width or mem.size != 5 or lr.size != 1 or mu.size != 1 or m.size != p.size \\
            or ga.size != p.size or g2a.size != p.size or g.size != p.size:
        raise KernelFail(site, p, m, lr, mu, cw, ga, g2a, mem, g, it)
    one, b = np.DT(1.0), np.DT(beta)
    deb = np.DT(1.0 / (1.0 - np.float64(b) ** t)) if zero_debias else one
    mu0, lr0 = mu.ravel()[0], lr.ravel()[0]
    p_out, m_out = np.empty(p.shape, p.dtype), np.empty(p.shape, p.dtype)
    ga_out, g2a_out = np.empty(p.shape, p.dtype), np.empty(p.shape, p.dtype)
    ps, ms, gs = np.ascontiguousarray(p).ravel(), np.ascontiguousarray(m).ravel(), np.ascontiguousarray(g).ravel()
    gas, g2as = np.ascontiguousarray(ga).ravel(), np.ascontiguousarray(g2a).ravel()
    po, mo, gao, g2ao = p_out.ravel(), m_out.ravel(), ga_out.ravel(), g2a_out.ravel()
    norm2 = np.DT(0.0)
    for i in range(ps.size):
        gi = gs[i]
        mi = mu0 * ms[i] + lr0 * gi
        mo[i] = mi
        if nesterov:
            po[i] = ps[i] - (one + mu0) * mi + mu0 * ms[i]
        else:
            po[i] = ps[i] - mi
        gao[i] = b * gas[i] + (one - b) * gi
        g2ao[i] = b * g2as[i] + (one - b) * (gi * gi)
        norm2 += gi * gi
    gdeb2 = np.DT(0.0)
    for i in range(ps.size):
        gd = deb * gao[i]
        gdeb2 += gd * gd
    old = mem.ravel()
    mem_out = np.empty(mem.shape, mem.dtype)
    new = mem_out.ravel()
    norm2 = max(eps, norm2)
    new[1] = b * old[1] + (one - b) * norm2
    new[0] = b * old[0] + (one - b) * np.sqrt(norm2)
    cw_out = cw.copy()
    window = cw_out.ravel()
    window[(t - 1) % width] = np.log(norm2)
    lo, hi = window[0], window[0]
    for k in range(1, min(width, t)):
        lo, hi = min(lo, window[k]), max(hi, window[k])
    new[2] = b * old[2] + (one - b) * lo
    new[3] = b * old[3] + (one - b) * hi
    h_min, h_max = max(eps, np.exp(deb * new[2])), max(eps, np.exp(deb * new[3]))
    variance = max(eps, deb * new[1] - gdeb2)
    new[4] = b * old[4] + (one - b) * (new[0] / new[1])
    lr_out, mu_out = lr.copy(), mu.copy()
    if t > 1:
        two, three = np.DT(2.0), np.DT(3.0)
        ratio = np.sqrt(h_max / h_min)
        limit = (ratio - one) / (ratio + one)
        pre = deb * new[4] * h_min
        q = pre * pre / (two * variance)
        w3 = (-np.sqrt(q * q + np.DT(4.0 / 27.0) * q * q * q) - q) / two
        w = (one if w3 > 0 else -one) * np.abs(w3) ** np.DT(1.0 / 3.0)
        root = w - q / three / w + one
        tuned_mu = max(root * root, limit * limit)
        tuned_lr = np.DT((np.float64(one - np.sqrt(tuned_mu)) ** 2) / np.float64(h_min))
        mu_out.ravel()[0] = b * mu0 + (one - b) * tuned_mu
        lr_out.ravel()[0] = b * lr0 + (one - b) * tuned_lr
    return p_out, m_out, lr_out, mu_out, cw_out, ga_out, g2a_out, mem_out
""")


@kernel_at("YellowFin")
def _yellowfin(op, a, site):
    dt = _dt(op)
    if dt not in ("f32", "f64") or any(tensor(v) is None or tensor(v).dtype != dt or scalar(v)
                                       for v in op.operands[:9]):
        return None  # (the interpreter's, which also checks the sizes)
    lit = [literal(op.attrs[k], dt) for k in ("beta", "epsilon")]
    if tensor(op.operands[9]) is None or scalar(op.operands[9]):
        return None
    return (f"_yellowfin_{NP[dt][3:]}({', '.join(a)}, {lit[0]}, {int(op.attrs['curv_win_width'])}, {lit[1]}, "
            f"{int(bool(op.attrs['nesterov']))}, {int(bool(op.attrs['zero_debias']))}, {site('yellowfin')})")


CHECKS["yellowfin"] = interpreted  # (the interpreter's kernel on the same inputs raises its error)


# --- Softmax and LabelCrossEntropy over rows (axis 1 of a matrix), as ir/ops/nn_math.py

helper("Softmax", """
def _softmax(x):
    n, d = x.shape
    p = np.empty_like(x)
    for i in range(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = x[i, 0] * 0
        for j in range(d):
            p[i, j] = np.exp(x[i, j] - m)
            s += p[i, j]
        for j in range(d):
            p[i, j] = p[i, j] / s
    return p
""")
helper("SoftmaxGradient", """
def _softmax_grad(y, dy):
    # (dy - sum(dy * y) over the row) * y
    n, d = y.shape
    dx = np.empty_like(y)
    for i in range(n):
        s = y[i, 0] * 0
        for j in range(d):
            s += dy[i, j] * y[i, j]
        for j in range(d):
            dx[i, j] = (dy[i, j] - s) * y[i, j]
    return dx
""")


def _rows(op, n_float):
    """Caffe2's default axis 1 of float matrices of one dtype (other forms stay interpreted)."""
    if int(op.attrs.get("axis", 1)) != 1 or not _float_ranks(op, *([2] * n_float)):
        return False
    ts = [tensor(v) for v in op.operands[:n_float]]
    # a row is read from its first element: rows of known, non-zero width only
    return len({t.dtype for t in ts}) == 1 and all(t.shape[1] not in (None, 0) for t in ts)


@kernel("Softmax")
def _softmax(op, a):
    return f"_softmax({a[0]})" if _rows(op, 1) else None


@kernel("SoftmaxGradient")
def _softmax_grad(op, a):
    return f"_softmax_grad({a[0]}, {a[1]})" if _rows(op, 2) else None


helper("LabelCrossEntropy", """
def _label_cross_entropy(x, label, floor, site):
    # -log(max(x[i, label[i]], floor)) for each row; a label outside [0, D) fails
    out = np.empty(x.shape[0], x.dtype)
    for i in range(x.shape[0]):
        if label[i] < 0 or label[i] >= x.shape[1]:
            raise KernelFail(site, x, label)
        out[i] = -np.log(max(x[i, label[i]], floor))
    return out
""")
helper("LabelCrossEntropyGradient", """
def _label_cross_entropy_grad(x, label, dy, floor, site):
    dx = np.zeros_like(x)
    for i in range(x.shape[0]):
        if label[i] < 0 or label[i] >= x.shape[1]:
            raise KernelFail(site, x, label, dy)
        dx[i, label[i]] = -dy[i] / max(x[i, label[i]], floor)
    return dx
""")


def _label_operands(op, a):
    """(X as Caffe2's [N, D] matrix, the labels as a vector), as source; None unless X is a
    float tensor of known shape (a vector is one row) and the labels int32/int64 [N] or [N, 1]."""
    x, t = tensor(op.operands[0]), tensor(op.operands[1])
    if x is None or t is None or x.dtype not in ("f32", "f64") or not x.shape or None in x.shape \
            or t.dtype not in ("i32", "i64") or len(t.shape) not in (1, 2):
        return None
    rows, cols = (x.shape[0], x.shape[1:]) if len(x.shape) > 1 else (1, x.shape)
    width = 1
    for d in cols:
        width *= d
    return f"np.ascontiguousarray({a[0]}).reshape(({rows}, {width}))", f"{a[1]}.ravel()"


@kernel_at("LabelCrossEntropy")
def _lce(op, a, site):
    got = _label_operands(op, a)
    if got is None:
        return None
    return f"_label_cross_entropy({got[0]}, {got[1]}, {literal(1e-20, _dt(op))}, {site('label')})"


@kernel_at("LabelCrossEntropyGradient")
def _lce_grad(op, a, site):
    got = _label_operands(op, a)
    if got is None or _rank(op.operands[2]) != 1:
        return None
    shape = tuple(tensor(op.operands[0]).shape)
    return (f"_label_cross_entropy_grad({got[0]}, {got[1]}, {a[2]}, {literal(1e-20, _dt(op))}, "
            f"{site('label')}).reshape({shape})")


CHECKS["label"] = interpreted  # (the interpreter's kernel on the [N, D] view raises its error)


# --- Dropout: draws from the op's generator (the interpreter's stream), so both backends
# drop the same elements

helper("Dropout", """
def _dropout(x, rng, ratio, scale):
    # keep where a uniform draw in [0, 1) is >= ratio, scaled by 1 / (1 - ratio)
    keep = rng.random(x.shape) >= ratio
    return x * keep * scale, keep
""")
helper("DropoutGrad", """
def _dropout_grad(dy, keep, scale):
    return dy * keep * scale
""")


def _dropout_scale(op):
    ratio = float(op.attrs["ratio"])
    return None if int(op.attrs["is_test"]) or ratio == 0 else literal(1.0 / (1.0 - ratio), _dt(op))


@kernel("Dropout")
def _dropout(op, a):
    if not _float_ranks(op, None) or scalar(op.operands[0]):
        return None
    scale, two = _dropout_scale(op), len(op.results) == 2
    if scale is None:  # testing: Y = X, every element kept
        return f"({a[0]}.copy(), np.ones({a[0]}.shape, np.bool_))" if two else f"{a[0]}.copy()"
    call = f"_dropout({a[0]}, {a[1]}, {literal(op.attrs['ratio'], 'f64')}, {scale})"
    return call if two else f"{call}[0]"


@kernel("DropoutGrad")
def _dropout_grad(op, a):
    if not _float_ranks(op, None) or scalar(op.operands[0]) or tensor(op.operands[1]).dtype != "bool":
        return None
    scale = _dropout_scale(op)
    return f"{a[0]}.copy()" if scale is None else f"_dropout_grad({a[0]}, {a[1]}, {scale})"


# Activations (ir/ops/activations.py): {0}, {1}, {2} are the operands; {one}, {zero}, {three},
# {mhalf} constants and {alpha}, {beta}, {n} the op's arguments, in the result's dtype. The
# first form is for scalars (a fused group's elements), the second for arrays.
ACTIVATION_FORMS = {
    "LeakyRelu": ("({0} if {0} > {zero} else {0} * {alpha})", "np.where({0} > {zero}, {0}, {0} * {alpha})"),
    "LeakyReluGradient": ("({1} if {0} > {zero} else {1} * {alpha})", "np.where({0} > {zero}, {1}, {1} * {alpha})"),
    "Elu": ("({0} if {0} > {zero} else {alpha} * np.expm1({0}))",
            "np.where({0} > {zero}, {0}, {alpha} * np.expm1(np.minimum({0}, {zero})))"),
    "EluGradient": ("({1} if {0} > {zero} else {1} * ({0} + {alpha}))",
                    "np.where({0} > {zero}, {1}, {1} * ({0} + {alpha}))"),
    "ReluN": ("({zero} if {0} < {zero} else ({n} if {0} > {n} else {0}))",  # (NaN stays NaN)
              "np.minimum(np.maximum({0}, {zero}), {n})"),
    "ReluNGradient": ("({1} if ({0} > {zero} and {0} < {n}) else {zero})",
                      "{1} * (({0} > {zero}) & ({0} < {n}))"),
    "Softsign": ("({0} / ({one} + np.abs({0})))",) * 2,
    "SoftsignGradient": ("({1} / (({one} + np.abs({0})) * ({one} + np.abs({0}))))",) * 2,
    "Softplus": ("np.logaddexp({zero}, {0})",) * 2,
    "SoftplusGradient": ("({1} * -np.expm1(-{0}))",) * 2,
    "Swish": ("({0} / ({one} + np.exp(-{0})))",) * 2,                        # x sigmoid(x)
    "SwishGradient": ("({2} * ({1} + ({one} - {1}) / ({one} + np.exp(-{0}))))",) * 2,
    "HardSigmoid": ("min(max({alpha} * {0} + {beta}, {zero}), {one})",
                    "np.minimum(np.maximum({alpha} * {0} + {beta}, {zero}), {one})"),
    "HardSigmoidGradient": ("({1} * {alpha} if ({0} > {zero} and {0} < {one}) else {zero})",
                            "{1} * {alpha} * (({0} > {zero}) & ({0} < {one}))"),
    "Cube": ("({0} * {0} * {0})",) * 2,
    "CubeGradient": ("({0} * {1} * {1} * {three})",) * 2,
    "Reciprocal": ("({one} / {0})",) * 2,
    "ReciprocalGradient": ("(-({1} * {0} * {0}))",) * 2,
    "Rsqrt": ("({one} / np.sqrt({0}))",) * 2,
    "RsqrtGradient": ("({0} * {1} * {1} * {1} * {mhalf})",) * 2,
    "Cbrt": ("np.cbrt({0})",) * 2,
    "CbrtGradient": ("({0} / ({1} * {1} * {three}))",) * 2,
    "Pow": ("np.power({0}, {exponent})",) * 2,
    "PowGradient": ("({1} * {exponent} * np.power({0}, {exponent} - {one}))",) * 2,
    "AbsGradient": ("({1} * np.sign({0}))",) * 2,
    "Log1p": ("np.log1p({0})",) * 2,
    "Log1pGradient": ("({1} / ({one} + {0}))",) * 2,
    "Sin": ("np.sin({0})",) * 2,
    "SinGradient": ("({1} * np.cos({0}))",) * 2,
    "Cos": ("np.cos({0})",) * 2,
    "CosGradient": ("(-({1} * np.sin({0})))",) * 2,
    "Mish": ("({0} * np.tanh(np.logaddexp({zero}, {0})))",) * 2,
    "MishGradient": ("({2} * (np.tanh(np.logaddexp({zero}, {0})) + {0} / ({one} + np.exp(-{0}))"
                     " * ({one} - np.tanh(np.logaddexp({zero}, {0})) * np.tanh(np.logaddexp({zero}, {0})))))",) * 2,
    "Logit": ("np.log(min(max({0}, {eps}), {one} - {eps}) / ({one} - min(max({0}, {eps}), {one} - {eps})))",
              "np.log(np.minimum(np.maximum({0}, {eps}), {one} - {eps})"
              " / ({one} - np.minimum(np.maximum({0}, {eps}), {one} - {eps})))"),
    "LogitGradient": ("({zero} if ({0} < {eps} or {0} > {one} - {eps}) else {1} / ({0} * ({one} - {0})))",
                      "np.where(({0} < {eps}) | ({0} > {one} - {eps}), {zero}, {1} / ({0} * ({one} - {0})))"),
}


ACTIVATION_ARITY = {"Pow": (0,)}  # the forms' operand counts where the op takes more (Pow(X, E))


def _activation(op, a):
    if len(op.operands) != len(ACTIVATION_ARITY.get(op.name, op.operands)):  # (Pow of a tensor exponent)
        return None
    dt = _dt(op)
    if dt not in NP or dt in ("bool",) or not dt.startswith("f"):
        return None
    arrays = not all(scalar(v) for v in op.operands)
    form = ACTIVATION_FORMS[op.name][1 if arrays else 0]
    consts = {"one": 1, "zero": 0, "three": 3, "mhalf": -0.5}
    consts.update({k: v for k, v in op.attrs.items() if isinstance(v, (int, float))})
    expr = form.format(*a, **{k: literal(float(v), dt) for k, v in consts.items()})
    return expr if arrays else exact(expr, dt)


kernel(*ACTIVATION_FORMS, pointwise=True)(_activation)


# ----------------------------------------------------------------------------- Where, ElementwiseLinear
@kernel("Where", pointwise=True)
def _where(op, a):
    # (equal known shapes only: broadcast_on_rows, and the interpreter's shape error, stay its own)
    c, x, y = (tensor(v) for v in op.operands)
    if op.attrs.get("broadcast_on_rows") or c is None or x is None or y is None or c.dtype != "bool" \
            or not (c.shape == x.shape == y.shape) or None in x.shape or x.dtype != y.dtype:
        return None
    return f"np.where({a[0]}, {a[1]}, {a[2]})" if x.shape else f"({a[1]} if {a[0]} else {a[2]})"


helper(("ElementwiseLinear", "ElementwiseLinearGradient"), """
def _elementwise_linear(x, a, b):
    # Y = X a + b per column of X seen as [N, D]: the product and the sum each rounded to X's dtype
    m = x.reshape((-1, a.size))
    out = np.empty(m.shape, x.dtype)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            out[i, j] = m[i, j] * a[j] + b[j]
    return out.reshape(x.shape)


@njit(nogil=True)
def _elementwise_linear_grad(dy, x, a):
    # dX = dY a; da, db: the columns' sums of dY X and dY, rows added in order (numpy's axis-0 sum)
    dm = dy.reshape((-1, a.size))
    m = x.reshape((-1, a.size))
    dx = np.empty(dm.shape, dy.dtype)
    da = np.zeros(a.size, dy.dtype)
    db = np.zeros(a.size, dy.dtype)
    for i in range(dm.shape[0]):
        for j in range(dm.shape[1]):
            dx[i, j] = dm[i, j] * a[j]
            da[j] += dm[i, j] * m[i, j]
            db[j] += dm[i, j]
    return dx.reshape(x.shape), da.astype(a.dtype), db.astype(a.dtype)
""")


def _linear_operands(op, x, a) -> bool:
    """Float tensors of one dtype, X of rank 2 (axis 1: numba's reshape needs X's rows whole)."""
    tx, ta = tensor(x), tensor(a)
    return tx is not None and ta is not None and tx.dtype in ("f32", "f64") and tx.dtype == ta.dtype \
        and len(tx.shape) == 2 and len(ta.shape) == 1 and int(op.attrs.get("axis", 1)) == 1


@kernel("ElementwiseLinear")
def _elementwise_linear_kernel(op, a):
    x, w, b = op.operands
    if not _linear_operands(op, x, w) or tensor(b) is None or tensor(b).dtype != tensor(x).dtype:
        return None
    return f"_elementwise_linear({a[0]}, {a[1]}, {a[2]})"


@kernel("ElementwiseLinearGradient")
def _elementwise_linear_grad_kernel(op, a):
    dy, x, w = op.operands
    if not _linear_operands(op, x, w) or tensor(dy) is None or tensor(dy).dtype != tensor(x).dtype:
        return None
    return f"_elementwise_linear_grad({a[0]}, {a[1]}, {a[2]})"
