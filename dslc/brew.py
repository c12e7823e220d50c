"""brew: layer helpers that add a layer's parameters and its op to a ModelHelper (Caffe2's ``brew``).

    fc1 = brew.fc(model, "data", "fc1", dim_in=64, dim_out=256)   # fc1_w, fc1_b + FC
    r1 = brew.relu(model, fc1, "r1")

Parameters are made in ``model.param_init_net`` (XavierFill weights and zero biases,
unless ``weight_init`` / ``bias_init`` say otherwise) and registered with their tags;
the layer's op goes into ``model.net``. Names take the current NameScope.
"""
from __future__ import annotations

from dslc.model_helper import ParameterTags


def _param(model, name, shape, init, tag):
    """Create (or, with ``model.init_params`` off, only name) one parameter."""
    op, args = init
    if model.init_params:
        blob = getattr(model.param_init_net, op)([], name, shape=list(shape), **args)
    else:
        from dslc import core
        blob = core.ScopedBlobReference(name, model.param_init_net)
    model.AddParameter(blob, tag)
    return blob


def fc(model, blob_in, blob_out, dim_in, dim_out, weight_init=None, bias_init=None, **kwargs):
    """Y = X W^T + b with W [dim_out, dim_in] (``<blob_out>_w``) and b [dim_out] (``<blob_out>_b``)."""
    w = _param(model, f"{blob_out}_w", [dim_out, dim_in], weight_init or ("XavierFill", {}),
               ParameterTags.WEIGHT)
    b = _param(model, f"{blob_out}_b", [dim_out], bias_init or ("ConstantFill", {}), ParameterTags.BIAS)
    kwargs.pop("enable_tensor_core", None)
    kwargs.pop("float16_compute", None)
    return model.net.FC([blob_in, w, b], blob_out, **kwargs)


def relu(model, blob_in, blob_out, **kwargs):
    return model.net.Relu(blob_in, blob_out, **_no_engine(kwargs))


def sigmoid(model, blob_in, blob_out, **kwargs):
    return model.net.Sigmoid(blob_in, blob_out, **_no_engine(kwargs))


def tanh(model, blob_in, blob_out, **kwargs):
    return model.net.Tanh(blob_in, blob_out, **_no_engine(kwargs))


def softmax(model, blob_in, blob_out=None, **kwargs):
    return model.net.Softmax(blob_in, blob_out, **_no_engine(kwargs))


def dropout(model, blob_in, blob_out, **kwargs):
    """Dropout with its mask in ``_<blob_out>_mask`` (Caffe2's name); ``is_test`` from the model."""
    kwargs = _no_engine(kwargs)
    kwargs.setdefault("is_test", int(model.arg_scope.get("is_test", 0)))
    return model.net.Dropout(blob_in, [blob_out, f"_{blob_out}_mask"], **kwargs)[0]


def add_weight_decay(model, weight_decay):
    """L2 regularization: every weight's gradient gets ``weight_decay * weight`` added (after
    AddGradientOperators, before the optimizer). Biases and other 1-D parameters are skipped."""
    from dslc.optimizer import add_weight_decay as add
    add(model, weight_decay, one="ONE", wd="wd")


def _no_engine(kwargs):
    """Caffe2's cuDNN switches mean nothing on a CPU backend."""
    return {k: v for k, v in kwargs.items() if k not in ("use_cudnn", "cudnn_exhaustive_search", "order")}
