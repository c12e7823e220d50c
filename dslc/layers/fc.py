"""Fully connected layers: ``FC`` (weights ``w`` [out, in], bias ``b``), ``FCWithoutBias``
(a MatMul) and ``AddBias``; FC optionally split along the output into pieces of at most
``max_fc_size`` weights, transposed weights [in, out], clipped parameters, axis > 1."""
from __future__ import annotations

import math

import numpy as np

from dslc import core, schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.trace.tracing import user_location


def _input_dims(layer, input_record, axis=1):
    if not isinstance(input_record, schema.Scalar):
        raise LayerError(f"{layer} takes a Scalar record, got {input_record}", user_location(3))
    shape = input_record.field_types()[0].shape
    if len(shape) == 0:
        raise LayerError(f"{layer} needs the input's dimensions in its schema (Scalar((np.float32, (n,))))",
                         user_location(3))
    dims = int(np.prod(shape[axis - 1:]))
    if dims <= 0:
        raise LayerError(f"{layer} needs input dimensions > 0, got {dims}", user_location(3))
    return dims


def _uniform(scale):
    return ("UniformFill", {"min": -scale, "max": scale})


def fc_output_dims(max_fc_size, input_dim, output_dim):
    """The output sizes of the pieces an FC of ``input_dim`` x ``output_dim`` weights is
    split into so that each holds at most ``max_fc_size`` weights (None: not split)."""
    if not max_fc_size or max_fc_size < 0:
        return None
    if max_fc_size < input_dim:
        raise LayerError(f"max_fc_size ({max_fc_size}) must be at least the input dimension ({input_dim}): "
                         "FC is split along its output", user_location(3))
    per_piece = max_fc_size // input_dim
    pieces = (output_dim - 1) // per_piece + 1
    sizes = [per_piece] * (pieces - 1)
    return sizes + [output_dim - sum(sizes)]


class FC(ModelLayer):
    """y = x w^T + b over the last dims of x from ``axis`` on (Caffe2's FC operator)."""

    def __init__(self, model, input_record, output_dims, weight_init=None, bias_init=None, weight_optim=None,
                 bias_optim=None, name="fc", weight_reg=None, bias_reg=None, clip_param=None, max_fc_size=None,
                 axis=1, transposed=False, uniform_weight_init_scale_numerator=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if axis < 1:
            raise LayerError(f"FC's axis is >= 1, got {axis}", user_location())
        self.axis = axis
        input_dims = _input_dims("FC", input_record, axis)
        self.clip_args = None
        if clip_param is not None:
            if len(clip_param) != 2:
                raise LayerError("clip_param is (clip_min, clip_max)", user_location())
            lo, hi = clip_param
            if lo is None and hi is None or (lo is not None and hi is not None and lo >= hi):
                raise LayerError(f"clip_param {clip_param}: give clip_min < clip_max (one may be None)",
                                 user_location())
            self.clip_args = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        scale = math.sqrt((uniform_weight_init_scale_numerator or 1.0) / input_dims)
        weight_init = weight_init or _uniform(scale)
        bias_init = bias_init or _uniform(scale)
        self.output_dim_vec = fc_output_dims(max_fc_size, input_dims, output_dims)
        self.transposed = transposed

        def weight_shape(out):
            return [input_dims, out] if transposed else [out, input_dims]
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            self.w = self.create_param("w", weight_shape(output_dims), weight_init, weight_optim,
                                       regularizer=weight_reg)
            self.b = self.create_param("b", [output_dims], bias_init, bias_optim, regularizer=bias_reg)
        else:
            # (as in Caffe2, the pieces' biases take the weights' initializer, optimizer and regularizer)
            self.w_vec = [self.create_param(f"w_sub_{i}", weight_shape(d), weight_init, weight_optim,
                                            regularizer=weight_reg) for i, d in enumerate(self.output_dim_vec)]
            self.b_vec = [self.create_param(f"b_sub_{i}", [d], weight_init, weight_optim, regularizer=weight_reg)
                          for i, d in enumerate(self.output_dim_vec)]
        if axis == 1:
            output_shape = (output_dims,)
        else:
            output_shape = tuple(list(input_record.field_types()[0].shape)[:axis - 1] + [output_dims])
        self.output_schema = schema.Scalar((np.float32, output_shape), self.get_next_blob_reference("output"))

    calculate_fc_output_dims = staticmethod(fc_output_dims)

    @property
    def param_blobs(self):
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            return [self.w, self.b]
        return self.w_vec + self.b_vec

    @property
    def train_param_blobs(self):
        """The parameters training reads: param_blobs, unless set once to others (SamplingTrain
        trains on the rows it gathers)."""
        sampled = getattr(self, "_train_param_blobs", None)
        return self.param_blobs if sampled is None else sampled

    @train_param_blobs.setter
    def train_param_blobs(self, blobs):
        if getattr(self, "_train_param_blobs", None) is not None or blobs is None:
            raise LayerError(f"{self.name}: train_param_blobs is set once, to blobs", user_location())
        self._train_param_blobs = blobs

    def get_fp16_compatible_parameters(self):
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            return [self.w]
        return self.w_vec

    def _fc(self, net, params, outputs):
        op = net.FCTransposed if self.transposed else net.FC
        return op(self.input_record.field_blobs() + params, outputs, axis=self.axis, **self.kwargs)

    def _add_ops(self, net, params):
        if self.clip_args is not None:
            clipped = [net.NextScopedBlob(f"clipped_{p}") for p in params]
            for p, c in zip(params, clipped):
                net.Clip([p], [c], **self.clip_args)
            params = clipped
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            self._fc(net, params, self.output_schema.field_blobs())
            return
        half = len(params) // 2
        pieces = [self._fc(net, [w, b], [net.NextScopedBlob(f"output_sub_{i}")])
                  for i, (w, b) in enumerate(zip(params[:half], params[half:]))]
        out = self.output_schema.field_blobs()[0]
        net.Concat(pieces, [out, out + "_concat_dims"])

    def add_ops(self, net):
        self._add_ops(net, self.param_blobs)

    def add_train_ops(self, net):
        self._add_ops(net, self.train_param_blobs)


class FCWithoutBias(ModelLayer):
    """y = x w^T (a MatMul with the weights transposed)."""

    def __init__(self, model, input_record, output_dims, weight_init=None, weight_optim=None,
                 name="fc_without_bias", uniform_weight_init_scale_numerator=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        input_dims = _input_dims("FCWithoutBias", input_record)
        scale = math.sqrt(uniform_weight_init_scale_numerator / input_dims)
        self.w = self.create_param("w", [output_dims, input_dims], weight_init or _uniform(scale), weight_optim)
        self.output_schema = schema.Scalar((np.float32, (output_dims,)), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        net.MatMul(self.input_record.field_blobs() + [self.w], self.output_schema.field_blobs(),
                   trans_b=1, **self.kwargs)


class AddBias(ModelLayer):
    """y = x + b (b per feature)."""

    def __init__(self, model, input_record, bias_init=None, bias_optim=None, name="add_bias"):
        super().__init__(model, name, input_record)
        input_dims = _input_dims("AddBias", input_record)
        scale = math.sqrt(1.0 / input_dims)
        self.b = self.create_param("b", [input_dims], bias_init or _uniform(scale), bias_optim)
        self.output_schema = schema.Scalar(input_record.field_type(), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        net.Add(self.input_record.field_blobs() + [self.b], self.output_schema.field_blobs(), broadcast=1)


class Conv(ModelLayer):
    """A 2-D convolution of an (H, W, C) (NHWC) or (C, H, W) (NCHW) input into ``output_dim``
    channels; with stride 1 an unset pad keeps the size ('same' padding)."""

    def __init__(self, model, input_record, output_dim, kernel_h, kernel_w, stride_h, stride_w, pad_b=None,
                 pad_l=None, pad_r=None, pad_t=None, order="NHWC", kernel_init=None, bias_init=None,
                 kernel_optim=None, bias_optim=None, name="conv", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not isinstance(input_record, schema.Scalar):
            raise LayerError(f"Conv takes a Scalar, got {input_record}", user_location())
        for what, v in (("kernel_h", kernel_h), ("kernel_w", kernel_w), ("stride_h", stride_h),
                        ("stride_w", stride_w)):
            if not (isinstance(v, int) and v > 0):
                raise LayerError(f"{what} should be a positive integer, got {v!r}", user_location())
        self.kernel_h, self.kernel_w, self.stride_h, self.stride_w = kernel_h, kernel_w, stride_h, stride_w

        def pad(given, kernel, stride):
            return given if given is not None else ((kernel - 1) // 2 if stride == 1 else 0)
        self.pad_t, self.pad_b = pad(pad_t, kernel_h, stride_h), pad(pad_b, kernel_h, stride_h)
        self.pad_l, self.pad_r = pad(pad_l, kernel_w, stride_w), pad(pad_r, kernel_w, stride_w)
        for what in ("pad_t", "pad_b", "pad_l", "pad_r"):
            v = getattr(self, what)
            if not (isinstance(v, int) and v >= 0):
                raise LayerError(f"{what} should be an int >= 0, got {v!r}", user_location())
        if order not in ("NHWC", "NCHW"):
            raise LayerError(f"order is 'NHWC' or 'NCHW', got {order!r}", user_location())
        self.order = order
        dims = input_record.field_type().shape
        channels = dims[-1] if order == "NHWC" else dims[0]
        if channels <= 0:
            raise LayerError("the input needs a positive channel count in its schema", user_location())
        kernel_shape = [output_dim, kernel_h, kernel_w, channels] if order == "NHWC" else \
            [output_dim, channels, kernel_h, kernel_w]
        self.kernel = self.create_param(param_name="conv_kernel", shape=kernel_shape,
                                        initializer=kernel_init or ("XavierFill", {}), optimizer=kernel_optim)
        self.bias = self.create_param(param_name="conv_bias", shape=[output_dim],
                                      initializer=bias_init or ("ConstantFill", {"value": 0.0}), optimizer=bias_optim)
        # (Caffe2 records the output as (output_dim,) though the blob is (H', W', output_dim))
        self.output_schema = schema.Scalar((np.float32, (output_dim,)), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        net.Conv(self.input_record.field_blobs() + [self.kernel, self.bias], self.output_schema.field_blobs(),
                 kernel_h=self.kernel_h, kernel_w=self.kernel_w, stride_h=self.stride_h, stride_w=self.stride_w,
                 pad_t=self.pad_t, pad_l=self.pad_l, pad_b=self.pad_b, pad_r=self.pad_r, order=self.order)


class FCWithBootstrap(ModelLayer):
    """``num_bootstrap`` FCs, each trained on a bootstrap resample of the batch (the rows
    ``indices``, drawn uniformly with replacement); output Struct of (indices, preds) per FC.
    Prediction and eval run every FC on the whole batch."""

    def __init__(self, model, input_record, output_dims, num_bootstrap, weight_init=None, bias_init=None,
                 weight_optim=None, bias_optim=None, name="fc_with_bootstrap", weight_reg=None, bias_reg=None,
                 clip_param=None, axis=1, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if axis < 1:
            raise LayerError(f"FCWithBootstrap's axis is >= 1, got {axis}", user_location())
        self.axis = axis
        self.input_dims = input_dims = _input_dims("FCWithBootstrap", input_record, axis)
        self.num_bootstrap = num_bootstrap
        self.clip_args = None
        if clip_param is not None:
            lo, hi = clip_param
            if lo is None and hi is None or (lo is not None and hi is not None and lo >= hi):
                raise LayerError(f"clip_param {clip_param}: give clip_min < clip_max (one may be None)",
                                 user_location())
            self.clip_args = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        scale = math.sqrt(1.0 / input_dims)
        weight_init, bias_init = weight_init or _uniform(scale), bias_init or _uniform(scale)
        self.batch_size = self.lower_bound = self.upper_bound = None
        self.bootstrapped_FCs = []
        output_schema = schema.Struct()
        for i in range(num_bootstrap):
            prefix = f"bootstrap_iteration_{i}"
            output_schema += schema.Struct((f"{prefix}/indices", self.get_next_blob_reference(f"{prefix}/indices")),
                                           (f"{prefix}/preds", self.get_next_blob_reference(f"{prefix}/preds")))
            self.bootstrapped_FCs += [
                self.create_param(f"{prefix}/w", [output_dims, input_dims], weight_init, weight_optim,
                                  regularizer=weight_reg),
                self.create_param(f"{prefix}/b", [output_dims], bias_init, bias_optim, regularizer=bias_reg)]
        self.output_schema = output_schema

    @property
    def param_blobs(self):
        return self.bootstrapped_FCs

    train_param_blobs = param_blobs

    def get_fp16_compatible_parameters(self):
        return self.bootstrapped_FCs[0::2]

    def _indices(self, net, features, iteration):
        """The resample's row ids: batch-size draws in [0, batch size - 1] (the bounds made once)."""
        with core.NameScope(f"bootstrap_iteration_{iteration}"):
            if iteration == 0:
                shape = net.Shape(features, "input_shape")
                self.batch_size = net.Gather([shape, net.Const(np.array([0]), "batch_size_index")], "batch_size")
                self.lower_bound = net.Const(np.array([0]), "lower_bound", dtype=np.int32)
                offset = net.Const(np.array([1]), "offset", dtype=np.int32)
                as_int = net.Cast([self.batch_size], "int_batch_size", to=core.DataType.INT32)
                self.upper_bound = net.Sub([as_int, offset], "upper_bound")
            return net.UniformIntFill([self.batch_size, self.lower_bound, self.upper_bound],
                                      self.output_schema[iteration * 2].field_blobs()[0], input_as_shape=1)

    def _fc(self, net, features, params, iteration):
        if self.clip_args is not None:
            clipped = [net.NextScopedBlob(f"clipped_{p}") for p in params]
            for p, c in zip(params, clipped):
                net.Clip([p], [c], **self.clip_args)
            params = clipped
        net.FC(features + params, [self.output_schema.field_blobs()[iteration * 2 + 1]], axis=self.axis,
               **self.kwargs)

    def add_ops(self, net):
        features = self.input_record.field_blobs()
        for i in range(self.num_bootstrap):
            self._indices(net, features[0], i)
            self._fc(net, features, self.bootstrapped_FCs[2 * i:2 * i + 2], i)

    def add_train_ops(self, net):
        features = self.input_record.field_blobs()[0]
        for i in range(self.num_bootstrap):
            indices = self._indices(net, features, i)
            resampled = net.Gather([features, indices], net.NextScopedBlob(f"bootstrapped_features_{i}"))
            self._fc(net, [resampled], self.train_param_blobs[2 * i:2 * i + 2], i)
