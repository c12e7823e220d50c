"""Loss layers: each takes a Struct with ``label`` and ``logit``/``prediction`` (and an
optional ``weight``), outputs a scalar loss and is left out of prediction nets.

- ``BatchLRLoss``: logistic regression (sigmoid cross-entropy of the logit), averaged (or
  summed); label smoothing to (neg, pos) targets, focal loss, JSD mixing with a prediction,
  an exponentially decaying task weight, an uncertainty (log variance) term;
- ``BatchMSELoss``: squared distance of the prediction to the label, halved and averaged;
- ``BatchSigmoidCrossEntropyLoss``: multi-label sigmoid cross-entropy, averaged;
- ``BatchSoftmaxLoss``: softmax and its cross-entropy (integer labels, label probabilities,
  or labels smoothed through a matrix).
"""
from __future__ import annotations

import numpy as np

from dslc import core, schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.layers.tags import Tags
from dslc.trace.tracing import user_location


def _require(ok, message):
    if not ok:
        raise LayerError(message, user_location(3))


def _needs_fields(input_record, layer, *names):
    _require(schema.is_schema_subset(schema.Struct(*[(n, schema.Scalar()) for n in names]), input_record),
             f"{layer} takes a Struct with fields {', '.join(names)}; got {input_record.field_names()}")


def _float_weight(net, record):
    """The record's ``weight`` as float32, with no gradient flowing into it."""
    weight = record.weight()
    if record.weight.field_type().base != np.float32:
        weight = net.Cast(weight, weight + "_float32", to=core.DataType.FLOAT)
    return net.StopGradient([weight], [net.NextScopedBlob("weight_stop_gradient")])


def _constant_param(layer, name, value, dtype=core.DataType.FLOAT):
    return layer.create_param(param_name=name, shape=[1],
                              initializer=("ConstantFill", {"value": value, "dtype": dtype}),
                              optimizer=layer.model.NoOptim)


class BatchLRLoss(ModelLayer):
    def __init__(self, model, input_record, name="batch_lr_loss", average_loss=True, jsd_weight=0.0,
                 pos_label_target=1.0, neg_label_target=0.0, homotopy_weighting=False, log_D_trick=False,
                 unjoined_lr_loss=False, uncertainty_penalty=1.0, focal_gamma=0.0,
                 stop_grad_in_focal_factor=False, task_gamma=1.0, task_gamma_lb=0.1, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.average_loss = average_loss
        _needs_fields(input_record, "BatchLRLoss", "label", "logit")
        _require(0 <= jsd_weight <= 1, f"jsd_weight is in [0, 1], got {jsd_weight}")
        self.jsd_fuse = jsd_weight > 0 or homotopy_weighting
        self.homotopy_weighting = homotopy_weighting
        if self.jsd_fuse:
            _require("prediction" in input_record, "BatchLRLoss with JSD needs a prediction field")
            self._init_jsd_weights(jsd_weight, homotopy_weighting)
        _require(0 <= neg_label_target <= pos_label_target <= 1,
                 "label targets need 0 <= neg_label_target <= pos_label_target <= 1")
        self.pos_label_target, self.neg_label_target = pos_label_target, neg_label_target
        _require(not (log_D_trick and unjoined_lr_loss), "log_D_trick and unjoined_lr_loss exclude each other")
        self.log_D_trick, self.unjoined_lr_loss = log_D_trick, unjoined_lr_loss
        _require(uncertainty_penalty >= 0, "uncertainty_penalty is >= 0")
        self.uncertainty_penalty = uncertainty_penalty
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))
        self.focal_gamma = focal_gamma
        self.stop_grad_in_focal_factor = stop_grad_in_focal_factor
        self.apply_exp_decay = task_gamma < 1.0
        if self.apply_exp_decay:
            self.task_gamma_cur = _constant_param(self, f"{self.name}_task_gamma_cur", 1.0)
            self.task_gamma = _constant_param(self, f"{self.name}_task_gamma", task_gamma)
            self.task_gamma_lb = _constant_param(self, f"{self.name}_task_gamma_lb", task_gamma_lb)

    def _init_jsd_weights(self, jsd_weight, homotopy_weighting):
        if homotopy_weighting:
            self.mutex = self.create_param(param_name=f"{self.name}_mutex", shape=None,
                                           initializer=("CreateMutex",), optimizer=self.model.NoOptim)
            self.counter = _constant_param(self, f"{self.name}_counter", 0, core.DataType.INT64)
            self.xent_weight = _constant_param(self, f"{self.name}_xent_weight", 1.0)
            self.jsd_weight = _constant_param(self, f"{self.name}_jsd_weight", 0.0)
        else:
            self.jsd_weight = self.model.add_global_constant(f"{self.name}_jsd_weight", jsd_weight)
            self.xent_weight = self.model.add_global_constant(f"{self.name}_xent_weight", 1.0 - jsd_weight)

    def update_weight(self, net):
        """Homotopy weighting: the cross-entropy's weight decays as 1/(1 + 1e-6 t)^0.1, JSD takes the rest."""
        net.AtomicIter([self.mutex, self.counter], [self.counter])
        net.LearningRate([self.counter], [self.xent_weight], base_lr=1.0, policy="inv", gamma=1e-6, power=0.1)
        net.Sub([self.model.global_constants["ONE"], self.xent_weight], [self.jsd_weight])
        return self.xent_weight, self.jsd_weight

    def _focal(self, net, xent, label):
        label = net.StopGradient([label], [net.NextScopedBlob("label_stop_gradient")])
        p = self.input_record.prediction()
        # |y - p| for y in {0, 1}, as y + p - 2yp, raised to gamma
        y_plus_p = net.Add([p, label], net.NextScopedBlob("y_plus_p"))
        yp = net.Mul([p, label], net.NextScopedBlob("yp"))
        two_yp = net.Scale(yp, net.NextScopedBlob("two_yp"), scale=2.0)
        diff = net.Sub([y_plus_p, two_yp], net.NextScopedBlob("y_plus_p_sub_two_yp"))
        factor = net.Pow(diff, net.NextScopedBlob("y_plus_p_sub_two_yp_power"), exponent=float(self.focal_gamma))
        if self.stop_grad_in_focal_factor is True:
            factor = net.StopGradient([factor], [net.NextScopedBlob("focal_factor_stop_gradient")])
        return net.Mul([xent, factor], net.NextScopedBlob("focallossxent"))

    def _uncertainty(self, net, loss):
        """0.5 * (exp(-s) * loss + penalty * s) for the log variance s (exp argument capped at 88)."""
        s = net.ExpandDims(self.input_record.log_variance(), net.NextScopedBlob("expanded_log_variance"),
                           dims=[1])
        neg = net.Negative([s], net.NextScopedBlob("neg_log_variance"))
        neg = net.Clip([neg], net.NextScopedBlob("clipped_neg_log_variance"), max=88.0)
        precision = net.Exp([neg], net.NextScopedBlob("exp_neg_log_variance"))
        scaled = net.Mul([precision, loss], net.NextScopedBlob("exp_neg_log_variance_loss"))
        penalty = net.Scale(s, net.NextScopedBlob("penalized_unceratinty"), scale=float(self.uncertainty_penalty))
        both = net.Add([scaled, penalty], net.NextScopedBlob("loss"))
        return net.Scale(both, net.NextScopedBlob("loss"), scale=0.5)

    def add_ops(self, net):
        label = net.Cast(self.input_record.label(), net.NextScopedBlob("label_float32"), to=core.DataType.FLOAT)
        label = net.ExpandDims(label, net.NextScopedBlob("expanded_label"), dims=[1])
        if self.pos_label_target != 1.0 or self.neg_label_target != 0.0:
            label = net.StumpFunc(label, net.NextScopedBlob("smoothed_label"), threshold=0.5,
                                  low_value=self.neg_label_target, high_value=self.pos_label_target)
        xent = net.SigmoidCrossEntropyWithLogits([self.input_record.logit(), label],
                                                 net.NextScopedBlob("cross_entropy"), log_D_trick=self.log_D_trick,
                                                 unjoined_lr_loss=self.unjoined_lr_loss)
        if self.focal_gamma != 0:
            xent = self._focal(net, xent, label)
        if self.apply_exp_decay:
            net.Mul([self.task_gamma_cur, self.task_gamma], self.task_gamma_cur)
            multiplier = net.Max([self.task_gamma_cur, self.task_gamma_lb],
                                 net.NextScopedBlob("task_gamma_cur_multiplier"))
            xent = net.Mul([xent, multiplier], net.NextScopedBlob("expdecayxent"))
        loss = xent
        if self.jsd_fuse:
            jsd = net.BernoulliJSD([self.input_record.prediction(), label], net.NextScopedBlob("jsd"))
            if self.homotopy_weighting:
                self.update_weight(net)
            loss = net.WeightedSum([xent, self.xent_weight, jsd, self.jsd_weight], net.NextScopedBlob("loss"))
        if "log_variance" in self.input_record.fields:
            loss = self._uncertainty(net, loss)
        if "weight" in self.input_record.fields:
            loss = net.Mul([loss, _float_weight(net, self.input_record)],
                           net.NextScopedBlob("weighted_cross_entropy"))
        if self.average_loss:
            net.AveragedLoss(loss, self.output_schema.field_blobs())
        else:
            net.ReduceFrontSum(loss, self.output_schema.field_blobs())


class BatchMSELoss(ModelLayer):
    def __init__(self, model, input_record, name="batch_mse_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _needs_fields(input_record, "BatchMSELoss", "label", "prediction")
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        record = self.input_record
        prediction = record.prediction()
        label = record.label.field_blobs()
        if record.label.field_type().base != record.prediction.field_type().base:
            label = net.Cast(label, net.NextScopedBlob("cast_label"),
                             to=schema.data_type_for_dtype(record.prediction.field_type()))
        label = net.ExpandDims(label, 1, dims=[1])
        label = net.StopGradient(label, net.NextScopedBlob("stopped_label"))
        dist = net.SquaredL2Distance([label, prediction], net.NextScopedBlob("l2"))
        if "weight" in record.fields:
            dist = net.Mul([dist, _float_weight(net, record)], net.NextScopedBlob("weighted_l2_distance"))
        net.AveragedLoss(dist, self.output_schema.field_blobs())


class BatchSigmoidCrossEntropyLoss(ModelLayer):
    def __init__(self, model, input_record, name="batch_sigmoid_cross_entropy_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _needs_fields(input_record, "BatchSigmoidCrossEntropyLoss", "label", "prediction")
        _require(input_record.prediction.field_type().shape == input_record.label.field_type().shape,
                 "prediction and label must have the same shape")
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar((np.float32, tuple()), self.get_next_blob_reference("loss"))

    def add_ops(self, net):
        xent = net.SigmoidCrossEntropyWithLogits([self.input_record.prediction(), self.input_record.label()],
                                                 net.NextScopedBlob("sigmoid_cross_entropy"))
        net.AveragedLoss(xent, self.output_schema.field_blobs())


class BatchSoftmaxLoss(ModelLayer):
    """Outputs a Struct (softmax, loss); the softmax is what prediction uses."""

    def __init__(self, model, input_record, name="batch_softmax_loss", label_smoothing_matrix=None,
                 label_prob=False, scale=1.0, average_by_batch_size=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _needs_fields(input_record, "BatchSoftmaxLoss", "label", "prediction")
        self.label_prob = label_prob
        self.scale = scale
        self.average_by_batch_size = average_by_batch_size
        self.label_smoothing_matrix = label_smoothing_matrix
        if label_smoothing_matrix is not None:
            self._init_label_smoothing()
        self.output_schema = schema.Struct(
            ("softmax", schema.Scalar(input_record.prediction.field_type(), self.get_next_blob_reference("softmax"))),
            ("loss", schema.Scalar(np.float32, self.get_next_blob_reference("loss"))))

    def _init_label_smoothing(self):
        matrix = np.array(self.label_smoothing_matrix).astype(np.float32)
        _require(matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1],
                 f"label_smoothing_matrix is square, got shape {matrix.shape}")
        self.label_smoothing_matrix = self.model.add_global_constant(
            f"{self.name}_label_smoothing_matrix", array=matrix, dtype=np.dtype(np.float32))
        self.label_dim = self.model.add_global_constant(f"{self.name}_label_dim", array=matrix.shape[0],
                                                        dtype=np.dtype(np.int64))
        self.label_prob = True

    def compute_smoothed_label(self, net):
        label = self.input_record.label()
        if self.input_record.label.field_type().base != np.int64:
            cast = net.NextScopedBlob("int64_label")
            net.Cast([label], [cast], to=core.DataType.INT64)
            label = cast
        one_hot = net.NextScopedBlob("one_hot_label")
        smoothed = net.NextScopedBlob("smoothed_label")
        net.OneHot([label, self.label_dim], [one_hot])
        net.MatMul([one_hot, self.label_smoothing_matrix], smoothed)
        return smoothed

    def add_ops(self, net):
        record = self.input_record
        label = record.label.field_blobs()
        if self.label_smoothing_matrix is not None:
            label = [self.compute_smoothed_label(net)]
        elif not self.label_prob and record.label.field_types()[0].base != np.int32:
            label = [net.Cast(label, net.NextScopedBlob("int32_label"), to=core.DataType.INT32)]
        inputs = record.prediction.field_blobs() + label
        if "weight" in record:
            weight = record.weight()
            if record.weight.field_type().base != np.float32:
                weight = net.Cast(weight, weight + "_float32", to=core.DataType.FLOAT)
            inputs += [weight]
        net.SoftmaxWithLoss(inputs, self.output_schema.field_blobs(), label_prob=self.label_prob, scale=self.scale,
                            average_by_batch_size=self.average_by_batch_size)


def _tiled_positives(net, record):
    """(negative scores, the positive score repeated once per negative of its example)."""
    neg = record.neg_prediction["values"]()
    pos = net.LengthsTile([record.pos_prediction(), record.neg_prediction["lengths"]()],
                          net.NextScopedBlob("pos_score_repeated"))
    return neg, pos


def _needs_ranking_fields(input_record, layer):
    _require(schema.is_schema_subset(schema.Struct(("pos_prediction", schema.Scalar()),
                                                   ("neg_prediction", schema.List(np.float32))), input_record),
             f"{layer} takes a Struct with pos_prediction (a Scalar) and neg_prediction (a List of float32)")


class BPRLoss(ModelLayer):
    """Bayesian personalized ranking: sum over (positive, negative) pairs of softplus(neg - pos)."""

    def __init__(self, model, input_record, name="bpr_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _needs_ranking_fields(input_record, "BPRLoss")
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        neg, pos = _tiled_positives(net, self.input_record)
        softplus = net.Softplus([net.Sub([neg, pos])])
        net.ReduceFrontSum(softplus, self.output_schema.field_blobs())


class MarginRankLoss(ModelLayer):
    """Hinge loss over (positive, negative) pairs: max(0, margin - (pos - neg)), summed (or averaged)."""

    def __init__(self, model, input_record, name="margin_rank_loss", margin=0.1, average_loss=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require(margin >= 0, f"a hinge loss's margin is >= 0, got {margin}")
        self._margin, self._average_loss = margin, average_loss
        _needs_ranking_fields(input_record, "MarginRankLoss")
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        neg, pos = _tiled_positives(net, self.input_record)
        ones = net.ConstantFill(neg, net.NextScopedBlob("const_1"), value=1, dtype=core.DataType.INT32)
        loss = net.MarginRankingCriterion([pos, neg, ones], net.NextScopedBlob("rank_loss"), margin=self._margin)
        reduce = net.AveragedLoss if self._average_loss else net.ReduceFrontSum
        reduce(loss, self.output_schema.field_blobs())


class BatchHuberLoss(ModelLayer):
    """Huber loss of prediction against label: 0.5 e^2 for |e| <= delta, delta (|e| - delta/2) beyond;
    weighted by ``weight`` when given, averaged."""

    def __init__(self, model, input_record, name="batch_huber_loss", delta=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require(delta > 0, f"Huber's delta is > 0, got {delta}")
        self._delta = delta
        _needs_fields(input_record, "BatchHuberLoss", "label", "prediction")
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        record = self.input_record
        prediction = net.Squeeze(record.prediction(), net.NextScopedBlob("squeezed_prediction"), dims=[1])
        label = record.label.field_blobs()
        if record.label.field_type().base != record.prediction.field_type().base:
            label = net.Cast(label, net.NextScopedBlob("cast_label"),
                             to=schema.data_type_for_dtype(record.prediction.field_type()))
        delta = net.ConstantFill(label, net.NextScopedBlob("delta"), value=self._delta, dtype=core.DataType.FLOAT)
        label = net.StopGradient(label, net.NextScopedBlob("stopped_label"))
        delta = net.StopGradient(delta, net.NextScopedBlob("stopped_delta"))
        error = net.L1Distance([label, prediction], net.NextScopedBlob("abs_error"))
        small = net.Min([error, delta], net.NextScopedBlob("min_error_delta"))
        quadratic = net.Scale(net.Sqr(small), scale=0.5)
        linear = net.Mul([net.Sub([error, small]), delta], net.NextScopedBlob("huber_linear_term"))
        dist = net.Add([quadratic, linear], net.NextScopedBlob("huber_dist"))
        if "weight" in record.fields:
            dist = net.Mul([dist, _float_weight(net, record)], net.NextScopedBlob("weighted_huber_distance"))
        net.AveragedLoss(dist, self.output_schema.field_blobs())


class LabelSmooth(ModelLayer):
    """Smoothed labels: a categorical label's row of ``smooth_matrix`` (n x n), or for a binary
    label (a 2-element matrix: [low, high]) low below 0.5 and high above."""

    def __init__(self, model, label, smooth_matrix, name="label_smooth", **kwargs):
        super().__init__(model, name, label, **kwargs)
        self.label = label
        matrix = np.array(smooth_matrix).astype(np.float32).flatten()
        self.binary_prob_label = matrix.size == 2
        if self.binary_prob_label:
            self.dim = 1
            self.smooth_matrix = matrix
        else:
            self.dim = int(round(np.sqrt(matrix.size)))
            _require(self.dim * self.dim == matrix.size, f"smooth_matrix is square, got {matrix.size} elements")
            self.smooth_matrix = self.model.add_global_constant(
                f"{self.name}_label_smooth_matrix", array=matrix.reshape((self.dim, self.dim)),
                dtype=np.dtype(np.float32))
            self.len = self.model.add_global_constant(f"{self.name}_label_dim", array=self.dim,
                                                      dtype=np.dtype(np.int64))
        self.output_schema = schema.Scalar((np.float32, (self.dim,)), self.get_next_blob_reference("smoothed_label"))

    def add_ops(self, net):
        label = self.label()
        if self.binary_prob_label:
            if self.label.field_type().base != np.float32:
                label = net.NextScopedBlob("float32_label")
                net.Cast([self.label()], [label], to=core.DataType.FLOAT)
            net.StumpFunc(label, self.output_schema(), threshold=0.5, low_value=self.smooth_matrix[0],
                          high_value=self.smooth_matrix[1])
            return
        if self.label.field_type().base != np.int64:
            label = net.NextScopedBlob("int64_label")
            net.Cast([self.label()], [label], to=core.DataType.INT64)
        one_hot = net.NextScopedBlob("one_hot_label")
        net.OneHot([label, self.len], [one_hot])
        net.MatMul([one_hot, self.smooth_matrix], self.output_schema())
