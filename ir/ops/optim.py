"""Random fills, the iteration counter, learning rates and the optimizers' update ops.

Random fills draw from a stream of their own: seeded by Caffe2's ``random_seed``
argument when given, else by the session's seed and the op's output blob name
(``output_names``, which the lowering fills in). So every run, and every backend,
gives the same parameters.
"""
from __future__ import annotations

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, SIZED_BY_VALUES, declare, type_error
from ..types import FLOAT_DTYPES, INT_DTYPES, TensorType
from .infer import dtype_from_code, require, tensors
from .nn import RANDOM, floats, indices

_FILL = {"shape": None, "extra_shape": None, "input_as_shape": 0, "dtype": 1, "random_seed": -1,
         "output_names": []}


def _fill(name, _ints=False, _f16=False, **params):
    def infer(types, attrs, n):
        dt = dtype_from_code(name, attrs["dtype"])
        if _ints:
            require(name, dt, {"i32"}, "int32")
        else:
            require(name, dt, FLOAT_DTYPES, "float")
        if types:
            if len(types) == 2 or (len(types) == 3 and name not in ("UniformFill", "UniformIntFill")):
                type_error(f"{name} takes 0 or 1 inputs" + (" (or 3: shape, min, max)" if "Uniform" in name else "")
                           + f", got {len(types)}", "give the shape as shape=[...] or as the first input")
            t = tensors(name, types)[0]
            if attrs["input_as_shape"]:
                return [TensorType(dt, None)]
            shape = None if t.shape is None else tuple(t.shape) + tuple(attrs["extra_shape"] or ())
        else:
            if attrs["shape"] is None:
                type_error(f"{name} needs a shape", f"pass shape=[...] to {name}")
            shape = tuple(int(d) for d in attrs["shape"])
            if any(d < 0 for d in shape):
                type_error(f"{name} shape {list(shape)} has a negative dim", "dims are >= 0")
        if name in ("XavierFill", "MSRAFill") and shape is not None and len(shape) < 2 \
                and name == "MSRAFill":
            type_error(f"MSRAFill needs a shape of rank >= 2, got {list(shape)}", "fan out is size / dim 1")
        return [TensorType(dt, shape)]
    # (2: Caffe2's INT32, 12: its FLOAT16)
    attrs = dict(_FILL, **params, **({"dtype": 2} if _ints else {"dtype": 12} if _f16 else {}))
    declare(name, (0, 3 if name.startswith("Uniform") else 1), infer, attrs=attrs, effects=RANDOM,
            traits={SIZED_BY_VALUES}, doc=attrs.pop("_doc"))
    no_gradient(name)  # (its input, if any, gives only the shape)


_fill("GaussianFill", mean=0.0, std=1.0, _doc="a tensor of normal draws (mean, std); shape as ConstantFill's")
_fill("UniformFill", min=0.0, max=1.0, _doc="a tensor of uniform draws in [min, max) (min and max may be inputs "
      "2 and 3: then max < min makes dim 0 empty)")
_fill("UniformIntFill", _ints=True, min=0, max=1, _doc="a tensor of int32 uniform draws in [min, max] (both ends; "
      "min and max may be inputs 2 and 3)")
_fill("Float16UniformFill", min=0.0, max=1.0, _f16=True,
      _doc="UniformFill's draws as float16 (Caffe2's fp16 embedding tables)")
def _unique_uniform_fill(types, attrs, n):
    dt = dtype_from_code("UniqueUniformFill", attrs["dtype"])
    require("UniqueUniformFill", dt, {"i32", "i64"}, "int32 or int64")
    if not types or not attrs["input_as_shape"]:
        type_error("UniqueUniformFill takes its shape as its first input (input_as_shape=1)",
                   "pass the shape blob, and optionally the ids to avoid")
    return [TensorType(dt, None)]


declare("UniqueUniformFill", (1, 2), _unique_uniform_fill,
        attrs={"min": 0, "max": 1, "dtype": 2, "input_as_shape": 1, "random_seed": -1, "output_names": []},
        effects=RANDOM, traits={SIZED_BY_VALUES},
        doc="distinct uniform integers in [min, max] (both ends), as many as the shape input says, none of them "
            "among the second input's values")
no_gradient("UniqueUniformFill")
_fill("XavierFill", _doc="uniform draws in [-s, s), s = sqrt(3 / fan_in), fan_in = size / dims[0]")
_fill("MSRAFill", _doc="normal draws with std sqrt(2 / fan_out), fan_out = size / dims[1]")


def _iter(types, attrs, n):
    (t,) = tensors("Iter", types)
    if t.dtype is not None and t.dtype != "i64":
        type_error(f"Iter counts in an int64 tensor, got {t.dtype}",
                   "create it with ConstantFill([], 'iter', shape=[1], value=0, dtype=core.DataType.INT64)")
    return [TensorType("i64", t.shape)]


declare("Iter", 1, _iter, traits={PURE},
        doc="y = x + 1 on an int64 iteration counter (Caffe2 runs it in place: Iter([it], [it]))")

# each policy and the arguments it must have (type inference checks them)
_POLICIES = {"fixed": (), "step": ("stepsize",), "exp": (), "inv": (), "poly": ("max_iter",),
             "linearWarmup": ("num_iter",), "constantWarmup": ("num_iter",),
             "alter": ("active_period", "inactive_period"), "hill": ("num_iter",),
             "slope": ("num_iter_1", "num_iter_2"), "gate": ("num_iter",)}
LR_ATTRS = {"base_lr": 0.0, "policy": "fixed", "gamma": 0.0, "stepsize": 0, "power": 0.0, "max_iter": -1,
            "num_iter": 0, "start_multiplier": 0.0, "multiplier": 0.5, "end_multiplier": 0.0,
            "active_first": 1, "active_period": -1, "inactive_period": -1, "num_iter_1": 0, "multiplier_1": 1.0,
            "num_iter_2": 0, "multiplier_2": 1.0}


def _learning_rate(types, attrs, n):
    _iter(types, attrs, n)
    policy = attrs["policy"]
    if policy not in _POLICIES:
        type_error(f"LearningRate policy {policy!r} is not supported", f"use one of {', '.join(_POLICIES)}")
    for k in _POLICIES[policy]:
        if int(attrs[k]) <= 0:
            type_error(f"LearningRate policy {policy!r} needs {k} > 0", f"pass {k}=<iterations>")
    if policy == "slope" and int(attrs["num_iter_2"]) <= int(attrs["num_iter_1"]):
        type_error("LearningRate policy 'slope' needs num_iter_2 > num_iter_1", "the slope runs between them")
    return [TensorType("f32", ())]


declare("LearningRate", 1, _learning_rate, attrs=dict(LR_ATTRS), traits={PURE},
        doc="lr = base_lr * f(iter): fixed 1, step gamma^floor(iter/stepsize), exp gamma^iter, inv "
            "(1 + gamma iter)^-power, poly (1 - iter/max_iter)^power, linearWarmup and constantWarmup "
            "(start_multiplier rising to 1, or multiplier, for num_iter), alter (1 for active_period, 0 "
            "for inactive_period), hill (linear warmup, then inv decay floored at end_multiplier), slope "
            "(multiplier_1 to multiplier_2 between num_iter_1 and num_iter_2), gate (multiplier_1 before "
            "num_iter, multiplier_2 after); a float scalar")


def _weighted_sum(types, attrs, n):
    if len(types) % 2:
        type_error(f"WeightedSum takes pairs (X0, w0, X1, w1, ...), got {len(types)} inputs",
                   "give a weight blob after every tensor")
    ts = floats("WeightedSum", types)
    x0 = ts[0]
    for k in range(0, len(ts), 2):
        x, w = ts[k], ts[k + 1]
        if x.shape is not None and x0.shape is not None and x.shape != x0.shape \
                and None not in x.shape + x0.shape:
            type_error(f"WeightedSum inputs must share a shape: {list(x0.shape)} and {list(x.shape)}",
                       "every X_i has the shape of X_0")
        if w.shape is not None and None not in w.shape and _size(w.shape) != 1:
            type_error(f"WeightedSum weight {k + 1} must hold one value, got shape {list(w.shape)}",
                       "weights are [1] tensors (ConstantFill(shape=[1]))")
    return [x0]


def _size(shape):
    out = 1
    for d in shape:
        out *= d
    return out


declare("WeightedSum", (2, None), _weighted_sum, attrs={"grad_on_w": 0}, traits={PURE},
        doc="Y = X0 w0 + X1 w1 + ... (weights are one-element tensors; `grad_on_w`: the gradient reaches "
            "the weights too)")


def _weighted_sum_grad(types, attrs, n):
    ts = tensors("WeightedSumGradient", types)
    xs, ws = ts[1::2], ts[2::2]
    return list(xs) + (list(ws) if attrs["grad_on_w"] else [])


declare("WeightedSumGradient", (3, None), _weighted_sum_grad, attrs={"grad_on_w": 0}, results=(1, None),
        traits={PURE}, shape_operands=lambda attrs, n: () if attrs.get("grad_on_w") else tuple(range(1, n, 2)), doc="(dX0, dX1, ...[, dw0, dw1, ...]) from (dY, X0, w0, X1, w1, ...): dXi = wi dY, "
                           "dwi = sum(dY Xi) when `grad_on_w`")
no_gradient("WeightedSumGradient")


@gradient("WeightedSum")
def _(g):
    pairs = range(0, len(g.I), 2)
    outs = [g.GI[k] for k in pairs] + ([g.GI[k + 1] for k in pairs] if g.args.get("grad_on_w") else [])
    return [GradOp("WeightedSumGradient", [g.GO[0]] + list(g.I), outs, g.pick("grad_on_w"))]


def _same(name, ts, pairs):
    for a, b in pairs:
        ta, tb = ts[a], ts[b]
        if ta.shape is not None and tb.shape is not None and ta.shape != tb.shape \
                and None not in ta.shape + tb.shape:
            type_error(f"{name}: input {b} has shape {list(tb.shape)}, input {a} has {list(ta.shape)}",
                       "the parameter, its gradient and its moments share one shape")


def _momentum_sgd(types, attrs, n):
    ts = floats("MomentumSGDUpdate", types)
    _same("MomentumSGDUpdate", ts, [(0, 1), (0, 3)])
    return [ts[0], ts[1], ts[3]]


declare("MomentumSGDUpdate", 4, _momentum_sgd, results=3, attrs={"momentum": 0.0, "nesterov": 0},
        traits={PURE},
        doc="(grad, moment, param) -> (adjusted grad, new moment, param - adjusted grad); "
            "adjusted = lr g + momentum m (nesterov: (1+mu) m' - mu m)")


def _float_moment(types, k):
    """``types`` with moment ``k`` typed as the parameter's floats when it holds integers:
    Caffe2's Adagrad writes its moment in place as floats, so a script may start it from
    integer zeros (DLRM feeds ``np.full(shape, 0)``); the kernels convert it."""
    p, m = types[0], types[k]
    if isinstance(m, TensorType) and isinstance(p, TensorType) and m.dtype in INT_DTYPES \
            and p.dtype in FLOAT_DTYPES:
        types = list(types)
        types[k] = TensorType(p.dtype, m.shape)
    return types


def _adagrad(types, attrs, n):
    ts = floats("Adagrad", _float_moment(types, 1))
    _same("Adagrad", ts, [(0, 1), (0, 2)])
    return [ts[0], ts[1], ts[0], ts[0]][:n]


declare("Adagrad", 4, _adagrad, results=(2, 4), attrs={"epsilon": 1e-5, "decay": 1.0, "weight_decay": 0.0,
                                                      "engine": ""},
        traits={PURE},
        doc="(param, moment, grad, lr) -> (param + u, m' = decay m + g^2[, e = lr / (sqrt(m') + epsilon)[, "
            "u = e g]]); g is grad + weight_decay param")


def _adam(types, attrs, n):
    ts = tensors("Adam", types)
    floats("Adam", types[:5])
    _same("Adam", ts, [(0, 1), (0, 2), (0, 3)])
    _iter(types[5:], attrs, 1)
    return [ts[0], ts[1], ts[2], ts[3]][:n]


declare("Adam", 6, _adam, results=(3, 4), attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-5, "engine": ""},
        traits={PURE},
        doc="(param, m1, m2, grad, lr, iter) -> (param + lr s, m1', m2'[, s]); s = c m1' / (sqrt(m2') + eps), "
            "c = sqrt(1 - beta2^t) / (1 - beta1^t), t = iter + 1")


# ----------------------------------------------------------------------------- sparse updates
# A sparse gradient is (INDICES, VALUES): VALUES[i] is the gradient of row INDICES[i]; the
# updates touch only those rows (dslc/autodiff/gradients.py, GradientSlice).

def _rows(name, data, idx, values):
    data, idx, values = tensors(name, [data, idx, values])  # (any: checked when run)
    indices(name, idx, "indices")
    if data.shape is not None and values.shape is not None and idx.shape is not None \
            and None not in data.shape + values.shape + idx.shape \
            and tuple(values.shape[len(idx.shape):]) != tuple(data.shape[1:]):
        type_error(f"{name}: a row of the values has shape {list(values.shape[len(idx.shape):])}, a row of "
                   f"the parameter {list(data.shape[1:])}",
                   "the values are rows of the parameter, one per index (shape indices.shape + row shape)")


def _scatter_weighted_sum(types, attrs, n):
    if len(types) < 5 or len(types) % 2 == 0:
        type_error(f"ScatterWeightedSum takes (DATA, W0, INDICES, X1, W1, ...), got {len(types)} inputs",
                   "give DATA, its weight, the indices, then (slices, weight) pairs")
    data, w0, idx, *rest = types
    ts = floats("ScatterWeightedSum", [data, w0] + rest)
    for k in range(2, len(ts), 2):
        _rows("ScatterWeightedSum", data, idx, ts[k])
    return [ts[0]]


declare("ScatterWeightedSum", (5, None), _scatter_weighted_sum, updates=(0,), traits={PURE},
        doc="(DATA, W0, INDICES, X1, W1, ...) -> DATA with each indexed row r = r w0 + X1[i] w1 + ... "
            "(every occurrence of a row scales it by w0, then all the slices add)")


def _sparse_adagrad(name):
    def infer(types, attrs, n):
        p, m, idx, g, lr, *counter = _float_moment(types, 1)
        ts = floats(name, [p, m, g, lr])
        _rows(name, p, idx, g)
        if counter:  # (RowWiseCounter's doubles: a float of any width)
            tensors(name, counter)
        return [ts[0], ts[1]]
    return infer


declare("SparseAdagrad", 5, _sparse_adagrad("SparseAdagrad"), results=2,
        attrs={"epsilon": 1e-5, "weight_decay": 0.0, "engine": ""}, updates=(0, 1), traits={PURE},
        doc="(param, moment, INDICES, grad rows, lr) -> (param, moment), per index in order: "
            "g += weight_decay p[r], m[r] += g^2, p[r] += lr g / (sqrt(m[r]) + epsilon)")
declare("RowWiseSparseAdagrad", (5, 6), _sparse_adagrad("RowWiseSparseAdagrad"), results=2,
        attrs={"epsilon": 1e-5, "weight_decay": 0.0, "counter_halflife": -1, "engine": ""}, updates=(0, 1), traits={PURE},
        doc="SparseAdagrad with one moment per row (a vector): m[r] += mean(g^2); an optional 6th input, "
            "the rows' update counters (RowWiseCounter), scales the weight decay of row r by "
            "counter_halflife / counter[r] (1 where the counter is 0)")


def _row_wise_counter(types, attrs, n):
    prev, counter, idx, it = tensors("RowWiseCounter", types)
    indices("RowWiseCounter", idx, "indices")
    return [prev, counter]


declare("RowWiseCounter", 4, _row_wise_counter, results=2, attrs={"counter_halflife": -1}, updates=(0, 1), traits={PURE},
        doc="(prev_iter, counter, INDICES, iter) -> (prev_iter, counter): for each index r in order, "
            "counter[r] = 1 + counter[r] 2^(-(iter - prev_iter[r]) / counter_halflife), prev_iter[r] = iter "
            "(how often each row is updated, decaying with a half-life in iterations)")
no_gradient("RowWiseCounter")


# ----------------------------------------------------------------------------- more updates (dense)

def _same_shapes(name, n_results, lr_at):
    """Every input but the learning rate (input ``lr_at``) has the first input's shape; the
    results are typed as the first inputs."""
    def infer(types, attrs, n):
        ts = floats(name, types)
        _same(name, ts, [(0, k) for k in range(1, len(ts)) if k != lr_at])
        return ts[:n_results]
    return infer


declare("MomentumSGD", 3, _same_shapes("MomentumSGD", 2, lr_at=2), results=2, attrs={"momentum": 0.0, "nesterov": 0},
        traits={PURE}, doc="(grad, moment, lr) -> (adjusted grad, moment'): m' = momentum m + lr g; adjusted = m' "
                           "(nesterov: (1 + momentum) m' - momentum m)")
declare("RmsProp", 4, _same_shapes("RmsProp", 3, lr_at=3), results=3, attrs={"decay": 0.9, "momentum": 0.0, "epsilon": 1e-5},
        traits={PURE}, doc="(grad, mean squares, moment, lr) -> (grad', ms', moment'): ms' = decay ms + (1 - decay) "
                           "g^2; moment' = momentum moment + lr g / sqrt(ms' + epsilon); grad' = moment'")
declare("Adadelta", 5, _same_shapes("Adadelta", 3, lr_at=4), results=3, attrs={"epsilon": 1e-5, "decay": 0.95, "engine": ""},
        traits={PURE}, doc="(param, ms, delta, grad, lr) -> (param', ms', delta'): ms' = decay ms + (1 - decay) g^2; "
                           "u = sqrt(delta + eps) / sqrt(ms' + eps) g; delta' = decay delta + (1 - decay) u^2; "
                           "param' = param + lr u")


def _ftrl(types, attrs, n):
    var, nz, g = floats("Ftrl", types)
    if var.shape is not None and nz.shape is not None and None not in var.shape + nz.shape \
            and tuple(nz.shape) != tuple(var.shape) + (2,):
        type_error(f"Ftrl's n_z has shape {list(nz.shape)}, not the parameter's {list(var.shape)} + [2]",
                   "n_z holds (n, z) per element")
    return [var, nz]


declare("Ftrl", 3, _ftrl, results=2, attrs={"alpha": 0.01, "beta": 1e-4, "lambda1": 0.0, "lambda2": 0.0,
                                            "engine": ""},
        traits={PURE}, doc="(param, n_z, grad) -> (param', n_z'): FTRL-proximal with per-element n (sum of g^2) "
                           "and z")
declare("GFtrl", 3, _ftrl, results=2, attrs={"alpha": 0.01, "beta": 1e-4, "lambda1": 0.0, "lambda2": 0.0,
                                             "engine": ""},
        traits={PURE}, doc="(param, n_z, grad) -> (param', n_z'): group-lasso FTRL: Ftrl's n and z, and the "
                           "lambda1 penalty on each column of the parameter seen as [dims[0], rest] "
                           "(a column whose z has norm <= lambda1 sqrt(dims[0]) becomes 0)")


# ----------------------------------------------------------------------------- more updates (sparse)

def _sparse_momentum(types, attrs, n):
    g, m, lr, p, idx = types
    ts = floats("SparseMomentumSGDUpdate", [g, m, lr, p])
    _rows("SparseMomentumSGDUpdate", p, idx, g)
    return [ts[0], ts[1], ts[3]]


declare("SparseMomentumSGDUpdate", 5, _sparse_momentum, results=3, attrs={"momentum": 0.0, "nesterov": 0},
        updates=(1, 3), traits={PURE}, doc="(grad rows, moment, lr, param, INDICES) -> (adjusted rows, moment, param), per index "
                           "in order: m[r] = momentum m[r] + lr g; p[r] -= the adjusted step")


def _sparse_adam(types, attrs, n):
    p, m1, m2, idx, g, lr, it = types
    ts = floats("SparseAdam", [p, m1, m2, g, lr])
    _rows("SparseAdam", p, idx, g)
    return [ts[0], ts[1], ts[2], ts[3]][:n]


declare("SparseAdam", 7, _sparse_adam, results=(3, 4), attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-5,
                                                          "enableRAdam": 0, "engine": ""},
        updates=(0, 1, 2), traits={PURE}, doc="(param, m1, m2, INDICES, grad rows, lr, iter) -> (param, m1, m2[, the step of "
                           "each grad row]), per index in order: Adam's update of that row (t = iter + 1); "
                           "enableRAdam: RAdam's (m1' / (1 - beta1^t) while rho_t <= 5, else Adam's step times the "
                           "rectifier)")


def _smart_decay_sparse_adam(types, attrs, n):
    p, m1, m2, last, idx, g, lr, it = types
    ts = floats("SmartDecaySparseAdam", [p, m1, m2, g, lr])
    _rows("SmartDecaySparseAdam", p, idx, g)
    indices("SmartDecaySparseAdam", last, "last_seen")
    return [ts[0], ts[1], ts[2], last, ts[3]][:n]


declare("SmartDecaySparseAdam", 8, _smart_decay_sparse_adam, results=(4, 5),
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-5}, updates=(0, 1, 2, 3), traits={PURE},
        doc="(param, m1, m2, last_seen, INDICES, grad rows, lr, iter) -> (param, m1, m2, last_seen[, "
            "effective grad]): Adam on the rows read, each row catching up the k = t - last_seen[r] "
            "steps it missed (m2 decays by beta2^k; param takes the k steps of the decaying m1), "
            "t = iter + 1; no bias correction; a row read again in the batch (k = 0) steps by its new m1")


def _row_wise_sparse_adam(types, attrs, n):
    p, m1, m2, idx, g, lr, it = types
    ts = floats("RowWiseSparseAdam", [p, m1, m2, g, lr])
    _rows("RowWiseSparseAdam", p, idx, g)
    if ts[2].shape is not None and len(ts[2].shape) != 1:
        type_error(f"RowWiseSparseAdam's second moment holds one value per row, got shape {list(ts[2].shape)}",
                   "make it [rows] (ConstantFill(shape=[param rows]))")
    return [ts[0], ts[1], ts[2], ts[3]][:n]


declare("RowWiseSparseAdam", 7, _row_wise_sparse_adam, results=(3, 4),
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-5, "engine": ""}, updates=(0, 1, 2), traits={PURE},
        doc="SparseAdam with one second moment per row [rows], from the mean of the row's squared gradient")


def _sparse_adadelta(types, attrs, n):
    p, ms, delta, idx, g, lr = types
    ts = floats("SparseAdadelta", [p, ms, delta, g, lr])
    _rows("SparseAdadelta", p, idx, g)
    return ts[:3]


declare("SparseAdadelta", 6, _sparse_adadelta, results=3, attrs={"epsilon": 1e-5, "decay": 0.95, "engine": ""},
        updates=(0, 1, 2), traits={PURE}, doc="(param, ms, delta, INDICES, grad rows, lr) -> (param, ms, delta), per index in "
                           "order: Adadelta's update of that row")


def _sparse_ftrl(types, attrs, n):
    w, nz, idx, g = types
    ts = floats("SparseFtrl", [w, nz, g])
    _rows("SparseFtrl", w, idx, g)
    return ts[:2]


declare("SparseFtrl", 4, _sparse_ftrl, results=2, attrs={"alpha": 0.01, "beta": 1e-4, "lambda1": 0.0,
                                                          "lambda2": 0.0, "engine": ""},
        updates=(0, 1), traits={PURE}, doc="(param, n_z, INDICES, grad rows) -> (param, n_z), per index in order: FTRL's "
                           "update of that row")
