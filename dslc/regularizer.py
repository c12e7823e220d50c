"""Caffe2's ``regularizer``: penalties on a parameter, recorded either as a term added to the
loss (``RegularizationBy.ON_LOSS``) or as a step after the optimizer's update
(``RegularizationBy.AFTER_OPTIMIZER``: projections, clipping, norm caps).

    reg = L1Norm(0.1)
    term = reg(net, init_net, param, by=RegularizationBy.ON_LOSS)   # a blob: 0.1 * |param|_1

A layer's parameter takes one (``FC(..., weight_reg=L1Norm(0.1))``); the layer model
instantiator adds the loss terms before differentiating and the after-update steps after the
optimizers. A regularizer that has nothing to do for a ``by`` returns None.
"""
from __future__ import annotations

import numpy as np

from dslc import core, utils
from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class RegularizerError(DSLError, ValueError, AssertionError):
    """A regularizer given a bad setting or called for a stage it does not take."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RegularizerError(message, user_location(3))


class RegularizationBy:
    AFTER_OPTIMIZER = "after_optimizer"
    ON_LOSS = "on_loss"


class Regularizer:
    """The base: ``reg(net, init_net, param, grad=None, by=...)`` runs ``_run_<by>``."""

    def __init__(self):
        self.kEpsilon = 1e-9

    def __call__(self, net, param_init_net, param, grad=None, by=None):
        _check(isinstance(param, core.BlobReference), f"a regularized parameter is a BlobReference, got {param!r}")
        _check(by in (RegularizationBy.AFTER_OPTIMIZER, RegularizationBy.ON_LOSS),
               f"{type(self).__name__} called with by={by!r}; by is RegularizationBy.ON_LOSS or AFTER_OPTIMIZER")
        return getattr(self, "_run_" + by)(net, param_init_net, param, grad)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        return None

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        return None

    def _feature_grouping(self, param, net):
        """The L2 norm of each column of ``param`` (a feature's weights across outputs)."""
        squared = net.Mul([param, param], [net.NextScopedBlob("param_mul")])
        summed = net.ReduceFrontSum([squared], [net.NextScopedBlob("param_reduced")])
        return net.Pow([summed], [net.NextScopedBlob("grouped_feature_weight_vec")], exponent=0.5)

    def _ensure_clipped(self, net, param, grad=None, min=None, max=None, open_range=False, left_open=False,
                        right_open=False):
        """Clip ``param`` into [min, max] in place (an open end moved in by kEpsilon); with a
        sparse gradient, only the rows it touched."""
        if min is not None and (open_range or left_open):
            min = min + self.kEpsilon
        if max is not None and (open_range or right_open):
            max = max - self.kEpsilon
        inputs = [param, grad.indices, grad.values] if isinstance(grad, core.GradientSlice) else [param]
        net.EnsureClipped(inputs, [param], min=min, max=max)


def _scaled_norm(net, param, name, p, scale):
    out = net.NextScopedBlob(param + name)
    net.LpNorm([param], [out], p=p)
    net.Scale([out], [out], scale=scale)
    return out


class L1Norm(Regularizer):
    """reg_lambda * sum |w| added to the loss."""

    def __init__(self, reg_lambda):
        super().__init__()
        _check(reg_lambda >= 0, "factor ahead of regularization should be 0 or positive")
        self.reg_lambda = reg_lambda

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        return _scaled_norm(net, param, "_l1_regularization", 1, self.reg_lambda)


class L2Norm(Regularizer):
    """reg_lambda * sum w^2 added to the loss (LpNorm with p=2 is the squared norm)."""

    def __init__(self, reg_lambda):
        super().__init__()
        _check(reg_lambda >= 0, "factor ahead of regularization should be 0 or positive")
        self.reg_lambda = reg_lambda

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        return _scaled_norm(net, param, "_l2_regularization", 2, self.reg_lambda)


class ElasticNet(Regularizer):
    """l1 * sum |w| + l2 * sum w^2 added to the loss."""

    def __init__(self, l1, l2):
        super().__init__()
        self.l1, self.l2 = l1, l2

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_elastic_net_regularization")
        l2 = _scaled_norm(net, param, "_l2_blob", 2, self.l2)
        l1 = _scaled_norm(net, param, "_l1_blob", 1, self.l1)
        net.Add([l1, l2], [out])
        return out


def _top_k_sum_trimmed(net, param, k):
    """sum |w| minus the sum of the k largest |w|: the L1 norm of all but the k largest."""
    absolute = net.Abs([param], [net.NextScopedBlob("abs")])
    total = net.SumElements([absolute], [net.NextScopedBlob("sum_abs")], average=False)
    topk, _, _ = net.TopK([absolute], [net.NextScopedBlob("topk"), net.NextScopedBlob("id"),
                                       net.NextScopedBlob("flat_id")], k=k)
    top = net.SumElements([topk], [net.NextScopedBlob("topk_sum")], average=False)
    return total, top


class LpNorm(Regularizer):
    """reg_lambda * (sum_j ||w[:, j]||^p)^(1/p): an Lp norm over the columns' L2 norms
    (a feature's weights across outputs as one group)."""

    def __init__(self, reg_lambda, p_value=0.5):
        super().__init__()
        _check(reg_lambda > 0, "factor ahead of regularization should be greater than 0")
        _check(p_value > 0, "p_value factor should be greater than 0")
        self.p_value, self.reg_lambda = p_value, reg_lambda

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_dense_feature_regularization")
        groups = self._feature_grouping(param, net)
        raised = net.Pow([groups], [net.NextScopedBlob("lp_vec_raised")], exponent=self.p_value)
        summed = net.ReduceFrontSum([raised], [net.NextScopedBlob("lp_vec_summed")])
        norm = net.Pow([summed], [net.NextScopedBlob("lp_vec")], exponent=1 / self.p_value)
        net.Scale([norm], [out], scale=self.reg_lambda)
        return out


class L0ApproxNorm(Regularizer):
    """reg_lambda * (an approximate count of the features in use: sum_j min(||w[:, j]||, alpha) / alpha),
    less ``budget`` features (never below 0) when a budget is given."""

    def __init__(self, reg_lambda, alpha=0.01, budget=0):
        super().__init__()
        _check(reg_lambda > 0, "factor ahead of regularization should be greater than 0")
        _check(alpha > 0, "alpha factor must be a positive value greater than 0")
        _check(budget >= 0, "budget factor must be greater than or equal to 0")
        self.reg_lambda, self.alpha, self.budget = reg_lambda, alpha, float(budget)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_dense_feature_regularization")
        groups = self._feature_grouping(param, net)
        absolute = net.Abs([groups], [net.NextScopedBlob("l0_abs")])
        capped = net.Clip([absolute], [net.NextScopedBlob("l0_min")], max=self.alpha)
        summed = net.ReduceFrontSum([capped], [net.NextScopedBlob("l0_summed")])
        norm = net.Scale([summed], [net.NextScopedBlob("l0_norm")], scale=1 / self.alpha)
        if self.budget:
            budget = net.ConstantFill([], "budget", shape=[1], value=self.budget)
            over = net.Sub([norm, budget], [net.NextScopedBlob("l0_budget")])
            norm = net.Relu([over], [net.NextScopedBlob("relu_l0_sub_budget")])
        net.Scale([norm], [out], scale=self.reg_lambda)
        return out


class L1NormTrimmed(Regularizer):
    """The trimmed lasso: reg_lambda * the L1 norm of all but the k largest |w| (k of them go free)."""

    def __init__(self, reg_lambda, k):
        super().__init__()
        _check(reg_lambda >= 0, "factor ahead of regularization should be 0 or positive")
        _check(isinstance(k, int) and k >= 1, f"k is a positive int (how many weights go free), got {k!r}")
        self.reg_lambda, self.k = reg_lambda, k

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_l1_trimmed_regularization")
        total, top = _top_k_sum_trimmed(net, param, self.k)
        net.Sub([total, top], [out])
        net.Scale([out], [out], scale=self.reg_lambda)
        return out


class ElasticNetL1NormTrimmed(Regularizer):
    """l2 * sum w^2 + l1 * (the trimmed L1 norm, k weights free)."""

    def __init__(self, l1, l2, k):
        super().__init__()
        self.l1, self.l2, self.k = l1, l2, k

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_elastic_net_l1_trimmed_regularization")
        l2 = _scaled_norm(net, param, "_l2_blob", 2, self.l2)
        l1 = net.NextScopedBlob(param + "_l1_blob")
        total, top = _top_k_sum_trimmed(net, param, self.k)
        net.Sub([total, top], [l1])
        net.Scale([l1], [l1], scale=self.l1)
        net.Add([l1, l2], [out])
        return out


def _sparse_only(name, grad):
    if not isinstance(grad, core.GradientSlice):
        raise NotImplementedError(f"{name} is supported for sparse parameters only (a GradientSlice gradient)")


class MaxNorm(Regularizer):
    """After each update, the rows the sparse gradient touched are scaled down to L2 norm at
    most ``norm`` (``dtype='fp16'``: an fp16 table)."""

    def __init__(self, norm=1.0, dtype=None):
        super().__init__()
        self.norm, self.dtype = norm, dtype

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        _check(self.norm > 0, "norm should be bigger than 0.")
        _sparse_only("MaxNorm", grad)
        op = net.Float16SparseNormalize if self.dtype == "fp16" else net.SparseNormalize
        op([param, grad.indices], [param], use_max_norm=True, norm=self.norm)


class ConstantNorm(Regularizer):
    """After each update, the rows the sparse gradient touched are scaled to L2 norm ``norm``."""

    def __init__(self, norm=1.0):
        super().__init__()
        self.norm = norm

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        _check(self.norm > 0, "norm should be bigger than 0.")
        _sparse_only("ConstantNorm", grad)
        net.SparseNormalize([param, grad.indices], [param], use_max_norm=False, norm=self.norm)


class SparseLpNorm(Regularizer):
    """After each update, an L1 (p=1) or L2 (p=2) shrink of the rows the sparse gradient touched."""

    def __init__(self, p, reg_lambda):
        super().__init__()
        _check(p in (1.0, 2.0), "Sparse Lp regularization only implemented for p = 1.0 and p = 2.0.")
        _check(reg_lambda > 0, "factor ahead of regularization should be greater than 0.")
        self.p, self.reg_lambda = p, reg_lambda

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        _sparse_only("SparseLpNorm", grad)
        net.SparseLpRegularizer([param, grad.indices], [param], p=self.p, reg_lambda=self.reg_lambda)


class SparseL1Norm(SparseLpNorm):
    def __init__(self, reg_lambda):
        super().__init__(p=1.0, reg_lambda=reg_lambda)


class SparseL2Norm(SparseLpNorm):
    def __init__(self, reg_lambda):
        super().__init__(p=2.0, reg_lambda=reg_lambda)


class LogBarrier(Regularizer):
    """A log barrier keeping the parameter positive: -discount * sum log(max(w, eps)) on the
    loss, the discount decaying like a learning rate (``discount_policy``); after each update
    the parameter is clipped into (0, inf)."""

    def __init__(self, reg_lambda, discount_policy="inv", discount_options=None):
        super().__init__()
        _check(reg_lambda > 0, "factor ahead of regularization should be 0 or positive")
        self.reg_lambda = reg_lambda
        self.discount_policy = discount_policy
        self.discount_options = discount_options or {"gamma": 1.0, "power": 1.0}

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        iteration = utils.BuildUniqueMutexIter(param_init_net, net)
        discount = net.NextScopedBlob(param + "_log_barrier_discount")
        net.LearningRate([iteration], [discount], base_lr=-self.reg_lambda, policy=self.discount_policy,
                         **self.discount_options)
        positive = net.NextScopedBlob(param + "_non_neg")
        net.Clip([param], [positive], min=self.kEpsilon)
        logs = net.NextScopedBlob(param + "_log")
        net.Log([positive], [logs])
        total = net.NextScopedBlob(param + "_log_sum")
        net.SumElements([logs], [total])
        out = net.NextScopedBlob(param + "_log_barrier")
        net.Mul([total, discount], [out], broadcast=1)
        return out

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        self._ensure_clipped(net, param, grad, min=0, open_range=True)


class BoundedGradientProjection(Regularizer):
    """After each update, the parameter projected into [lb, ub] (an open end: epsilon inside)."""

    def __init__(self, lb=None, ub=None, left_open=False, right_open=False, epsilon=None):
        super().__init__()
        lb = float(lb) if lb is not None else None
        ub = float(ub) if ub is not None else None
        epsilon = float(epsilon) if epsilon is not None else self.kEpsilon
        _check(epsilon > 0, f"Bounded Gradient Projection with invalid eps={epsilon}")
        _check(lb is None or ub is None or
               lb + (epsilon if left_open else 0.0) <= ub - (epsilon if right_open else 0.0),
               f"Bounded Gradient Projection with an empty range: lb={lb}, ub={ub}, eps={epsilon}")
        self.left_open, self.right_open = left_open, right_open
        self.kEpsilon = epsilon
        self.lb, self.ub = lb, ub

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        self._ensure_clipped(net, param, grad, min=self.lb, max=self.ub, left_open=self.left_open,
                             right_open=self.right_open)


class GroupL1Norm(Regularizer):
    """Group lasso over column groups: reg_lambda * sum_g sqrt(|g|) * ||w[:, g]||_2, the groups
    being consecutive runs of columns of the sizes ``groups`` (a weight [out, sum(groups)])."""

    def __init__(self, reg_lambda, groups, stabilizing_val=0):
        super().__init__()
        _check(reg_lambda >= 0, "regularization weight should be 0 or positive")
        _check(isinstance(groups, list), "groups needs to be a list")
        self.reg_lambda, self.groups, self.stabilizing_val = reg_lambda, groups, stabilizing_val

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        squared = net.Sqr(param)
        per_column = net.ReduceSum(squared, axes=[0], keepdims=0)
        per_group = net.LengthsSum([per_column, net.GivenTensorIntFill([], 1, shape=[len(self.groups)],
                                                                       values=self.groups)])
        if self.stabilizing_val:
            net.Add([per_group, net.ConstantFill([], 1, value=self.stabilizing_val)], [per_group], broadcast=1)
        norms = net.Sqrt(per_group)
        weights = net.GivenTensorFill([], shape=[len(self.groups)],
                                      values=np.sqrt(self.groups) * self.reg_lambda)
        scaled = net.Mul([norms, weights], ["normalized_l2_norm_scaled"])
        return net.LpNorm(scaled, ["group_l1_nrom"], p=1)
