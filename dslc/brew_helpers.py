"""The layer helpers brew registers (Caffe2's ``helpers/``): each adds a layer's parameters
to ``model.param_init_net`` (through ``model.create_param`` and an initializer) and its
ops to ``model.net``. Call them as ``brew.<helper>(model, ...)``: brew adds the model's
and the enclosing ``arg_scope``'s arguments (dslc/brew.py).

A helper whose operator dslc does not have yet (Conv, MaxPool, SpatialBN ...) still
makes its parameters, then stops at the op with a located "unknown operator" error.
"""
from __future__ import annotations

from dslc.modeling import initializers
from dslc.modeling.parameter_info import ParameterTags
from dslc import core, optimizer
from dslc.control_ops_util import add_if_op, add_while_op

# Caffe2's cuDNN switches mean nothing on a CPU backend; ``order`` (from the model's arg
# scope) means nothing to the ops that are not convolutions or pools.
_IGNORED = ("use_cudnn", "cudnn_exhaustive_search", "ws_nbytes_limit", "exhaustive_search", "order")


def _plain(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in _IGNORED}


def _cudnn(kwargs: dict, use_cudnn, exhaustive_search=None) -> dict:
    """Name the cuDNN engine as Caffe2's helpers do when ``use_cudnn`` (the model's arg scope
    says so by default). No dslc backend has that engine, so the op runs as any other, as on
    Caffe2's CPU build; the name is kept so the op's proto says what Caffe2's says."""
    requested = kwargs.get("engine")
    if requested is not None and bool(use_cudnn) != (requested == "CUDNN"):
        raise ValueError(f"use_cudnn={bool(use_cudnn)} does not go with engine={requested!r}: "
                         "with use_cudnn=True the engine can only be 'CUDNN', without it anything but")
    if use_cudnn:
        kwargs["engine"] = "CUDNN"
        if exhaustive_search is not None:
            kwargs["exhaustive_search"] = int(bool(exhaustive_search))
    return kwargs


def _initializer(cls, init, default, model):
    if not model.init_params:
        return initializers.ExternalInitializer()
    return initializers.update_initializer(cls, init, default)


# ----------------------------------------------------------------------------- dense layers

def fc(model, blob_in, blob_out, dim_in, dim_out, weight_init=None, bias_init=None, WeightInitializer=None,
       BiasInitializer=None, enable_tensor_core=False, float16_compute=False, **kwargs):
    """Y = X W^T + b with W [dim_out, dim_in] (``<blob_out>_w``, XavierFill) and b [dim_out]
    (``<blob_out>_b``, zeros)."""
    blob_out = blob_out or model.net.NextName()
    w = model.create_param(f"{blob_out}_w", [dim_out, dim_in],
                           _initializer(WeightInitializer, weight_init, ("XavierFill", {}), model),
                           ParameterTags.WEIGHT)
    bias_tags = [ParameterTags.BIAS] + ([ParameterTags.COMPUTED_PARAM] if "freeze_bias" in kwargs else [])
    b = model.create_param(f"{blob_out}_b", [dim_out], _initializer(BiasInitializer, bias_init,
                                                                    ("ConstantFill", {}), model), bias_tags)
    kwargs.pop("freeze_bias", None)
    return model.net.FC([blob_in, w, b], blob_out, **_plain(kwargs))


def mat_mul(model, blob_in, blob_out, **kwargs):
    return model.net.MatMul(blob_in, blob_out, **kwargs)


def batch_mat_mul(model, blob_in, blob_out, enable_tensor_core=False, **kwargs):
    return model.net.BatchMatMul(blob_in, blob_out, **kwargs)


def transpose(model, blob_in, blob_out, use_cudnn=False, **kwargs):
    return model.net.Transpose(blob_in, blob_out, **_plain(kwargs))


def sum(model, blob_in, blob_out, **kwargs):
    return model.net.Sum(blob_in, blob_out, **kwargs)


def sub(model, blob_in, blob_out, **kwargs):
    return model.net.Sub(blob_in, blob_out, **kwargs)


def reduce_sum(model, blob_in, blob_out, **kwargs):
    return model.net.ReduceSum(blob_in, blob_out, **kwargs)


def arg_min(model, blob_in, blob_out, **kwargs):
    return model.net.ArgMin(blob_in, blob_out, **kwargs)


# ----------------------------------------------------------------------------- nonlinearities

def relu(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):
    return model.net.Relu(blob_in, blob_out, **_cudnn(_plain(kwargs), use_cudnn))


def tanh(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):
    return model.net.Tanh(blob_in, blob_out, **_cudnn(_plain(kwargs), use_cudnn))


def sigmoid(model, blob_in, blob_out, **kwargs):
    return model.net.Sigmoid(blob_in, blob_out, **_plain(kwargs))


def softmax(model, blob_in, blob_out=None, use_cudnn=False, **kwargs):
    return model.net.Softmax(blob_in, blob_out, **_cudnn(_plain(kwargs), use_cudnn))


def prelu(model, blob_in, blob_out, num_channels=1, slope_init=None, **kwargs):
    """PRelu with a per-channel slope ``<blob_out>_slope`` (0.25 by default)."""
    slope = model.create_param(f"{blob_out}_slope", [num_channels],
                               _initializer(None, slope_init, ("ConstantFill", {"value": 0.25}), model),
                               ParameterTags.WEIGHT)
    return model.net.PRelu([blob_in, slope], [blob_out])


def dropout(model, blob_in, blob_out, use_cudnn=False, **kwargs):
    """Dropout with its mask in ``_<blob_out>_mask`` (Caffe2's name); ``is_test`` from the model."""
    kwargs = _plain(kwargs)
    kwargs.pop("order", None)
    kwargs.setdefault("is_test", int(model.arg_scope.get("is_test", 0)))
    return model.net.Dropout(blob_in, [blob_out, f"_{blob_out}_mask"], **kwargs)[0]


# ----------------------------------------------------------------------------- arrays

def concat(model, blobs_in, blob_out, **kwargs):
    """Concat along the channel axis (1 for NCHW, 3 for NHWC) unless ``axis`` is given."""
    order = kwargs.pop("order", "NCHW")
    kwargs.setdefault("axis", 1 if order == "NCHW" else 3)
    return model.net.Concat(blobs_in, [blob_out, f"_{blob_out}_concat_dims"], **kwargs)[0]


def depth_concat(model, blobs_in, blob_out, **kwargs):
    return concat(model, blobs_in, blob_out, **kwargs)


# ----------------------------------------------------------------------------- training

def iter(model, blob_out, **kwargs):
    """An int64 iteration counter made once in the init net and counted up by ``model.net``."""
    if "device_option" in kwargs:
        del kwargs["device_option"]
    model.param_init_net.ConstantFill([], blob_out, shape=[1], value=0, dtype=core.DataType.INT64)
    return model.net.Iter(blob_out, blob_out, **kwargs)


def accuracy(model, blob_in, blob_out, **kwargs):
    return model.net.Accuracy(blob_in, blob_out, **kwargs)


def add_weight_decay(model, weight_decay):
    """L2 regularization: the gradient of every parameter tagged a weight (biases are not)
    gets ``weight_decay * weight`` added (after AddGradientOperators, before the optimizer);
    nothing when ``weight_decay <= 0``, as in Caffe2."""
    if weight_decay <= 0.0:
        return
    optimizer.add_weight_decay(model, weight_decay, one="ONE", wd="wd")


# ----------------------------------------------------------------------------- convolutional nets

def conv(model, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None,
         WeightInitializer=None, BiasInitializer=None, group=1, transform_inputs=None, use_cudnn=False,
         order="NCHW", cudnn_exhaustive_search=False, ws_nbytes_limit=None, float16_compute=False,
         **kwargs):
    """Conv with weights ``<blob_out>_w`` [dim_out, dim_in / group, k, k] (NCHW) and bias ``_b``."""
    kernels = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel, kernel]
    shape = ([dim_out, dim_in // group] + kernels) if order == "NCHW" else ([dim_out] + kernels + [dim_in // group])
    w = model.create_param(f"{blob_out}_w", shape, _initializer(WeightInitializer, weight_init,
                                                                 ("XavierFill", {}), model), ParameterTags.WEIGHT)
    inputs = [blob_in, w]
    if not kwargs.pop("no_bias", False):
        inputs.append(model.create_param(f"{blob_out}_b", [dim_out], _initializer(
            BiasInitializer, bias_init, ("ConstantFill", {}), model), ParameterTags.BIAS))
    if isinstance(kernel, (list, tuple)):
        kwargs["kernels"] = kernels
    else:
        kwargs["kernel"] = kernel
    if group != 1:
        kwargs["group"] = group
    return model.net.Conv(inputs, blob_out, order=order, **_cudnn(kwargs, use_cudnn, cudnn_exhaustive_search))


def conv_transpose(model, blob_in, blob_out, dim_in, dim_out, kernel, weight_init=None, bias_init=None,
                   use_cudnn=False, order="NCHW", cudnn_exhaustive_search=False, ws_nbytes_limit=None, **kwargs):
    """ConvTranspose with weights ``<blob_out>_w`` [dim_in, dim_out, k, k] and bias ``_b``."""
    w = model.create_param(f"{blob_out}_w", [dim_in, dim_out, kernel, kernel],
                           _initializer(None, weight_init, ("XavierFill", {}), model), ParameterTags.WEIGHT)
    b = model.create_param(f"{blob_out}_b", [dim_out], _initializer(None, bias_init, ("ConstantFill", {}), model),
                           ParameterTags.BIAS)
    return model.net.ConvTranspose([blob_in, w, b], blob_out, kernel=kernel, order=order,
                                   **_cudnn(kwargs, use_cudnn, cudnn_exhaustive_search))


def max_pool(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):
    return model.net.MaxPool(blob_in, blob_out, order=order, **_cudnn(_plain(kwargs), use_cudnn))


def average_pool(model, blob_in, blob_out, use_cudnn=False, order="NCHW", **kwargs):
    return model.net.AveragePool(blob_in, blob_out, order=order, **_cudnn(_plain(kwargs), use_cudnn))


def spatial_bn(model, blob_in, blob_out, dim_in, init_scale=1.0, init_bias=0.0, ScaleInitializer=None,
               BiasInitializer=None, RunningMeanInitializer=None, RunningVarianceInitializer=None,
               order="NCHW", **kwargs):
    """SpatialBN with scale ``<blob_out>_s``, bias ``_b`` and running stats ``_rm``, ``_riv``."""
    fill = ("ConstantFill", {})
    scale = model.create_param(f"{blob_out}_s", [dim_in], _initializer(
        ScaleInitializer, ("ConstantFill", {"value": init_scale}), fill, model), ParameterTags.WEIGHT)
    bias = model.create_param(f"{blob_out}_b", [dim_in], _initializer(
        BiasInitializer, ("ConstantFill", {"value": init_bias}), fill, model), ParameterTags.BIAS)
    mean = model.create_param(f"{blob_out}_rm", [dim_in], _initializer(
        RunningMeanInitializer, ("ConstantFill", {"value": 0.0}), fill, model), ParameterTags.COMPUTED_PARAM)
    var = model.create_param(f"{blob_out}_riv", [dim_in], _initializer(
        RunningVarianceInitializer, ("ConstantFill", {"value": 1.0}), fill, model), ParameterTags.COMPUTED_PARAM)
    ins = [blob_in, scale, bias, mean, var]
    if kwargs.get("is_test", False):
        return model.net.SpatialBN(ins, [blob_out], order=order, **kwargs)
    outs = [blob_out, mean, var, f"{blob_out}_sm", f"{blob_out}_siv"]
    return model.net.SpatialBN(ins, outs, order=order, **kwargs)[0]


def instance_norm(model, blob_in, blob_out, dim_in, order="NCHW", **kwargs):
    """InstanceNorm with scale ``<blob_out>_s`` (ones) and bias ``_b`` (zeros); in training it also
    writes the saved mean ``_sm`` and inverse std ``_siv``."""
    blob_out = blob_out or model.net.NextName()
    fill = ("ConstantFill", {})
    scale = model.create_param(f"{blob_out}_s", [dim_in], _initializer(None, ("ConstantFill", {"value": 1.0}), fill,
                                                                       model), ParameterTags.WEIGHT)
    bias = model.create_param(f"{blob_out}_b", [dim_in], _initializer(None, ("ConstantFill", {"value": 0.0}), fill,
                                                                      model), ParameterTags.BIAS)
    ins = [blob_in, scale, bias]
    if kwargs.get("is_test", False):
        return model.net.InstanceNorm(ins, [blob_out], order=order, **kwargs)
    return model.net.InstanceNorm(ins, [blob_out, f"{blob_out}_sm", f"{blob_out}_siv"], order=order, **kwargs)[0]


def lrn(model, blob_in, blob_out, order="NCHW", use_cudnn=False, **kwargs):
    return model.net.LRN(blob_in, [blob_out, "_" + blob_out + "_scale"], order=order, **kwargs)[0]


# ----------------------------------------------------------------------------- data input

def db_input(model, blobs_out, batch_size, db, db_type, **kwargs):
    """A reader of ``db`` made once (init net) and a TensorProtosDBInput reading ``batch_size``
    records per run into ``blobs_out`` (``kwargs``: the op's other arguments)."""
    reader = model.param_init_net.CreateDB([], f"dbreader_{db}", db=db, db_type=db_type)
    return model.net.TensorProtosDBInput(reader, blobs_out, batch_size=batch_size, **kwargs)


# ----------------------------------------------------------------------------- control flow

def cond(model, cond_blob, external_blobs, then_model, else_model=None):
    """An If op: ``then_model``'s net when ``cond_blob`` holds, else ``else_model``'s; the
    branches share with the model only ``external_blobs``."""
    add_if_op(model.net, cond_blob, external_blobs, then_model.net, else_model.net if else_model else None)


def loop(model, cond_blob, external_blobs, loop_model, cond_model=None):
    """A While op: ``loop_model``'s net while ``cond_blob`` holds (``cond_model``'s net
    computes it before each iteration)."""
    add_while_op(model.net, cond_blob, external_blobs, loop_model.net, cond_model.net if cond_model else None)


# the helpers brew registers, by name (Caffe2's registry lists the same names)
HELPERS = {f.__name__: f for f in (fc, mat_mul, batch_mat_mul, transpose, sum, sub, reduce_sum, arg_min,
                                   relu, tanh, sigmoid, softmax, prelu, dropout, concat, depth_concat, iter,
                                   accuracy, add_weight_decay, conv, conv_transpose, max_pool, average_pool, spatial_bn, instance_norm, lrn,
                                   db_input, cond, loop)}
