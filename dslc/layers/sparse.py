"""Embedding lookups of sparse features: ``SparseLookup`` (an id list or id-score list pooled
into one vector per example: Sum, Mean, Sqrt, WeightedSum, PositionWeighted, Max ... or the
rows themselves with reducer 'None') and ``PositionWeighted`` (a learned weight per position
in the list, to pool with).

The table ``w`` has one row per id (the ids' ``categorical_limit``); training reads it with
sparse gradients (a GradientSlice the optimizers update row by row)."""
from __future__ import annotations

import functools
import logging
import math
import operator

import numpy as np

from dslc import schema
from dslc.layers.layers import (IdList, IdListWithEvicted, IdScoreList, IdScoreListWithEvicted, LayerError,
                                LayerPsParam, ModelLayer, almost_equal_schemas, get_categorical_limit, get_key)
from dslc.layers.tags import Tags
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)

FP16_ENGINES = ("SIMD_Q_FP16", "SIMD_Q_STOC_FP16", "SIMD_Q_STOC_MKL_FP16")


def _require(ok, message):
    if not ok:
        raise LayerError(message, user_location(3))


def get_trainer_version_based_on_optim(optim_def):
    """'fp16' for an optimizer whose engine keeps an fp16 table, else 'fp32'."""
    engine = getattr(optim_def, "engine", None)
    return "fp16" if engine in FP16_ENGINES else "fp32"


def _is_id_list(record):
    return almost_equal_schemas(record, IdList)


def _is_id_score_list(record):
    return almost_equal_schemas(record, IdScoreList, check_field_types=False)


class SparseLookup(ModelLayer):
    _id_list_supported_reducers = ["LogMeanExp", "LogSumExp", "Max", "Mean", "Sum", "WeightedSum", "WeightedMean",
                                   "Sqrt", "None"]
    _id_score_list_supported_reducers = ["PositionWeighted", "RecencyWeighted", "Mean", "Sum", "WeightedSum",
                                         "WeightedMean", "None"]
    _fp16_compatible_init_op_types = ["Float16UniformFill"]
    _fp16_compatible_reducers = ["Sum", "Mean", "Sqrt", "PositionWeighted", "RecencyWeighted"]

    def __init__(self, model, input_record, inner_shape, reducer, weight_init=None, weight_optim=None,
                 name="sparse_lookup", regularizer=None, use_external_weights=False,
                 uniform_weight_init_scale_numerator=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.sparse_key = get_key(self.input_record)()
        inner_shape = [inner_shape] if isinstance(inner_shape, int) else inner_shape
        _require(isinstance(inner_shape, (list, tuple)),
                 f"inner_shape is an int, list or tuple; got {type(inner_shape).__name__} for {self.sparse_key}")
        inner_shape = list(inner_shape)
        id_score = _is_id_score_list(self.input_record)
        if reducer in ("PositionWeighted", "RecencyWeighted") or use_external_weights:
            _require(id_score, f"{reducer if not use_external_weights else 'use_external_weights'} takes an "
                     f"IdScoreList (use the PositionWeighted layer to make one from an IdList); "
                     f"{self.sparse_key} is not one")
            if use_external_weights:
                _require(reducer in ("Sum", "WeightedSum"), "use_external_weights takes the Sum reducer")
            self.external_weights = self.input_record.values()
        _require(reducer in (self._id_score_list_supported_reducers if id_score
                             else self._id_list_supported_reducers),
                 f"unsupported reducer {reducer!r} for {'ID_SCORE_LIST' if id_score else 'ID_LIST'} "
                 f"{self.sparse_key}")
        self.reducer = reducer
        self.use_external_weights = use_external_weights
        self.input_dim = get_categorical_limit(self.input_record)
        _require(self.input_dim and self.input_dim > 0,
                 f"{self.sparse_key} needs a categorical_limit > 0, got {self.input_dim}")
        self.shape = [self.input_dim] + inner_shape
        self.trainer_version = get_trainer_version_based_on_optim(weight_optim)
        self.uniform_weight_init_scale_numerator = uniform_weight_init_scale_numerator
        scale = math.sqrt(uniform_weight_init_scale_numerator / self.input_dim)
        fill = "Float16UniformFill" if self.trainer_version == "fp16" else "UniformFill"
        self.weight_init = weight_init or (fill, {"min": -scale, "max": scale})
        self.evicted_values = None
        if schema.equal_schemas(self.input_record, IdListWithEvicted) or \
                schema.equal_schemas(self.input_record, IdScoreListWithEvicted, check_field_types=False):
            self.evicted_values = self.input_record._evicted_values
        if self.trainer_version == "fp16":
            _require(self.reducer in self._fp16_compatible_reducers or use_external_weights,
                     f"fp16 training takes the reducers {self._fp16_compatible_reducers}, got {self.reducer}")
            if self.weight_init[0] == "UniformFill":
                self.weight_init = ("Float16UniformFill", self.weight_init[1])
            _require(self.weight_init[0] in self._fp16_compatible_init_op_types,
                     f"fp16 training needs an fp16 initializer, got {self.weight_init[0]}")
            _require(regularizer is None, "a regularizer does not take an fp16 table")
        meta = self.input_record.lengths.metadata
        avg_length = meta.expected_value if meta else None
        self.w = self.create_param(param_name="w", shape=self.shape, initializer=self.weight_init,
                                   optimizer=weight_optim,
                                   ps_param=LayerPsParam(sparse_key=self.sparse_key, average_length=avg_length),
                                   regularizer=regularizer)
        if self.evicted_values:
            self.reinit_vec = self.create_param(param_name="reinit_vec", shape=inner_shape,
                                                initializer=self.weight_init, optimizer=model.NoOptim)
        self.scale_bias = self.create_param(param_name="scale_bias", shape=[], initializer=("ConstantFill",
                                                                                            {"value": 0.0}),
                                            optimizer=model.NoOptim)
        self.output_schema = schema.Scalar((np.float32, inner_shape), self.get_next_blob_reference("output"))

    def get_memory_usage(self):
        return functools.reduce(operator.mul, self.shape) * 4

    def get_fp16_compatible_parameters(self):
        return [self.w]

    def support_8bit(self):
        return len(self.shape) == 2 and self.shape[1] >= 8

    def _out(self):
        return self.output_schema.field_blobs()

    def _rows(self, net, version, ids, out):
        if version == "fp16":
            return net.HalfToFloat(net.Gather([self.w, ids], "gathered_w"), out)
        return net.Gather([self.w, ids], out)

    def _weighted(self, net, ids, weights, reducer, grad_on_weights=0):
        getattr(net, "SparseLengths" + reducer)([self.w, weights, ids, self.input_record.lengths()], self._out(),
                                                grad_on_weights=grad_on_weights)

    def _add_ops_id_list(self, net, version):
        items, lengths = self.input_record.items(), self.input_record.lengths()
        reducer = {"WeightedSum": "Sum", "WeightedMean": "Mean"}.get(self.reducer, self.reducer)
        if reducer in ("Sum", "Mean"):
            getattr(net, "SparseLengths" + reducer)([self.w, items, lengths], self._out())
        elif reducer == "Sqrt":
            weights = net.LengthsToWeights([lengths], [net.NextScopedBlob("lengths_sqrt")], power=0.5)
            self._weighted(net, items, weights, "WeightedSum")
        elif reducer == "None":
            self._rows(net, version, items, self._out())
        else:
            rows = self._rows(net, version, items, "table_rows")
            segments = net.LengthsToSegmentIds(lengths, net.NextScopedBlob(lengths + "_sid"))
            getattr(net, "SortedSegmentRange" + reducer)([rows, segments], self._out())

    def _add_ops_id_score_list(self, net, version):
        keys, lengths = self.input_record.keys(), self.input_record.lengths()
        if self.reducer in ("WeightedSum", "WeightedMean") and not self.use_external_weights:
            self._weighted(net, keys, self.input_record.values(), self.reducer)
        elif self.reducer in ("PositionWeighted", "RecencyWeighted") or self.use_external_weights:
            self._weighted(net, keys, self.external_weights, "WeightedSum", grad_on_weights=1)
        elif self.reducer in ("Sum", "Mean"):
            getattr(net, "SparseLengths" + self.reducer)([self.w, keys, lengths], self._out())
        else:  # None
            self._rows(net, version, keys, self._out())

    def _add_ops(self, net, version="fp32", is_train=True):
        if version not in ("fp32", "fp16"):
            raise LayerError(f"SparseLookup version {version!r} is not supported by dslc (fp32 and fp16 are)",
                             user_location())
        if self.evicted_values and is_train:
            net.CopyRowsToTensor([self.w, self.evicted_values.get(), self.reinit_vec], [self.w])
        if _is_id_list(self.input_record):
            self._add_ops_id_list(net, version)
        else:
            self._add_ops_id_score_list(net, version)

    def add_train_ops(self, net):
        self._add_ops(net, self.trainer_version, is_train=True)

    def add_ops(self, net):
        # (an fp16 table is read as fp16 and widened, training's way; Caffe2's quantized predictor
        # versions are not there: the predict net reads the table as trained)
        self._add_ops(net, self.trainer_version, is_train=False)


class PositionWeighted(ModelLayer):
    """A learned weight per position in an id list (initially 1): the weights of a
    PositionWeighted SparseLookup."""

    def __init__(self, model, input_record, weight_optim=None, name="position_weights"):
        super().__init__(model, name, input_record)
        _require(isinstance(input_record, schema.List), f"PositionWeighted takes a List, got {input_record}")
        meta = input_record.lengths.metadata
        max_length = meta.categorical_limit if meta is not None else None
        if max_length is not None:
            self.shape = max_length
        else:
            self.shape = get_categorical_limit(input_record)
            logger.warning("%s: no categorical_limit on the lengths, using the keys' (%s)",
                           input_record.lengths(), self.shape)
        self.pos_w = self.create_param(param_name="pos_w", shape=[self.shape],
                                       initializer=("ConstantFill", {"value": 1.0}), optimizer=weight_optim)
        self.output_schema = schema.Struct(
            ("position_weights", schema.Scalar((np.float32, self.shape), self.get_next_blob_reference("pos_w_gather"))))
        self.tags.update({Tags.HANDLE_AS_SPARSE_LAYER})

    def get_memory_usage(self):
        return self.shape

    def add_ops(self, net):
        positions = net.LengthsRangeFill([self.input_record.lengths()], self.input_record.lengths() + "_pos_w_seq")
        net.Gather([self.pos_w, positions], self.output_schema.position_weights.field_blobs())


class _SparseDropout(ModelLayer):
    """An id list with ids (or whole lists) replaced by ``replacement_value`` with a probability
    set per instantiation: train, eval, predict."""
    _op = None

    def __init__(self, model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                 replacement_value, name, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require(schema.equal_schemas(input_record, IdList), f"{type(self).__name__} takes an IdList")
        self.dropout_prob_train = float(dropout_prob_train)
        self.dropout_prob_eval = float(dropout_prob_eval)
        self.dropout_prob_predict = float(dropout_prob_predict)
        self.replacement_value = int(replacement_value)
        probs = (self.dropout_prob_train, self.dropout_prob_eval, self.dropout_prob_predict)
        _require(all(0 <= p <= 1.0 for p in probs), f"dropout probabilities are in [0, 1], got {probs}")
        _require(any(p > 0 for p in probs), "Ratios all set to 0.0 for train, eval and predict")
        self.output_schema = schema.NewRecord(model.net, IdList)
        if input_record.lengths.metadata:
            self.output_schema.lengths.set_metadata(input_record.lengths.metadata)
        if input_record.items.metadata:
            self.output_schema.items.set_metadata(input_record.items.metadata)

    def _add_ops(self, net, ratio):
        getattr(net, self._op)([self.input_record.items(), self.input_record.lengths()],
                               [self.output_schema.items(), self.output_schema.lengths()], ratio=ratio,
                               replacement_value=self.replacement_value)

    def add_train_ops(self, net):
        self._add_ops(net, self.dropout_prob_train)

    def add_eval_ops(self, net):
        self._add_ops(net, self.dropout_prob_eval)

    def add_ops(self, net):
        self._add_ops(net, self.dropout_prob_predict)


class SparseDropoutWithReplacement(_SparseDropout):
    """Each example's whole list replaced by [replacement_value] with the probability."""
    _op = "SparseDropoutWithReplacement"

    def __init__(self, model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                 replacement_value, name="sparse_dropout", **kwargs):
        super().__init__(model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                         replacement_value, name, **kwargs)


class SparseItemwiseDropoutWithReplacement(_SparseDropout):
    """Each id replaced by replacement_value with the probability."""
    _op = "SparseItemwiseDropoutWithReplacement"

    def __init__(self, model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                 replacement_value, name="sparse_itemwise_dropout", **kwargs):
        super().__init__(model, input_record, dropout_prob_train, dropout_prob_eval, dropout_prob_predict,
                         replacement_value, name, **kwargs)
