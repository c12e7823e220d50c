"""``Dropout`` and ``BatchNormalization``: layers whose training ops differ from their
evaluation and prediction ops (is_test)."""
from __future__ import annotations

import numpy as np

from dslc import schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.trace.tracing import user_location


class Dropout(ModelLayer):
    """Drops each element with probability ``ratio`` in training (scaling the rest by
    1/(1-ratio)); passes through in eval and prediction unless ``dropout_for_eval``."""

    def __init__(self, model, input_record, name="dropout", ratio=0.5, dropout_for_eval=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not isinstance(input_record, schema.Scalar):
            raise LayerError(f"Dropout takes a Scalar, got {input_record}", user_location())
        if not 0 <= ratio < 1.0:
            raise LayerError(f"Dropout's ratio is in [0, 1), got {ratio}", user_location())
        self.output_schema = input_record.clone_schema()
        self.output_schema.set_value(self.get_next_blob_reference("output"))
        self.dropout_for_eval = dropout_for_eval
        self.ratio = ratio

    def _add_ops(self, net, is_test):
        net.Dropout(self.input_record.field_blobs(), self.output_schema.field_blobs() + [net.NextScopedBlob("d_mask")],
                    ratio=self.ratio, is_test=is_test)

    def add_train_ops(self, net):
        self._add_ops(net, is_test=False)

    def add_eval_ops(self, net):
        self._add_ops(net, is_test=not self.dropout_for_eval)

    def add_ops(self, net):
        self.add_eval_ops(net)


class BatchNormalization(ModelLayer):
    """Spatial batch normalization of a (C,) or (C, H, W) / (H, W, C) input: batch statistics
    (updating the running ones) in training, the running ones in eval and prediction."""

    def __init__(self, model, input_record, name="batch_normalization", scale_optim=None, bias_optim=None,
                 momentum=0.9, order="NCHW", scale_init_value=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not isinstance(input_record, schema.Scalar):
            raise LayerError(f"BatchNormalization takes a Scalar, got {input_record}", user_location())
        self.input_shape = input_record.field_type().shape
        if len(self.input_shape) == 3:
            if order not in ("NCHW", "NHWC"):
                raise LayerError(f"order is NCHW or NHWC, got {order!r}", user_location())
            channels = self.input_shape[0] if order == "NCHW" else self.input_shape[2]
        elif len(self.input_shape) == 1:
            channels = self.input_shape[0]
        else:
            raise LayerError(f"BatchNormalization takes 2D or 4D inputs, got per-example shape {self.input_shape}",
                             user_location())
        self.output_schema = schema.Scalar((np.float32, self.input_shape), self.get_next_blob_reference("output"))
        self.momentum, self.order = momentum, order

        def param(name, value, optim):
            return self.create_param(param_name=name, shape=[channels], initializer=("ConstantFill", {"value": value}),
                                     optimizer=optim)
        self.scale = param("scale", scale_init_value, scale_optim)
        self.bias = param("bias", 0.0, bias_optim)
        self.rm = param("running_mean", 0.0, model.NoOptim)
        self.riv = param("running_inv_var", 1.0, model.NoOptim)

    def _add_ops(self, net, is_test, out_blob=None):
        flat = len(self.input_shape) == 1
        net.NextScopedBlob("expand_input")  # (Caffe2 reserves this name, then lets ExpandDims name its output)
        source = self.input_record.field_blobs()
        x = net.ExpandDims(source, dims=[2, 3]) if flat else source[0]
        out = self.output_schema.field_blobs() if out_blob is None else out_blob
        outputs = out if is_test else out + [self.rm, self.riv, net.NextScopedBlob("bn_saved_mean"),
                                             net.NextScopedBlob("bn_saved_iv")]
        net.SpatialBN([x, self.scale, self.bias, self.rm, self.riv], outputs, momentum=self.momentum,
                      is_test=is_test, order=self.order)
        if flat:
            net.Squeeze(out, out, dims=[2, 3])

    def add_train_ops(self, net):
        self._add_ops(net, is_test=False)

    def add_eval_ops(self, net):
        self._add_ops(net, is_test=True)

    def add_ops(self, net):
        self.add_eval_ops(net)


class LayerNormalization(ModelLayer):
    """Each example normalized over its features (LayerNorm from ``axis``), then scaled and
    shifted per feature; ``use_layer_norm_op=False`` spells it out of reductions (2-D inputs)."""

    def __init__(self, model, input_record, name="layer_normalization", scale_optim=None, bias_optim=None,
                 epsilon=1e-4, axis=1, use_layer_norm_op=True, scale_init_value=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not isinstance(input_record, schema.Scalar):
            raise LayerError(f"LayerNormalization takes a Scalar, got {input_record}", user_location())
        self.input_shape = input_record.field_type().shape
        self.axis = axis
        if len(self.input_shape) < 1:
            raise LayerError("LayerNormalization takes inputs of at least 2 dims", user_location())
        features = self.input_shape[0]
        self.output_schema = schema.Scalar((np.float32, self.input_shape), self.get_next_blob_reference("output"))
        self.scale = self.create_param(param_name="scale", shape=[features],
                                       initializer=("ConstantFill", {"value": scale_init_value}), optimizer=scale_optim)
        self.bias = self.create_param(param_name="bias", shape=[features], initializer=("ConstantFill", {"value": 0.0}),
                                      optimizer=bias_optim)
        self.use_layer_norm_op = use_layer_norm_op
        if use_layer_norm_op:
            self.epsilon = epsilon
        else:
            if len(self.input_shape) != 1:
                raise LayerError("use_layer_norm_op=False takes 2-D inputs", user_location())
            self.epsilon = model.maybe_add_global_constant(f"{self.name}_epsilon", float(epsilon))

    def _with_op(self, net):
        outs = [net.NextScopedBlob("ln_output"), net.NextScopedBlob("ln_mean"), net.NextScopedBlob("ln_stdev")]
        normalized, _, _ = net.LayerNorm(self.input_record.field_blobs(), outs, axis=self.axis, epsilon=self.epsilon)
        scaled = net.Mul([normalized, self.scale], [net.NextScopedBlob("ln_scaled")], broadcast=1, axis=self.axis)
        net.Add([scaled, self.bias], self.output_schema.field_blobs(), broadcast=1, axis=self.axis)

    def _spelled_out(self, net):
        x = self.input_record.field_blobs()
        out, mean, stdev = net.NextScopedBlob("ln_output"), net.NextScopedBlob("ln_mean"), net.NextScopedBlob("ln_stdev")
        mean_arr = net.NextScopedBlob("ln_mean_arr")
        net.ReduceBackMean(x, [mean_arr])
        net.ExpandDims([mean_arr], [mean], dims=[1])
        centered = net.NextScopedBlob("ln_centered")
        net.Sub(x + [mean], [centered])
        sqr = net.NextScopedBlob("ln_sqr")
        net.Sqr([centered], [sqr])
        sqr_mean = net.NextScopedBlob("ln_sqr_mean")
        net.ReduceBackMean([sqr], [sqr_mean])
        var = net.NextScopedBlob("ln_var")
        net.Add([sqr_mean, self.epsilon], var)
        std_arr = net.NextScopedBlob("ln_std_arr")
        net.Pow([var], [std_arr], exponent=0.5)
        net.ExpandDims([std_arr], [stdev], dims=[1])
        net.Div([centered, stdev], [out])
        scaled = net.NextScopedBlob("ln_scaled")
        net.Mul([out, self.scale], [scaled])
        net.Add([scaled, self.bias], self.output_schema.field_blobs())

    def add_ops(self, net):
        (self._with_op if self.use_layer_norm_op else self._spelled_out)(net)
