"""Interpreter kernels of the neural-network ops: the numpy semantics of ir/ops/nn_math.py.

Most ops are ``nn_math.<fn>(*inputs, **attributes)``; the attributes a function takes
are bound once, when the op's kernel is made. Random ops draw from their op's seeded
stream (runtime/streams.py).
"""
from __future__ import annotations

import functools
import inspect
import sys
import weakref

import numpy as np

from dslc.runtime import collectives, logfiles
from dslc.runtime.derived import once
from dslc.runtime.streams import stream
from dslc.ir.budget import check_size
from dslc.ir.ops import (activations, adaptive, boxes, conv_fused, conv_math, features, losses, metrics, nn_grads,
                        normalization, norms, pointwise, products, quantized, recurrent, reductions, resample, segments, spatial, tt,
                        utility, yellowfin)
from dslc.ir.ops import nn_math as nm
from dslc.ir.ops import numeric as num
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import NUMPY_DTYPES

from .kernels import kernel

FUNCTIONS = {
    "FC": nm.fc, "FCGradient": nm.fc_grad, "MatMul": nm.matmul, "Transpose": nm.transpose,
    "ResizeLike": nm.resize_like, "Flatten": nm.flatten, "FlattenToVec": lambda x: x.reshape(-1).copy(),
    "NHWC2NCHW": lambda x: nm.transpose(x, (0, 3, 1, 2)), "NCHW2NHWC": lambda x: nm.transpose(x, (0, 2, 3, 1)),
    "ExpandDims": nm.expand_dims, "Squeeze": nm.squeeze, "Slice": nm.slice_, "SliceGradient": nm.slice_grad,
    "Gather": nm.gather, "BatchGather": nm.batch_gather, "BatchGatherGradient": nm.batch_gather_grad,
    "SparseToDense": nm.sparse_to_dense,
    "SumElements": nm.sum_elements, "SumElementsInt": nm.sum_elements, "SumElementsGradient": nm.sum_elements_grad,
    "ReduceSum": nm.reduce_sum, "ReduceMean": nm.reduce_mean,
    "ReduceSumGradient": nm.reduce_sum_grad, "ReduceMeanGradient": nm.reduce_mean_grad,
    "RowWiseArgMax": nm.row_wise_arg_max, "Sigmoid": nm.sigmoid, "SigmoidGradient": nm.sigmoid_grad,
    "Tanh": nm.tanh, "TanhGradient": nm.tanh_grad, "ReluGradient": nm.relu_grad,
    "Softmax": nm.softmax, "SoftmaxGradient": nm.softmax_grad, "Clip": nm.clip, "ClipGradient": nm.clip_grad,
    "LabelCrossEntropy": nm.label_cross_entropy, "LabelCrossEntropyGradient": nm.label_cross_entropy_grad,
    "SoftmaxWithLoss": nm.softmax_with_loss, "SoftmaxWithLossGradient": nm.softmax_with_loss_grad,
    "SquaredL2Distance": nm.squared_l2_distance, "SquaredL2DistanceGradient": nm.squared_l2_distance_grad,
    "AveragedLoss": nm.averaged_loss, "AveragedLossGradient": nm.averaged_loss_grad,
    "Accuracy": nm.accuracy, "StopGradient": num.copy, "ZeroGradient": lambda x: None,
    "DropoutGrad": nm.dropout_grad, "Iter": nm.iter_, "LearningRate": nm.learning_rate,
    "WeightedSum": nm.weighted_sum, "WeightedSumGradient": nm.weighted_sum_grad, "MomentumSGDUpdate": nm.momentum_sgd_update,
    "SumReduceLike": nm.sum_reduce_like,
    "FCTransposed": nm.fc_transposed, "FCTransposedGradient": nm.fc_transposed_grad,

    "SigmoidCrossEntropyWithLogits": nm.sigmoid_cross_entropy_with_logits,
    "SigmoidCrossEntropyWithLogitsGradient": nm.sigmoid_cross_entropy_with_logits_grad,
    "WeightedSigmoidCrossEntropyWithLogits": nm.weighted_sigmoid_cross_entropy_with_logits,
    "WeightedSigmoidCrossEntropyWithLogitsGradient": nm.weighted_sigmoid_cross_entropy_with_logits_grad,
    "AbsGradient": nm.abs_grad, "MaxGradient": nm.pick_grad, "MinGradient": nm.pick_grad,
    "MomentumSGD": nm.momentum_sgd, "RmsProp": nm.rms_prop, "Adadelta": nm.adadelta, "Ftrl": nm.ftrl,
    "GFtrl": nm.gftrl,
    "CrossEntropy": nm.cross_entropy, "CrossEntropyGradient": nm.cross_entropy_grad,
    "MakeTwoClass": nm.make_two_class, "MakeTwoClassGradient": nm.make_two_class_grad,
    **activations.FUNCTIONS, **segments.FUNCTIONS, **products.FUNCTIONS, **conv_math.FUNCTIONS,
    **conv_fused.FUNCTIONS,
    **normalization.FUNCTIONS, **reductions.FUNCTIONS, **utility.FUNCTIONS, **recurrent.FUNCTIONS, **nn_grads.FUNCTIONS, **collectives.FUNCTIONS, **adaptive.FUNCTIONS, **losses.FUNCTIONS,
    **quantized.FUNCTIONS, **norms.FUNCTIONS, **pointwise.FUNCTIONS, **spatial.FUNCTIONS,
    **boxes.FUNCTIONS, **resample.FUNCTIONS, **features.FUNCTIONS, **tt.FUNCTIONS, **metrics.FUNCTIONS,
    **yellowfin.FUNCTIONS,
}


def bound(fn, attrs: dict):
    """``fn`` with the attributes it names bound as keywords (the rest it does not take)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return functools.partial(fn, **attrs)
    return functools.partial(fn, **{k: v for k, v in attrs.items() if k in params})


# Sparse updates: they may overwrite the operands their declaration's ``updates`` names
# (their parameter, its moments).
IN_PLACE = {"ScatterWeightedSum": nm.scatter_weighted_sum,
            "SparseAdagrad": nm.sparse_adagrad,
            "RowWiseSparseAdagrad": nm.row_wise_sparse_adagrad,
            "RowWiseCounter": nm.row_wise_counter,
            "SparseMomentumSGDUpdate": nm.sparse_momentum_sgd_update,
            "SparseAdam": nm.sparse_adam,
            "RowWiseSparseAdam": nm.row_wise_sparse_adam,
            "SmartDecaySparseAdam": nm.smart_decay_sparse_adam,
            "SparseAdadelta": nm.sparse_adadelta,
            "SparseFtrl": nm.sparse_ftrl}


def _last_use(op, k: int) -> bool:
    """Whether operand ``k`` is a blob loaded in ``op``'s region or one around it (not a
    constant of the program, nor a loop's value) that nothing uses after ``op`` or beside it
    (a concurrent sibling could read it while ``op`` writes)."""
    value = op.operands[k]
    owner = getattr(value, "owner", None)  # (a region argument has none)
    if owner is None or owner.name != "load":
        return False
    region = owner.parent
    here = _ancestor_in(op, region)
    if here is None:
        return False
    at = region.ops.index(here)
    for user, _ in value.uses:
        if user is op:
            continue
        there = _ancestor_in(user, region)
        if there is None or there is here or region.ops.index(there) > at:
            return False
    return True


def _ancestor_in(op, region):
    """``op``, or the op of ``region`` that holds it in one of its regions (None if none does)."""
    while op is not None and op.parent is not region:
        op = op.parent.parent if op.parent is not None else None
    return op


def _owned(x) -> bool:
    """Whether only the workspace cell it was loaded from and this call hold array ``x``."""
    # the cell, the generated code's variable, the call's argument tuple, ``x``, getrefcount's argument
    return (isinstance(x, np.ndarray) and sys.getrefcount(x) <= 5 and x.base is None
            and x.flags.writeable and x.flags.c_contiguous)


def _in_place(fn):
    """A sparse update's kernel: it writes into its parameter (and moments: the operands
    its declaration ``updates``) when the IR has no later use of their values and nothing
    else holds their arrays (a view, another blob), so a step touches only the rows it
    reads; otherwise it updates copies."""
    def make(op, cfg):
        operands = op.opdef.updates
        f = bound(fn, op.attrs)
        if not all(_last_use(op, k) for k in operands):
            return lambda *xs: _results(f(*xs), len(op.results))

        n = len(op.results)  # (an update may have optional outputs: SparseAdam's steps)

        def update(*xs):
            return _results(f(*xs, inplace=all(_owned(xs[k]) for k in operands)), n)
        return update
    return make


for _name, _fn in IN_PLACE.items():
    kernel(_name)(_in_place(_fn))


def _plain(fn):
    return lambda op, cfg: bound(fn, op.attrs)


for _name, _fn in FUNCTIONS.items():
    kernel(_name)(_plain(_fn))


@kernel("ConvFused")
def _conv_fused(op, cfg):  # (batch norm folded into weights nothing can write, once: runtime/derived.py)
    return bound(functools.partial(conv_fused.conv_fused, once=once), op.attrs)


@kernel("ConvGradient")
def _conv_grad(op, cfg):  # (without dX, its optional result, where the op does not name it)
    return bound(functools.partial(conv_math.conv_grad, with_dx=bool(op.opdef.optional(op))), op.attrs)


@kernel("FCGradient")
def _fc_grad(op, cfg):  # (without its optional dX when the op has only two results)
    return bound(functools.partial(nm.fc_grad, with_dx=len(op.results) == 3), op.attrs)


def _results(out, n: int):
    """The first ``n`` of a kernel's results (a tuple; a single array is one result)."""
    if not isinstance(out, tuple):
        return out
    return out[0] if n == 1 else out[:n]


@kernel("SparseToDenseMask")
def _sparse_to_dense_mask(op, cfg):  # (the presence mask only when the op names it)
    return bound(functools.partial(features.sparse_to_dense_mask, n_out=len(op.results)), op.attrs)


@kernel("InstanceNorm")
def _instance_norm(op, cfg):  # (the saved mean and inverse std only when the op names them)
    return bound(functools.partial(spatial.instance_norm, n_out=len(op.results)), op.attrs)


def _counted(fn):  # (an op whose kernel makes only the outputs the op names)
    return lambda op, cfg: bound(functools.partial(fn, n_out=len(op.results)), op.attrs)


for _name, _fn in boxes.COUNTED.items():
    kernel(_name)(_counted(_fn))


@kernel("TopK")
def _top_k(op, cfg):  # (the flat indices only when the op names a third result)
    f, n = bound(norms.top_k, op.attrs), len(op.results)
    return lambda x: _results(f(x), n)


@kernel("Wngrad")
def _wngrad(op, cfg):  # (the effective learning rate and the update as outputs when named)
    return bound(functools.partial(adaptive.wngrad, n_out=len(op.results)), op.attrs)


@kernel("Summarize", per_instance=True)
def _summarize(op, cfg):
    files = logfiles.LogFiles() if op.attrs["to_file"] else None
    name, n = op.attrs.get("blob") or "tensor", len(op.results)

    def make(inst):
        file = logfiles.path(inst.ws.root(), name, ".summary") if files is not None else None

        def summarize(x):
            stats = utility.summarize(x)
            if file is not None:
                files.write(file, logfiles.summary_line(stats))
            return stats if n else None
        return summarize
    return make


@kernel("AccumulateHistogram", per_instance=True)
def _accumulate_histogram(op, cfg):
    args = {k: op.attrs[k] for k in ("lower_bound", "upper_bound", "num_buckets")}

    totals = weakref.WeakKeyDictionary()  # workspace -> the sum over this op's runs in it

    def make(inst):  # (the op adds up its own histogram over the runs of its net, as Caffe2's operator does)
        total = totals.setdefault(inst.ws, np.zeros(int(args["num_buckets"]) + 2, np.int64))

        def accumulate(x):
            cur = metrics.histogram(x, **args)
            total[:] += cur
            return cur, total.copy()
        return accumulate
    return make


@kernel("Unique")
def _unique(op, cfg):  # (the remapping only when named)
    n = len(op.results)
    return lambda x: _results(utility.unique(x), n)


@kernel("Adam")
def _adam(op, cfg):  # (the step before the learning rate is a 4th output when named)
    return bound(functools.partial(nm.adam, n_out=len(op.results)), op.attrs)


@kernel("LRN")
def _lrn(op, cfg):
    f = bound(normalization.lrn, op.attrs)
    return f if len(op.results) == 2 else (lambda x: f(x)[0])  # (the scale only when named)


@kernel("Adagrad")
def _adagrad(op, cfg):
    return functools.partial(bound(nm.adagrad, op.attrs), n_results=len(op.results))


@kernel("Reshape")
def _reshape(op, cfg):
    shape = tuple(int(d) for d in op.attrs["shape"] or ())  # (none: the shape is the second input)
    if len(op.results) == 2:
        return lambda x, new_shape=None: nm.reshape(x, new_shape, shape)
    return lambda x, new_shape=None: nm.reshape(x, new_shape, shape)[0]


def _seed(cfg) -> int:
    return int(getattr(cfg, "seed", 0) or 0)


def op_stream(op, cfg):
    """``make(inst)`` giving the seeded generator random op ``op`` draws from in that
    instance's workspace (the numba backend passes the same one to its compiled kernels)."""
    seed, random_seed = _seed(cfg), int(op.attrs["random_seed"])
    key = (op.attrs["output_names"] or [""])[0]
    return lambda inst: stream(inst.ws, seed, random_seed, key)


def _draw(name, attrs, gen, shape):
    dt = NUMPY_DTYPES[dtype_from_code(name, attrs["dtype"])]
    check_size(name, shape, np.float64)  # (numpy draws 8-byte values, then casts)
    if name == "GaussianFill":
        out = gen.normal(attrs["mean"], attrs["std"], shape)
    elif name in ("UniformFill", "Float16UniformFill"):
        out = gen.uniform(attrs["min"], attrs["max"], shape)
    elif name == "UniformIntFill":
        if int(attrs["min"]) > int(attrs["max"]):
            raise ValueError(f"UniformIntFill: min {attrs['min']} is above max {attrs['max']}")
        out = gen.integers(int(attrs["min"]), int(attrs["max"]), shape, endpoint=True)
    elif name == "XavierFill":
        size = int(np.prod(shape))
        s = np.sqrt(3.0 / (size / shape[0])) if size else 0.0
        out = gen.uniform(-s, s, shape)
    else:  # MSRAFill
        size = int(np.prod(shape))
        out = gen.normal(0.0, np.sqrt(2.0 / (size / shape[1])) if size else 0.0, shape)
    return out.astype(dt)


def _fill_shape(attrs, x):
    if x is None:
        return tuple(int(d) for d in attrs["shape"])
    if attrs["input_as_shape"]:
        return tuple(int(d) for d in np.asarray(x).reshape(-1))
    return np.shape(x) + tuple(attrs["extra_shape"] or ())


def _random_fill(name):
    @kernel(name, per_instance=True)
    def factory(op, cfg):
        attrs, gen_of = op.attrs, op_stream(op, cfg)

        def make(inst):
            gen = gen_of(inst)

            def fill(x=None, lo=None, hi=None):
                shape, a = _fill_shape(attrs, x), attrs
                if lo is not None:  # (Uniform*Fill's bounds as inputs; max below min: nothing drawn)
                    a = dict(attrs, min=np.asarray(lo).reshape(-1)[0].item(), max=np.asarray(hi).reshape(-1)[0].item())
                    if a["max"] < a["min"]:
                        shape = (0,) + tuple(shape[1:])
                        a["max"] = a["min"]
                return _draw(name, a, gen, shape)
            return fill
        return make
    return factory


for _name in ("GaussianFill", "UniformFill", "Float16UniformFill", "UniformIntFill", "XavierFill", "MSRAFill"):
    _random_fill(_name)


def _sparse_dropout_kernel(name, fn, per_example):
    @kernel(name, per_instance=True)
    def make_kernel(op, cfg):
        gen_of = op_stream(op, cfg)
        ratio, value = float(op.attrs["ratio"]), int(op.attrs["replacement_value"])

        def make(inst):
            gen = gen_of(inst)
            return lambda values, lengths: fn(values, lengths, gen.random(len(lengths) if per_example else len(values)),
                                              ratio, value)
        return make


_sparse_dropout_kernel("SparseDropoutWithReplacement", losses.sparse_dropout, True)
_sparse_dropout_kernel("SparseItemwiseDropoutWithReplacement", losses.sparse_itemwise_dropout, False)


@kernel("UniqueUniformFill", per_instance=True)
def _unique_uniform_fill(op, cfg):
    attrs, gen_of = op.attrs, op_stream(op, cfg)
    dt = NUMPY_DTYPES[dtype_from_code("UniqueUniformFill", attrs["dtype"])]

    def make(inst):
        gen = gen_of(inst)

        def fill(shape, avoid=None):
            n = int(np.prod(np.asarray(shape).reshape(-1)))
            lo, hi = int(attrs["min"]), int(attrs["max"])
            check_size("UniqueUniformFill", (max(hi - lo + 1, 0),), np.int64)  # (the pool drawn from)
            pool = np.setdiff1d(np.arange(lo, hi + 1), [] if avoid is None else np.asarray(avoid).reshape(-1))
            if n > len(pool):
                raise ValueError(f"UniqueUniformFill: {n} distinct values asked for, {len(pool)} available")
            return gen.choice(pool, size=n, replace=False).astype(dt)
        return fill
    return make


@kernel("Dropout", per_instance=True)
def _dropout(op, cfg):
    attrs, gen_of = op.attrs, op_stream(op, cfg)
    ratio, is_test, two = float(attrs["ratio"]), int(attrs["is_test"]), len(op.results) == 2

    def make(inst):
        gen = gen_of(inst)

        def run(x):
            draws = None if is_test or ratio == 0 else gen.random(x.shape)
            y, mask = nm.dropout(x, draws, ratio, is_test)
            return (y, mask) if two else y
        return run
    return make
