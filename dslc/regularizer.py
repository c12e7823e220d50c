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

from dslc import core
from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class RegularizerError(DSLError, ValueError):
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
