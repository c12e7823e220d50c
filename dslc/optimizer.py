"""Optimizers: the update ops for every parameter of a ModelHelper (Caffe2's ``optimizer``).

Call after ``model.AddGradientOperators([loss])``. Blob names are Caffe2's: the
iteration counter ``optimizer_iteration`` (counted by ``Iter`` each run), the learning
rate ``<Optimizer>_<k>_lr_cpu``, the constant ``ONE_0_0``, and per parameter ``w``:
``w_momentum``, ``w_squared_sum``, ``w_first_moment``, ``w_second_moment``. Since the
net minimizes, learning rates are negative where the update adds them.

``sparse_dedup_aggregator`` ("sum" or "mean"; SGD, Adagrad, Adam, WNGrad, STORM,
Adadelta, FTRL) puts ``net.DeduplicateGradientSlices`` before a sparse update, so a row
the batch reads several times is updated once, by its gradients' sum or mean; without it
the update runs once per occurrence, in order (as in Caffe2).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from dslc import core
from dslc.trace import names
from dslc.autodiff.gradients import GradientSlice
from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location
from dslc import utils, workspace
from dslc.ir.ops.yellowfin import SCALARS as YELLOWFIN_SCALARS

ITERATION = "optimizer_iteration"
ONE = "ONE_0_0"


class OptimizerError(DSLError, ValueError):
    """An optimizer asked for before the gradients exist, or with a bad argument."""


def _blob_defined(net, name) -> bool:
    return any(name in op.outputs for op in net.ops())


def _ensure(init_net, name, **fill):
    """``init_net`` fills ``name`` once (several optimizers share the counter and the constants)."""
    if not _blob_defined(init_net, name):
        init_net.ConstantFill([], name, **fill)
    return core.BlobReference(name, init_net)


AuxOptimizerParams = namedtuple("AuxOptimizerParams", ["local", "shared"])


class Optimizer:
    kind = "Optimizer"

    def __init__(self, policy="fixed", lars=None, **lr_args):
        self.policy, self.lr_args = policy, lr_args
        self.index = names.next_instance(self.kind)
        # the blobs the optimizer keeps: per parameter (moments) and shared (the constant one)
        self._aux_params = AuxOptimizerParams(local=[], shared=[])
        self._lr_multiplier = None  # a blob scaling every learning rate (gradient clipping, injection)
        if lars is not None and lars < 0:
            raise OptimizerError(f"lars is the LARS offset, which must be >= 0; got {lars}", user_location(3))
        self.lars = lars  # layer-wise adaptive rate scaling of dense parameters, with this offset
        self._local_lr_multiplier = None  # the current parameter's (its LARS factor)

    def apply(self, model, param, grad):
        """Record ``param``'s update: its learning rate scaled by its LARS factor first when
        ``lars`` is set and the gradient is dense (Caffe2 leaves sparse ones unscaled)."""
        self._local_lr_multiplier = None
        if self.lars is not None and not isinstance(grad, GradientSlice):
            if getattr(self, "weight_decay", 0):
                raise OptimizerError("LARS with weight_decay is not supported (nor in Caffe2)", user_location(3),
                                     "drop one of them")
            init = model.param_init_net
            inputs = [param, grad, _ensure(init, "weight_decay", shape=[1], value=0.0),
                      _ensure(init, "trust", shape=[1], value=1.0),
                      _ensure(init, "lr_max", shape=[1], value=float(np.finfo(np.float32).max))]
            self._local_lr_multiplier = model.net.Lars(inputs, self.get_cpu_blob_name(f"{param}_lars"),
                                                       offset=self.lars, lr_min=0.0)
        self.update(model, param, grad)

    sparse_dedup_aggregator = None  # (the optimizers that take one set it)

    @staticmethod
    def dedup(net, sparse_dedup_aggregator, grad):
        """``grad`` (sparse) with each row once when an aggregator is named, else as it is."""
        if not isinstance(grad, GradientSlice):
            raise OptimizerError(f"dedup takes a sparse gradient (GradientSlice), got {type(grad).__name__}",
                                 user_location())
        if not sparse_dedup_aggregator:
            return grad
        return net.DeduplicateGradientSlices(grad, aggregator=sparse_dedup_aggregator)

    def _rows(self, model, grad):
        """The sparse gradient the update reads: deduplicated when this optimizer says so."""
        return self.dedup(model.net, self.sparse_dedup_aggregator, grad)

    def get_cpu_blob_name(self, base_str, node_name=""):
        """The name of this optimizer's blob ``base_str`` (Caffe2's: ``SgdOptimizer_0_lr_cpu``)."""
        return f"{self.kind}_{self.index}_{base_str}{node_name}_cpu"

    def add_lr_multiplier(self, lr_multiplier):
        self._lr_multiplier = lr_multiplier

    def get_auxiliary_parameters(self) -> AuxOptimizerParams:
        return self._aux_params

    def _one(self, model):
        return self._share(_ensure(model.param_init_net, ONE, shape=[1], value=1.0))

    def _share(self, blob):
        """List ``blob`` once among the shared aux params (every parameter's update reads it)."""
        if all(str(b) != str(blob) for b in self._aux_params.shared):
            self._aux_params.shared.append(blob)
        return blob

    def _local(self, *blobs):
        self._aux_params.local.extend(blobs)

    def build_lr(self, model, base_lr):
        """The iteration counter (counted once per run) and this optimizer's learning rate."""
        if not _blob_defined(model.param_init_net, ITERATION):
            _ensure(model.param_init_net, ITERATION, shape=[1], value=0, dtype=core.DataType.INT64)
            model.net.Iter([ITERATION], [ITERATION])
        lr = self.get_cpu_blob_name("lr")
        if not _blob_defined(model.net, lr):
            model.net.LearningRate([ITERATION], lr, base_lr=-base_lr, policy=self.policy, **self.lr_args)
        lr = core.BlobReference(lr, model.net)
        if self._lr_multiplier is not None:
            scaled = f"{self.kind}_{self.index}_scaled_lr"
            if not _blob_defined(model.net, scaled):
                model.net.Mul([lr, self._lr_multiplier], scaled)  # (numpy broadcasting: lr is a scalar)
            lr = core.BlobReference(scaled, model.net)
        if self._local_lr_multiplier is not None:  # (one per parameter: written anew before each update)
            lr = model.net.Mul([lr, self._local_lr_multiplier], self.get_cpu_blob_name("local_scaled_lr"))
        return lr, core.BlobReference(ITERATION, model.net)

    def __call__(self, net, param_init_net=None, param=None, grad=None):
        """``opt(model)``: update every parameter that has a gradient. Caffe2's per-parameter
        form, ``opt(net, param_init_net, param, grad)`` or ``opt(net, param_init_net,
        param_info)``: record one parameter's update into those two nets."""
        if param_init_net is None:
            for p, g in _params_with_grads(net):
                self.apply(net, p, g)
            return self
        if grad is None and hasattr(param, "grad"):  # a ParameterInfo
            param, grad = param.blob, param.grad
        if param is None or grad is None:
            raise OptimizerError(f"{type(self).__name__} needs a parameter and its gradient", user_location(),
                                 "call opt(net, param_init_net, param, grad) or opt(model)")
        self.apply(_Nets(net, param_init_net), core.BlobReference(str(param), param_init_net),
                    grad if isinstance(grad, GradientSlice) else core.BlobReference(str(grad), net))
        return self


class _Nets:
    """The two nets an update is recorded into, where no model is at hand (no param info)."""

    def __init__(self, net, param_init_net):
        self.net, self.param_init_net = net, param_init_net


class SgdOptimizer(Optimizer):
    kind = "SgdOptimizer"

    def __init__(self, base_learning_rate=0.01, policy="fixed", momentum=0.0, nesterov=1,
                 sparse_dedup_aggregator=None, **kwargs):
        super().__init__(policy, **kwargs)
        if base_learning_rate < 0:
            raise OptimizerError(f"build_sgd needs base_learning_rate >= 0, got {base_learning_rate}",
                                 user_location())
        self.base_lr, self.momentum, self.nesterov = base_learning_rate, momentum, nesterov
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.base_lr == 0:  # (no update, as in Caffe2)
            return
        init, net = model.param_init_net, model.net
        # WeightedSum adds lr * grad, so lr is negative; MomentumSGDUpdate subtracts, so positive
        lr, _ = self.build_lr(model, -self.base_lr if self.momentum else self.base_lr)
        one = self._one(model)  # (Caffe2's SGD makes it whatever the update)
        if self.momentum > 0:
            m = init.ConstantFill([param], f"{param}_momentum", value=0.0)
            self._local(m)
        if isinstance(grad, GradientSlice):  # only the rows the gradient has
            grad = self._rows(model, grad)
            if self.momentum > 0:
                net.SparseMomentumSGDUpdate([grad.values, m, lr, param, grad.indices], [grad.values, m, param],
                                            momentum=self.momentum, nesterov=self.nesterov)
            else:
                net.ScatterWeightedSum([param, one, grad.indices, grad.values, lr], param)
        elif self.momentum > 0:
            net.MomentumSGDUpdate([grad, m, lr, param], [grad, m, param], momentum=self.momentum,
                                  nesterov=self.nesterov)
        else:
            net.WeightedSum([param, one, grad, lr], param)


class AdagradOptimizer(Optimizer):
    kind = "AdagradOptimizer"

    def __init__(self, alpha=0.01, epsilon=1e-4, policy="fixed", decay=1.0, rowWise=False, weight_decay=0.0,
                 counter_halflife=-1, engine="", sparse_dedup_aggregator=None, **kwargs):
        super().__init__(policy, **kwargs)
        self.alpha, self.epsilon, self.decay, self.row_wise = alpha, epsilon, decay, bool(rowWise)
        self.weight_decay, self.counter_halflife = float(weight_decay), counter_halflife
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.alpha <= 0:  # (no update, as in Caffe2)
            return
        if self.row_wise and not isinstance(grad, GradientSlice):
            raise OptimizerError(f"row-wise Adagrad of {param} needs a sparse gradient (as in Caffe2)",
                                 user_location(), "use rowWise only for parameters read by Gather / SparseLengthsSum")
        lr, it = self.build_lr(model, self.alpha)
        # (Caffe2 decays no rank-1 parameter, dense or sparse: biases, 1-D tables)
        weight_decay = self.weight_decay if self.weight_decay and _param_rank(model, param) != 1 else 0.0
        decay = {"weight_decay": weight_decay} if weight_decay else {}
        if isinstance(grad, GradientSlice):
            if self.decay != 1.0:
                raise OptimizerError("Adagrad's decay needs a dense gradient", user_location(3),
                                     "leave decay at 1 for sparse parameters")
            grad = self._rows(model, grad)
            if self.row_wise:  # one moment per row
                s = _row_moment(model, param)
                op = "RowWiseSparseAdagrad"
            else:
                s = model.param_init_net.ConstantFill([param], f"{param}_squared_sum", value=0.0)
                op = "SparseAdagrad"
            self._local(s)
            inputs = [param, s, grad.indices, grad.values, lr]
            if self.counter_halflife > 0:  # (how often each row is updated, for the weight decay)
                self._share(it)
                prev, counter = _row_counters(model, param)
                if self.row_wise:
                    inputs.append(counter)
                    if weight_decay:
                        decay["counter_halflife"] = self.counter_halflife
            getattr(model.net, op)(inputs, [param, s], epsilon=self.epsilon, **decay)
            if self.counter_halflife > 0:
                model.net.RowWiseCounter([prev, counter, grad.indices, it], [prev, counter],
                                         counter_halflife=self.counter_halflife)
            return
        s = model.param_init_net.ConstantFill([param], f"{param}_squared_sum", value=0.0)
        self._local(s)
        model.net.Adagrad([param, s, grad, lr], [param, s], epsilon=self.epsilon, decay=self.decay, **decay)


class AdamOptimizer(Optimizer):
    kind = "AdamOptimizer"

    def __init__(self, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, policy="fixed", rowWise=False,
                 use_smart_decay=False, engine="", sparse_dedup_aggregator=None, enableRAdam=False, **kwargs):
        super().__init__(policy, **kwargs)
        self.alpha, self.beta1, self.beta2, self.epsilon = alpha, beta1, beta2, epsilon
        self.row_wise, self.smart_decay = bool(rowWise), bool(use_smart_decay)
        self.sparse_dedup_aggregator, self.radam = sparse_dedup_aggregator, bool(enableRAdam)
        if self.smart_decay and (self.row_wise or self.radam):
            raise OptimizerError("use_smart_decay cannot be combined with " + ("rowWise" if self.row_wise else
                                 "enableRAdam") + " (nor in Caffe2)", user_location(), "drop one of them")

    def update(self, model, param, grad):
        if self.alpha <= 0:  # (no update, as in Caffe2)
            return
        if self.row_wise and self.radam and isinstance(grad, GradientSlice):
            raise OptimizerError("RAdam of a row-wise Adam is not supported (nor in Caffe2)", user_location(),
                                 "drop rowWise or enableRAdam")
        if self.row_wise and not isinstance(grad, GradientSlice):
            raise OptimizerError(f"row-wise Adam of {param} needs a sparse gradient (as in Caffe2)",
                                 user_location(3), "use rowWise only for parameters read by Gather / SparseLengthsSum")
        lr, it = self.build_lr(model, self.alpha)
        init = model.param_init_net
        m1 = init.ConstantFill([param], f"{param}_first_moment", value=0.0)
        if self.row_wise:  # (one second moment per row: [rows], from the parameter's shape)
            m2 = _per_row(model, param, f"{param}_avg_second_moment", 0.0)
        else:
            m2 = init.ConstantFill([param], f"{param}_second_moment", value=0.0)
        last_seen = None
        if self.smart_decay:  # (the step each row was last updated at, for its catch-up)
            last_seen = _per_row(model, param, f"{param}_last_seen", 0, core.DataType.INT64)
            self._local(last_seen)
        self._local(m1, m2)
        self._share(it)  # (the step count its bias correction reads)
        args = {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon}
        if isinstance(grad, GradientSlice):
            grad = self._rows(model, grad)
            if self.row_wise:
                model.net.RowWiseSparseAdam([param, m1, m2, grad.indices, grad.values, lr, it], [param, m1, m2],
                                            **args)
            elif self.smart_decay:
                model.net.SmartDecaySparseAdam([param, m1, m2, last_seen, grad.indices, grad.values, lr, it],
                                               [param, m1, m2, last_seen], **args)
            else:  # (RAdam rectifies the sparse update only, as in Caffe2; a dense parameter gets Adam)
                model.net.SparseAdam([param, m1, m2, grad.indices, grad.values, lr, it], [param, m1, m2],
                                     enableRAdam=int(self.radam), **args)
            return
        model.net.Adam([param, m1, m2, grad, lr, it], [param, m1, m2], beta1=self.beta1,
                       beta2=self.beta2, epsilon=self.epsilon)


class RmsPropOptimizer(Optimizer):
    """Caffe2's RMSProp: RmsProp gives the step (moment'), MomentumSGDUpdate applies it."""

    kind = "RmsPropOptimizer"

    def __init__(self, alpha=0.01, decay=0.9, momentum=0.0, epsilon=1e-5, policy="fixed", **kwargs):
        super().__init__(policy, **kwargs)
        self.alpha, self.decay, self.momentum, self.epsilon = alpha, decay, momentum, epsilon

    def update(self, model, param, grad):
        if isinstance(grad, GradientSlice):
            raise OptimizerError(f"RMSProp of the sparse gradient of {param} is not supported (nor in Caffe2)",
                                 user_location(3), "use SGD, Adagrad or Adam for embedding tables")
        init, net = model.param_init_net, model.net
        one = _ensure(init, ONE, shape=[1], value=1.0)  # (Caffe2's RMSProp keeps no shared blob)
        lr, _ = self.build_lr(model, -self.alpha)  # (positive: MomentumSGDUpdate subtracts)
        grad_o = init.ConstantFill([param], f"{param}_grad_o", value=0.0)
        ms = init.ConstantFill([param], f"{param}_mean_squares", value=0.0)
        mom = init.ConstantFill([param], f"{param}_momentum", value=0.0)
        self._local(ms, mom)
        net.RmsProp([grad, ms, mom, one], [grad_o, ms, mom], decay=self.decay, momentum=self.momentum,
                    epsilon=self.epsilon)
        net.MomentumSGDUpdate([grad_o, mom, lr, param], [grad_o, mom, param])


def _unsupported(**options):
    """Options of Caffe2's optimizers that need operators dslc lacks (EMA): refused at the
    user's line rather than ignored."""
    for name, value in options.items():
        if value:
            raise OptimizerError(f"{name} is not supported (dslc has no EMA operator yet)", user_location(3),
                                 f"drop {name}")


class WngradOptimizer(Optimizer):
    """WNGrad: one accumulator per parameter (``<param>_moment``, from ``moment_init``)."""

    kind = "WngradOptimizer"

    def __init__(self, alpha=1.0, epsilon=1e-9, policy="fixed", sparse_dedup_aggregator=None, engine="",
                 moment_init=100.0, lars=None, output_effective_lr=False, output_effective_lr_and_update=False,
                 **kwargs):
        super().__init__(policy, lars=lars, **kwargs)
        self.alpha, self.epsilon, self.moment_init = alpha, epsilon, moment_init
        self.outputs = 2 if output_effective_lr_and_update else 1 if output_effective_lr else 0
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.alpha <= 0:  # (no update, as in Caffe2)
            return
        lr, _ = self.build_lr(model, self.alpha)
        b = model.param_init_net.ConstantFill([], f"{param}_moment", shape=[1], value=self.moment_init)
        self._local(b)
        if isinstance(grad, GradientSlice):
            grad = self._rows(model, grad)
            model.net.SparseWngrad([param, b, grad.indices, grad.values, lr], [param, b], epsilon=self.epsilon)
            return
        extra = [f"{param}_effective_lr", f"{param}_update"][:self.outputs]
        model.net.Wngrad([param, b, grad, lr], [param, b] + extra, epsilon=self.epsilon)


class StormOptimizer(Optimizer):
    """STORM: a moment per element and a sum of squared gradients per parameter."""

    kind = "StormOptimizer"

    def __init__(self, lr=0.1, momentum=10.0, beta=0.1, grad_sq_init=0.01, policy="fixed",
                 sparse_dedup_aggregator=None, lars=None, **kwargs):
        super().__init__(policy, lars=lars, **kwargs)
        self.lr, self.momentum, self.beta, self.grad_sq_init = lr, momentum, beta, grad_sq_init
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.lr <= 0:  # (no update, as in Caffe2)
            return
        lr, _ = self.build_lr(model, self.lr)
        init = model.param_init_net
        moment = init.ConstantFill([param], f"{param}_moment", value=0.0)
        sq = init.ConstantFill([], f"{param}_grad_sq_sum", shape=[1], value=self.grad_sq_init)
        self._local(moment, sq)
        args = {"momentum": self.momentum, "beta": self.beta}
        if isinstance(grad, GradientSlice):
            grad = self._rows(model, grad)
            model.net.SparseStorm([param, moment, sq, grad.values, grad.indices, lr], [param, moment, sq], **args)
            return
        model.net.Storm([param, moment, sq, grad, lr], [param, moment, sq], **args)


class DecayAdagradOptimizer(Optimizer):
    """Adagrad with a decaying first moment and weight decay (dense); SparseAdagrad for a
    sparse gradient, as Caffe2's."""

    kind = "DecayAdagradOptimizer"

    def __init__(self, alpha=0.01, beta1=0.0, beta2=0.999, epsilon=0.1, weight_decay=0.0, ema_options=None,
                 bias_correction_first=True, policy="fixed", engine="", **kwargs):
        super().__init__(policy, **kwargs)
        _unsupported(ema_options=ema_options)
        self.alpha, self.beta1, self.beta2, self.epsilon = alpha, beta1, beta2, epsilon
        self.weight_decay, self.bias_correction_first = weight_decay, bias_correction_first

    def update(self, model, param, grad):
        lr, it = self.build_lr(model, self.alpha)
        init = model.param_init_net
        if isinstance(grad, GradientSlice):
            s = init.ConstantFill([param], f"{param}_squared_sum", value=0.0)
            self._local(s)
            model.net.SparseAdagrad([param, s, grad.indices, grad.values, lr], [param, s], epsilon=self.epsilon)
            return
        m1 = init.ConstantFill([param], f"{param}_first_mo1ment", value=0.0)  # (Caffe2's spelling)
        m2 = init.ConstantFill([param], f"{param}_second_moment", value=0.0)
        self._local(m1, m2)
        self._share(it)
        model.net.DecayAdagrad([param, m1, m2, grad, lr, it], [param, m1, m2], beta1=self.beta1, beta2=self.beta2,
                               epsilon=self.epsilon, weight_decay=self.weight_decay,
                               bias_correction_first=int(bool(self.bias_correction_first)))


class FtrlOptimizer(Optimizer):
    """FTRL-proximal: the step comes from the gradient's history (n, z), no learning rate."""

    kind = "FtrlOptimizer"

    def __init__(self, alpha=0.01, beta=1e-4, lambda1=0, lambda2=0, sparse_dedup_aggregator=None, **kwargs):
        super().__init__("fixed", **kwargs)
        self.alpha, self.beta, self.lambda1, self.lambda2 = alpha, beta, lambda1, lambda2
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.alpha <= 0:
            return
        nz = model.param_init_net.ConstantFill([param], f"{param}_ftrl_nz", extra_shape=[2], value=0.0)
        self._local(nz)
        if isinstance(grad, GradientSlice):
            grad = self._rows(model, grad)
            model.net.SparseFtrl([param, nz, grad.indices, grad.values], [param, nz], alpha=self.alpha,
                                 beta=self.beta, lambda1=self.lambda1, lambda2=self.lambda2)
            return
        model.net.Ftrl([param, nz, grad], [param, nz], alpha=self.alpha, beta=self.beta, lambda1=self.lambda1,
                       lambda2=self.lambda2)


class GFtrlOptimizer(Optimizer):
    """Group-lasso FTRL (dense gradients only, as in Caffe2): GFtrl per parameter."""

    kind = "GFtrlOptimizer"

    def __init__(self, alpha=0.01, beta=1e-4, lambda1=0, lambda2=0, sparse_dedup_aggregator=None, engine="",
                 **kwargs):
        super().__init__("fixed", **kwargs)
        self.alpha, self.beta, self.lambda1, self.lambda2 = alpha, beta, lambda1, lambda2

    def update(self, model, param, grad):
        if self.alpha <= 0:
            return
        if isinstance(grad, GradientSlice):
            raise OptimizerError(f"GFtrl of {param} needs a dense gradient (Caffe2 has no sparse GFtrl)",
                                 user_location(3), "use build_ftrl for parameters read by Gather / SparseLengthsSum")
        nz = model.param_init_net.ConstantFill([param], f"{param}_gftrl_nz", extra_shape=[2], value=0.0)
        self._local(nz)
        model.net.GFtrl([param, nz, grad], [param, nz], alpha=self.alpha, beta=self.beta, lambda1=self.lambda1,
                        lambda2=self.lambda2)


class AdadeltaOptimizer(Optimizer):
    kind = "AdadeltaOptimizer"

    def __init__(self, alpha=0.01, epsilon=1e-4, decay=0.95, policy="fixed", sparse_dedup_aggregator=None, engine="",
                 **kwargs):
        super().__init__(policy, **kwargs)
        self.alpha, self.epsilon, self.decay = alpha, epsilon, decay
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.alpha <= 0:
            return
        lr, _ = self.build_lr(model, self.alpha)
        init = model.param_init_net
        moment = init.ConstantFill([param], f"{param}_squared_moment", value=0.0)
        update = init.ConstantFill([param], f"{param}_squared_moment_update", value=0.0)
        self._local(moment, update)
        if isinstance(grad, GradientSlice):
            grad = self._rows(model, grad)
            model.net.SparseAdadelta([param, moment, update, grad.indices, grad.values, lr], [param, moment, update],
                                     epsilon=self.epsilon, decay=self.decay)
            return
        model.net.Adadelta([param, moment, update, grad, lr], [param, moment, update], epsilon=self.epsilon,
                           decay=self.decay)


class YellowFinOptimizer(Optimizer):
    """YellowFin (arXiv 1706.03471): momentum SGD whose learning rate and momentum tune
    themselves, per parameter, from the gradients' statistics (ir/ops/yellowfin.py); ``alpha``
    and ``mu`` are where they start. Dense gradients only, as in Caffe2. The counter is
    ``optimizer_iteration``, counted by an AtomicIter under ``iteration_mutex``."""

    kind = "YellowFinOptimizer"

    def __init__(self, alpha=0.1, mu=0.0, beta=0.999, curv_win_width=20, zero_debias=True, epsilon=0.1 ** 6,
                 policy="fixed", sparse_dedup_aggregator=None, **kwargs):
        super().__init__(policy, **kwargs)
        self.alpha, self.mu, self.beta, self.curv_win_width = alpha, mu, beta, curv_win_width
        self.zero_debias, self.epsilon = zero_debias, epsilon
        self.sparse_dedup_aggregator = sparse_dedup_aggregator

    def update(self, model, param, grad):
        if self.alpha <= 0:
            raise OptimizerError(f"YellowFin needs alpha > 0 (the starting learning rate), got {self.alpha}",
                                 user_location(3))
        if isinstance(grad, GradientSlice):
            raise OptimizerError(f"YellowFin of {param} needs a dense gradient (Caffe2's has no sparse form)",
                                 user_location(3), "use build_sgd or build_adagrad for parameters read by Gather "
                                 "or SparseLengthsSum")
        init, width = model.param_init_net, int(self.curv_win_width)
        moment = init.ConstantFill([param], f"{param}_moment", value=0.0)
        curv_win = init.ConstantFill([], f"{param}_curv_win", shape=[width], value=0.0)
        g_avg = init.ConstantFill([param], f"{param}_g_avg", value=0.0)
        g2_avg = init.ConstantFill([param], f"{param}_g2_avg", value=0.0)
        lr_avg = init.ConstantFill([], f"{param}_lr_avg", shape=[1], value=float(self.alpha))
        mu_avg = init.ConstantFill([], f"{param}_mu_avg", shape=[1], value=float(self.mu))
        scalars = init.ConstantFill([], f"{param}_scalars_memory", shape=[YELLOWFIN_SCALARS], value=0.0)
        iteration = utils.BuildUniqueMutexIter(init, model.net, iter_val=0)
        self._share(iteration)
        self._local(moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, scalars)
        state = [param, moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, scalars]
        model.net.YellowFin(state + [grad, iteration], state, beta=self.beta, epsilon=self.epsilon,
                            curv_win_width=width, zero_debias=int(bool(self.zero_debias)))


def _per_row(model, param, name, value, dtype=None):
    """A fill of ``value`` per row of ``param``, made in param_init_net: of the recorded shape
    when the parameter has one, else of the rows the parameter has when the init net runs."""
    init = model.param_init_net
    kind = {} if dtype is None else {"dtype": dtype}
    info = _param_info(model, param)
    if info is not None and info.shape:
        return init.ConstantFill([], name, value=value, shape=[int(info.shape[0])], **kind)
    rows = f"{param}_shape_numrows"
    if not _blob_defined(init, rows):
        init.Slice([init.Shape([param], f"{param}_shape")], rows, starts=[0], ends=[1])
    return init.ConstantFill([rows], name, value=value, input_as_shape=1, **kind)


def _row_moment(model, param):
    return _per_row(model, param, f"{param}_avg_squared_sum", 0.0)  # (Caffe2's name for the row-wise moment)


def _row_counters(model, param):
    """Per row of ``param``: the iteration it was last updated at (int64) and its decayed
    update count (double), under Caffe2's names."""
    counter = _per_row(model, param, f"{param}_update_counter", 0.0, core.DataType.DOUBLE)
    prev = _per_row(model, param, f"{param}_prev_update_iter", 0, core.DataType.INT64)
    return prev, counter


def _param_rank(model, param):
    """The rank of ``param``: from the shape the model recorded for it, else from the init net's
    shapes given the current workspace (as Caffe2 infers it); an error when neither knows."""
    info = _param_info(model, param)
    if info is not None and info.shape is not None:
        return len(info.shape)
    shapes, _ = workspace.InferShapesAndTypes([model.param_init_net])
    if str(param) not in shapes:
        raise OptimizerError(f"weight_decay: the shape of {param} is unknown when the optimizer is built (it decays "
                             "no rank-1 parameter, so it needs the rank)", user_location(),
                             "make the parameter with a shape in param_init_net, or feed it before building")
    return len(shapes[str(param)])


def _param_info(model, param):
    """The ParameterInfo the model recorded for ``param``, or None (none recorded, or no model)."""
    return model.get_param_info(param) if hasattr(model, "get_param_info") else None


def _params_with_grads(model):
    if not model.gradient_ops_added:
        raise OptimizerError("the model has no gradients yet", user_location(3),
                             "call model.AddGradientOperators([loss]) before building the optimizer")
    model.Validate()
    return [(p, model.param_to_grad[p]) for p in model.params if p in model.param_to_grad]


LR_INJECTION = "lr_injection"


def _build(model, opt, max_gradient_norm=None, allow_lr_injection=False):
    """Run ``opt`` over the model's parameters, every learning rate scaled by the ratio that
    clips the gradients' global norm to ``max_gradient_norm`` and by the ``lr_injection``
    blob (``set_lr_injection``), when asked for."""
    params = _params_with_grads(model)
    _add_lr_multiplier(model, opt, params, max_gradient_norm, allow_lr_injection)
    for param, grad in params:
        # (a parameter made under UseOptimizer(...) keeps the optimizer chosen there)
        chosen = getattr(_param_info(model, param), "optimizer", None) or opt
        chosen.apply(model, param, grad)
    return opt


def _add_lr_multiplier(model, opt, params, max_gradient_norm, allow_lr_injection):
    multiplier = None
    if max_gradient_norm is not None:
        multiplier = _norm_ratio(model, params, float(max_gradient_norm))
    if allow_lr_injection:
        injection = _ensure(model.param_init_net, LR_INJECTION, shape=[1], value=1.0)
        multiplier = injection if multiplier is None else \
            model.net.Mul([multiplier, injection], "lr_multiplier")
    opt.add_lr_multiplier(multiplier)


def _norm_ratio(model, params, max_norm):
    """clip / max(clip, the global norm of every gradient), as a blob (Caffe2's names)."""
    with core.NameScope("norm_clipped_grad_update"):
        sums = [model.net.SumSqrElements(grad.values if isinstance(grad, GradientSlice) else grad,
                                         f"grad_{k}_squared_sum") for k, (_, grad) in enumerate(params)]
        total = model.net.Sum(sums, "grad_squared_full_sum")
        norm = model.net.Pow(total, "global_norm", exponent=0.5)
        clip = model.param_init_net.ConstantFill([], "clip_norm", shape=[], value=max_norm)
        return model.net.Div([clip, model.net.Max([norm, clip], "max_norm")], "norm_ratio")


class _InstanceCounts:
    """Caffe2's ``optimizer._optimizer_instance_count``: how many optimizers of each kind
    exist (the ``k`` the next one's ``<kind>_<k>_lr_cpu`` gets), read from dslc/trace/names.py."""

    def __getitem__(self, kind: str) -> int:
        return names.instance_count(kind)


_optimizer_instance_count = _InstanceCounts()


def _get_param_to_device(model) -> dict:
    """{parameter: the device option of the op that fills it in param_init_net}."""
    return {b: op.extra["device_option"] for op in model.param_init_net.ops()
            if op.extra.get("device_option") is not None for b in op.outputs}


def get_param_device(param_name, param, param_to_device=None, default_device=None):
    """The device option to record ``param_name``'s update under: where its fill op runs, else
    ``default_device`` (None: the current device scope)."""
    return (param_to_device or {}).get(str(param_name), default_device)


def set_lr_injection(lr_injection_value):
    """Scale every learning rate of optimizers built with allow_lr_injection=True."""
    import numpy as np
    workspace.FeedBlob(LR_INJECTION, np.array([float(lr_injection_value)], dtype=np.float32))


def get_lr_injection():
    return workspace.FetchBlob(LR_INJECTION)


def build_sgd(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False, **kwargs):
    """param += lr * grad (lr = -base_learning_rate by policy), or MomentumSGDUpdate with ``momentum``."""
    return _build(model, SgdOptimizer(base_learning_rate, **kwargs), max_gradient_norm, allow_lr_injection)


def build_adagrad(model, base_learning_rate, parameters=None, max_gradient_norm=None, allow_lr_injection=False,
                  **kwargs):
    return _build(model, AdagradOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm,
                  allow_lr_injection)


def build_adam(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False, **kwargs):
    return _build(model, AdamOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm, allow_lr_injection)


def build_multi_precision_sgd(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False,
                              **kwargs):
    """SGD for float16 parameters kept as float32 masters (PseudoFP16Initializer): the
    master takes the update, the float16 parameter is its copy; a float32 parameter without
    a master is plain SGD (as in Caffe2). The learning rate scaled as ``_build`` scales it."""
    opt = SgdOptimizer(base_learning_rate, **kwargs)
    params = _params_with_grads(model)
    _add_lr_multiplier(model, opt, params, max_gradient_norm, allow_lr_injection)
    for param, grad in params:
        info = _param_info(model, param)
        master = (info.blob_copy or {}).get(core.DataType.FLOAT) if info is not None else None
        if master is None:
            opt.apply(model, param, grad)
            continue
        grad32 = model.net.HalfToFloat(grad, f"{grad}_fp32")
        opt.apply(model, master, grad32)
        model.net.FloatToHalf(master, param)
    return opt


def build_rms_prop(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False, **kwargs):
    return _build(model, RmsPropOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm,
                  allow_lr_injection)


def build_ftrl(model, engine="SIMD", **kwargs):
    return _build(model, FtrlOptimizer(**kwargs))


def build_adadelta(model, base_learning_rate, parameters=None, max_gradient_norm=None, allow_lr_injection=False,
                   **kwargs):
    return _build(model, AdadeltaOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm,
                  allow_lr_injection)


def build_gftrl(model, engine="", **kwargs):
    return _build(model, GFtrlOptimizer(**kwargs))


def build_yellowfin(model, base_learning_rate=0.1, **kwargs):
    return _build(model, YellowFinOptimizer(alpha=base_learning_rate, **kwargs))


def build_wngrad(model, base_learning_rate, parameters=None, max_gradient_norm=None, allow_lr_injection=False,
                 **kwargs):
    return _build(model, WngradOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm,
                  allow_lr_injection)


def build_storm(model, base_learning_rate, parameters=None, max_gradient_norm=None, allow_lr_injection=False,
                **kwargs):
    return _build(model, StormOptimizer(lr=base_learning_rate, **kwargs), max_gradient_norm, allow_lr_injection)


def build_decay_adagrad(model, base_learning_rate, parameters=None, max_gradient_norm=None,
                        allow_lr_injection=False, **kwargs):
    return _build(model, DecayAdagradOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm,
                  allow_lr_injection)


def add_weight_decay(model, weight_decay, one=ONE, wd="wd_0_0"):
    """grad += weight_decay * w for every parameter tagged a weight (biases are not), of any
    rank, as in Caffe2; a weight with a sparse gradient is an error there and here."""
    init = model.param_init_net
    for param, grad in _params_with_grads(model):
        if param not in model.weights:
            continue
        if isinstance(grad, GradientSlice):
            raise OptimizerError(f"add_weight_decay: {param} has a sparse gradient (weight decay takes dense "
                                 "ones, as in Caffe2)", user_location(),
                                 "use Adagrad's weight_decay for tables read by Gather / SparseLengthsSum")
        o = _ensure(init, one, shape=[1], value=1.0)
        w = _ensure(init, wd, shape=[1], value=float(weight_decay))
        model.net.WeightedSum([grad, o, param, w], grad)
