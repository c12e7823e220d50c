"""Layers weighting several inputs into one: ``BlobWeightedSum`` (learned weights),
``ConstantWeight`` (fixed), ``HomotopyWeight`` (a schedule moving from the first input to the
second) and ``AdaptiveWeight`` (task weights learned from each loss's uncertainty)."""
from __future__ import annotations

import logging

import numpy as np

from dslc import core, schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.regularizer import BoundedGradientProjection, LogBarrier
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


def _require(ok, message):
    if not ok:
        raise LayerError(message, user_location(3))


def _interleaved(blobs, weights):
    return [b for pair in zip(blobs, weights) for b in pair]


class BlobWeightedSum(ModelLayer):
    """sum_i w_i x_i over inputs of one shape, the w_i parameters (``init_weights``, default 1)."""

    def __init__(self, model, input_record, init_weights=None, weight_optim=None, name="blob_weighted_sum",
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.blobs = self.input_record.field_blobs()
        self.num_weights = len(self.blobs)
        _require(self.num_weights > 1, "BlobWeightedSum takes more than one input")
        types = input_record.field_types()
        _require(len(types[0].shape) > 0, "BlobWeightedSum needs the inputs' dims in their schema")
        _require(all(t.shape == types[0].shape for t in types), f"BlobWeightedSum's inputs differ in shape: "
                 f"{[t.shape for t in types]}")
        if init_weights:
            _require(len(init_weights) == self.num_weights,
                     f"{self.num_weights} inputs, {len(init_weights)} init_weights")
        else:
            init_weights = [1.0] * self.num_weights
        self.weights = [self.create_param(param_name=f"w_{i}", shape=[1],
                                          initializer=("ConstantFill", {"value": float(init_weights[i])}),
                                          optimizer=weight_optim) for i in range(self.num_weights)]
        self.output_schema = schema.Scalar(types[0], self.get_next_blob_reference("blob_weighted_sum_out"))

    def add_ops(self, net):
        net.WeightedSum(_interleaved(self.blobs, self.weights), self.output_schema(), grad_on_w=True)


class ConstantWeight(ModelLayer):
    """sum_i w_i x_i with fixed weights (default: the mean)."""

    def __init__(self, model, input_record, weights=None, name="constant_weight", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("constant_weight"))
        self.data = self.input_record.field_blobs()
        self.num = len(self.data)
        weights = weights if weights is not None else [1.0 / self.num] * self.num
        _require(len(weights) == self.num, f"{self.num} inputs, {len(weights)} weights")
        self.weights = [self.model.add_global_constant(f"{self.name}_weight_{i}", float(w))
                        for i, w in enumerate(weights)]

    def add_ops(self, net):
        net.WeightedSum(_interleaved(self.data, self.weights), self.output_schema())


class HomotopyWeight(ModelLayer):
    """alpha x + beta y with alpha falling from max_weight to min_weight as training goes on
    (alpha + beta = max + min): alpha's decay is an ``inv`` learning-rate schedule halving
    alpha's share after ``half_life`` iterations and quartering it after ``quad_life``."""

    def __init__(self, model, input_record, name="homotopy_weight", min_weight=0., max_weight=1., half_life=1e6,
                 quad_life=3e6, atomic_iter=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("homotopy_weight"))
        data = self.input_record.field_blobs()
        _require(len(data) == 2, f"HomotopyWeight takes two inputs, got {len(data)}")
        self.x, self.y = data
        self.use_external_iter = atomic_iter is not None
        self.atomic_iter = atomic_iter if self.use_external_iter else self.create_atomic_iter()
        _require(max_weight > min_weight, "max_weight must be above min_weight")
        self.scale = float(max_weight - min_weight)
        self.offset = self.model.add_global_constant(f"{self.name}_offset_1dfloat", float(min_weight))
        self.gamma, self.power = self.solve_inv_lr_params(half_life, quad_life)

    def solve_inv_lr_params(self, half_life, quad_life):
        """gamma and power of lr(t) = (1 + gamma t)^-power with lr(half_life) = 1/2 and
        lr(quad_life) = 1/4."""
        _require(half_life > 0 and quad_life > 2 * half_life, "need 0 < half_life and 2 half_life < quad_life")
        t = float(quad_life) / float(half_life)
        x = t * (1.0 + np.sqrt(2.0)) / 2.0 - np.sqrt(2.0)
        gamma = (x - 1.0) / float(half_life)
        power = np.log(2.0) / np.log(x)
        logger.info("homotopy weighting: gamma=%g, power=%g", gamma, power)
        return gamma, power

    def create_atomic_iter(self):
        self.mutex = self.create_param(param_name=f"{self.name}_mutex", shape=None, initializer=("CreateMutex",),
                                       optimizer=self.model.NoOptim)
        self.atomic_iter = self.create_param(
            param_name=f"{self.name}_atomic_iter", shape=[1],
            initializer=("ConstantFill", {"value": 0, "dtype": core.DataType.INT64}), optimizer=self.model.NoOptim)
        return self.atomic_iter

    def update_weight(self, net):
        alpha, beta = net.NextScopedBlob("alpha"), net.NextScopedBlob("beta")
        lr, comp = net.NextScopedBlob("lr"), net.NextScopedBlob("complementary_lr")
        scaled, scaled_comp = net.NextScopedBlob("scaled_lr"), net.NextScopedBlob("scaled_complementary_lr")
        if not self.use_external_iter:
            net.AtomicIter([self.mutex, self.atomic_iter], [self.atomic_iter])
        net.LearningRate([self.atomic_iter], [lr], policy="inv", gamma=self.gamma, power=self.power, base_lr=1.0)
        net.Sub([self.model.global_constants["ONE"], lr], [comp])
        net.Scale([lr], [scaled], scale=self.scale)
        net.Scale([comp], [scaled_comp], scale=self.scale)
        net.Add([scaled, self.offset], [alpha])
        net.Add([scaled_comp, self.offset], [beta])
        return alpha, beta

    def add_ops(self, net):
        alpha, beta = self.update_weight(net)
        net.WeightedSum([self.x, alpha, self.y, beta], self.output_schema())


class AdaptiveWeight(ModelLayer):
    """sum_i (w_i x_i + r_i) over the losses x_i, the weights learned (Kendall et al. 2018):
    ``log_std`` learns mu_i = 2 log sigma_i (w = exp(-mu)/2, r = mu/2); ``inv_var`` learns
    k_i = 1/sigma_i^2 (w = k/2, r = -log(k)/2), kept positive by a log barrier or a projection."""

    def __init__(self, model, input_record, name="adaptive_weight", optimizer=None, weights=None,
                 enable_diagnose=False, estimation_method="log_std", pos_optim_method="log_barrier", reg_lambda=0.1,
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("adaptive_weight"))
        self.data = self.input_record.field_blobs()
        self.num = len(self.data)
        self.optimizer = optimizer
        weights = weights if weights is not None else [1.0 / self.num] * self.num
        _require(len(weights) == self.num, f"{self.num} inputs, {len(weights)} weights")
        _require(min(weights) > 0, "initial weights must be positive")
        self.weights = np.array(weights).astype(np.float32)
        self.estimation_method = str(estimation_method).lower()
        self.pos_optim_method = str(pos_optim_method).lower()
        self.reg_lambda = float(reg_lambda)
        self.enable_diagnose = enable_diagnose
        if self.estimation_method not in ("log_std", "inv_var"):
            raise LayerError(f"unknown estimation_method {estimation_method!r}", user_location(),
                             "use 'log_std' or 'inv_var'")
        self.init_func = getattr(self, self.estimation_method + "_init")
        self.weight_func = getattr(self, self.estimation_method + "_weight")
        self.reg_func = getattr(self, self.estimation_method + "_reg")
        self.init_func()
        if self.enable_diagnose:
            self.weight_i = [self.get_next_blob_reference(f"adaptive_weight_{i}") for i in range(self.num)]
            for blob in self.weight_i:
                self.model.add_ad_hoc_plot_blob(blob)

    def concat_data(self, net):
        reshaped = [net.NextScopedBlob(f"reshaped_data_{i}") for i in range(self.num)]
        for i in range(self.num):
            net.Reshape([self.data[i]], [reshaped[i], net.NextScopedBlob(f"new_shape_{i}")], shape=[1])
        concated = net.NextScopedBlob("concated_data")
        net.Concat(reshaped, [concated, net.NextScopedBlob("concated_new_shape")], axis=0)
        return concated

    def _param(self, name, values, regularizer=None):
        return self.create_param(param_name=name, shape=[self.num],
                                 initializer=("GivenTensorFill", {"values": values, "dtype": core.DataType.FLOAT}),
                                 optimizer=self.optimizer, regularizer=regularizer)

    def log_std_init(self):
        self.mu = self._param("mu", np.log(1.0 / 2.0 / self.weights))

    def log_std_weight(self, x, net, weight):
        mu_neg = net.NextScopedBlob("mu_neg")
        net.Negative(self.mu, mu_neg)
        mu_neg_exp = net.NextScopedBlob("mu_neg_exp")
        net.Exp(mu_neg, mu_neg_exp)
        net.Scale(mu_neg_exp, weight, scale=0.5)

    def log_std_reg(self, net, reg):
        net.Scale(self.mu, reg, scale=0.5)

    def inv_var_init(self):
        if self.pos_optim_method == "log_barrier":
            regularizer = LogBarrier(reg_lambda=self.reg_lambda)
        elif self.pos_optim_method == "pos_grad_proj":
            regularizer = BoundedGradientProjection(lb=0, left_open=True)
        else:
            raise TypeError(f"unknown positivity optimization method: {self.pos_optim_method}")
        self.k = self._param("k", 2.0 * self.weights, regularizer)

    def inv_var_weight(self, x, net, weight):
        net.Scale(self.k, weight, scale=0.5)

    def inv_var_reg(self, net, reg):
        log_k = net.NextScopedBlob("log_k")
        net.Log(self.k, log_k)
        net.Scale(log_k, reg, scale=-0.5)

    def add_ops(self, net):
        x = self.concat_data(net)
        weight, reg = net.NextScopedBlob("weight"), net.NextScopedBlob("reg")
        weighted, total = net.NextScopedBlob("weighted_x"), net.NextScopedBlob("weighted_x_add_reg")
        self.weight_func(x, net, weight)
        self.reg_func(net, reg)
        net.Mul([weight, x], weighted)
        net.Add([weighted, reg], total)
        net.SumElements(total, self.output_schema())
        if self.enable_diagnose:
            for i in range(self.num):
                net.Slice(weight, self.weight_i[i], starts=[i], ends=[i + 1])
