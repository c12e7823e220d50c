"""Random-feature kernel maps: ``RandomFourierFeatures`` (sqrt(2/D) cos(Wx + b), a Gaussian
kernel's features), ``ArcCosineFeatureMap`` (H(Wx + b) (Wx + b)^s) and ``SemiRandomFeatures``
(the arc-cosine features of random weights times learned linear features). The random weights
are fixed parameters (NoOptim) unless an optimizer is given."""
from __future__ import annotations

import numpy as np

from dslc import schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.trace.tracing import user_location


def _require(ok, message):
    if not ok:
        raise LayerError(message, user_location(3))


def _input_dims(input_record, layer):
    _require(isinstance(input_record, schema.Scalar), f"{layer} takes a Scalar, got {input_record}")
    dims = input_record.field_type().shape[0]
    _require(dims >= 1, f"{layer} expects input dimensions >= 1, got {dims}")
    return dims


class RandomFourierFeatures(ModelLayer):
    def __init__(self, model, input_record, output_dims, sigma, w_init=None, b_init=None,
                 name="random_fourier_features", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        input_dims = _input_dims(input_record, "RandomFourierFeatures")
        _require(output_dims >= 1, f"expected output dimensions >= 1, got {output_dims}")
        _require(sigma > 0.0, f"expected bandwidth > 0, got {sigma}")
        self.output_dims = output_dims
        self.output_schema = schema.Scalar((np.float32, (output_dims,)), self.get_next_blob_reference("output"))
        self.w = self.create_param(param_name="w", shape=[output_dims, input_dims],
                                   initializer=w_init or ("GaussianFill", {"mean": 0.0, "std": 1.0 / sigma}),
                                   optimizer=model.NoOptim)
        self.b = self.create_param(param_name="b", shape=[output_dims],
                                   initializer=b_init or ("UniformFill", {"min": 0.0, "max": 2 * np.pi}),
                                   optimizer=model.NoOptim)

    def add_ops(self, net):
        arg = net.FC(self.input_record.field_blobs() + [self.w, self.b], net.NextScopedBlob("cosine_arg"))
        features = net.Cos([arg], net.NextScopedBlob("new_feature_vec"))
        net.Scale([features], self.output_schema.field_blobs(), scale=np.sqrt(2.0 / self.output_dims))


class ArcCosineFeatureMap(ModelLayer):
    """s = 0: relu(softsign(z)); s = 1: relu(z); s >= 2: relu(z) z^(s-1), for z = Wx + b with
    random W ~ N(0, (scale / sqrt(in))^2); ``set_weight_as_global_constant``: W and b drawn here,
    once, as global constants."""

    def __init__(self, model, input_record, output_dims, s=1, scale=1.0, weight_init=None, bias_init=None,
                 weight_optim=None, bias_optim=None, set_weight_as_global_constant=False,
                 initialize_output_schema=True, name="arc_cosine_feature_map", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.params = []
        self.set_weight_as_global_constant = set_weight_as_global_constant
        self.input_dims = _input_dims(input_record, type(self).__name__)
        if initialize_output_schema:
            self.output_schema = schema.Scalar((np.float32, (output_dims,)), model.net.NextScopedBlob(name + "_output"))
        _require(output_dims >= 1, f"expected output dimensions >= 1, got {output_dims}")
        _require(isinstance(s, int) and s >= 0, f"expected s an int >= 0, got {s!r}")
        _require(scale > 0.0, f"expected scale > 0, got {scale}")
        self.output_dims, self.s = output_dims, s
        self.stddev = scale * np.sqrt(1.0 / self.input_dims)
        if set_weight_as_global_constant:
            w = np.random.normal(scale=self.stddev, size=(output_dims, self.input_dims))
            b = np.random.uniform(low=-0.5 * self.stddev, high=0.5 * self.stddev, size=output_dims)
            self.random_w = model.add_global_constant(name=self.name + "_fixed_rand_W", array=w)
            self.random_b = model.add_global_constant(name=self.name + "_fixed_rand_b", array=b)
        else:
            self.random_w, self.random_b = self._initialize_params("random_w", "random_b", weight_init, bias_init,
                                                                   weight_optim, bias_optim)

    def _initialize_params(self, w_name, b_name, w_init=None, b_init=None, w_optim=None, b_optim=None):
        w = self.create_param(param_name=w_name, shape=(self.output_dims, self.input_dims),
                              initializer=w_init or ("GaussianFill", {"mean": 0.0, "std": self.stddev}),
                              optimizer=w_optim or self.model.NoOptim)
        b = self.create_param(param_name=b_name, shape=[self.output_dims],
                              initializer=b_init or ("UniformFill", {"min": -0.5 * self.stddev,
                                                                     "max": 0.5 * self.stddev}),
                              optimizer=b_optim or self.model.NoOptim)
        return [w, b]

    def _heaviside_with_power(self, net, features, output, s):
        if s == 0:
            return net.Relu(net.Softsign([features], net.NextScopedBlob("softsign")), output)
        if s == 1:
            return net.Relu([features], output)
        relu = net.Relu([features], net.NextScopedBlob("relu_rand"))
        power = net.Pow([features], net.NextScopedBlob("pow_rand"), exponent=float(s - 1))
        return net.Mul([relu, power], output)

    def add_ops(self, net):
        z = net.FC(self.input_record.field_blobs() + [self.random_w, self.random_b],
                   net.NextScopedBlob("random_features"))
        self._heaviside_with_power(net, z, self.output_schema.field_blobs(), self.s)


class SemiRandomFeatures(ArcCosineFeatureMap):
    """Output Struct (full, random): random = the arc-cosine features of the ``random`` input,
    full = random * (learned W x_full + b). Input: a Scalar, or a Struct (full, random)."""

    def __init__(self, model, input_record, output_dims, s=1, scale_random=1.0, scale_learned=1.0,
                 weight_init_random=None, bias_init_random=None, weight_init_learned=None, bias_init_learned=None,
                 weight_optim=None, bias_optim=None, set_weight_as_global_constant=False,
                 name="semi_random_features", **kwargs):
        if isinstance(input_record, schema.Struct):
            self.input_record_full, self.input_record_random = input_record.full, input_record.random
        else:
            self.input_record_full = self.input_record_random = input_record
        super().__init__(model, self.input_record_full, output_dims, s=s, scale=scale_random,
                         weight_init=weight_init_random, bias_init=bias_init_random, weight_optim=None,
                         bias_optim=None, set_weight_as_global_constant=set_weight_as_global_constant,
                         initialize_output_schema=False, name=name, **kwargs)
        self.output_schema = schema.Struct(
            ("full", schema.Scalar((np.float32, output_dims), model.net.NextScopedBlob(name + "_full_output"))),
            ("random", schema.Scalar((np.float32, output_dims), model.net.NextScopedBlob(name + "_random_output"))))
        _require(scale_learned > 0.0, f"expected scale (learned) > 0, got {scale_learned}")
        self.stddev = scale_learned * np.sqrt(1.0 / self.input_dims)
        self.learned_w, self.learned_b = self._initialize_params("learned_w", "learned_b", weight_init_learned,
                                                                 bias_init_learned, weight_optim, bias_optim)

    def add_ops(self, net):
        learned = net.FC(self.input_record_full.field_blobs() + [self.learned_w, self.learned_b],
                         net.NextScopedBlob("learned_features"))
        z = net.FC(self.input_record_random.field_blobs() + [self.random_w, self.random_b],
                   net.NextScopedBlob("random_features"))
        random = self._heaviside_with_power(net, z, self.output_schema.random.field_blobs(), self.s)
        net.Mul([random, learned], self.output_schema.full.field_blobs())
