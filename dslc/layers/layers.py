"""Caffe2's ``layers.layers``: ``ModelLayer``, the base of every layer, its parameters
(``LayerParameter``), the layer registry, and the record shapes sparse layers take.

A layer is a meta-operator over records: made once in a ``LayerModelHelper`` (its input
record, output schema, parameters and tags fixed then), it records its operators later, once
per net it is instantiated into (``add_operators``), possibly different ones for training,
evaluation and prediction (``add_train_ops`` / ``add_eval_ops`` / ``add_ops``).

    class Scale2(ModelLayer):
        def __init__(self, model, input_record, name="scale2", **kwargs):
            super().__init__(model, name, input_record, **kwargs)
            self.output_schema = schema.Scalar(input_record.field_type(),
                                               self.get_next_blob_reference("output"))
        def add_ops(self, net):
            net.Scale(self.input_record.field_blobs(), self.output_schema.field_blobs(), scale=2.0)

The registry is filled by ``dslc.layers``' ``__init__`` (each ModelLayer subclass under its
class name); ``model.Scale2(record)`` makes and adds one.
"""
from __future__ import annotations

import logging
from collections import namedtuple

import numpy as np

from dslc import core, schema, scope, utils, workspace
from dslc.ir.diagnostics import DSLError
from dslc.layers.tags import TagContext
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


class LayerError(DSLError, ValueError, AssertionError):
    """A layer given an input it cannot take. Also an AssertionError: Caffe2 asserts these
    conditions, and code written for it catches that."""


IdList = schema.List(np.int64)
IdScoreList = schema.Map(np.int64, np.float32)
IdListWithEvicted = schema.ListWithEvicted(np.int64)
IdScoreListWithEvicted = schema.MapWithEvicted(np.int64, np.float32)


def almost_equal_schemas(record, original_schema, check_field_names=True, check_field_types=True,
                         check_field_metas=False) -> bool:
    """``schema.equal_schemas``, where an id (score) list also matches its with-evicted form."""
    def same(other):
        return schema.equal_schemas(record, other, check_field_names=check_field_names,
                                    check_field_types=check_field_types, check_field_metas=check_field_metas)
    if original_schema == IdList:
        return same(IdList) or same(IdListWithEvicted)
    if original_schema == IdScoreList:
        return same(IdScoreList) or same(IdScoreListWithEvicted)
    return schema.equal_schemas(record, original_schema)


def get_key(record):
    """The ids of an id list (``values``) or an id-score list (``values:keys``)."""
    if almost_equal_schemas(record, IdList):
        key = "values"
    elif almost_equal_schemas(record, IdScoreList, check_field_types=False):
        key = "values:keys"
    else:
        raise NotImplementedError(f"no sparse key in a record of fields {record.field_names()}")
    if record[key].metadata is None:
        raise LayerError(f"blob {record[key]()} has no metadata", user_location(),
                         "give the ids a schema.Metadata (categorical_limit)")
    return record[key]


def get_categorical_limit(record):
    return get_key(record).metadata.categorical_limit


def get_avg_length(record):
    return record["lengths"].metadata.expected_value


def set_request_only(field) -> None:
    """Mark each scalar of ``field`` as a feature the request alone carries (metadata kept)."""
    for f in field.all_scalars():
        meta = f.metadata
        specs = meta.feature_specs if meta else None
        limit = meta.categorical_limit if meta else None
        expected = meta.expected_value if meta else None
        specs = specs._replace(feature_is_request_only=True) if specs else \
            schema.FeatureSpec(feature_is_request_only=True)
        if limit is not None and not np.issubdtype(f.field_type(), np.integer):
            raise LayerError(f"categorical_limit set on the non-integer field {f}", user_location())
        f.set_metadata(schema.Metadata(categorical_limit=limit, expected_value=expected, feature_specs=specs))


class InstantiationContext:
    """Where a layer is being instantiated (which of its ops ``add_operators`` records)."""
    ACCUMULATE_PRED = "accumulate_pred"
    EVAL = "eval"
    PREDICTION = "prediction"
    TRAINING = "training"


_LAYER_REGISTRY: dict = {}


def register_layer(name, layer) -> None:
    if name in _LAYER_REGISTRY:
        raise LayerError(f"a layer named {name!r} is already registered", user_location())
    _LAYER_REGISTRY[name] = layer


def layer_exists(name) -> bool:
    return name in _LAYER_REGISTRY


def get_layer_class(name):
    return _LAYER_REGISTRY[name]


def create_layer(layer_name, *args, **kwargs):
    return _LAYER_REGISTRY[layer_name](*args, **kwargs)


LayerPsParam = namedtuple("LayerPsParam", ["sparse_key", "average_length"])


class LayerParameter:
    """A layer's parameter: its blob, the operator that fills it (an OperatorDef), its
    optimizer, regularizer and parameter-server hints; ``shape`` read off the initializer."""

    def __init__(self, parameter=None, optimizer=None, initializer=None, ps_param=None, regularizer=None):
        if not isinstance(parameter, core.BlobReference):
            raise LayerError(f"a layer parameter is a BlobReference, got {parameter!r}", user_location())
        self._shape = None
        self._initializer = None
        self.parameter = parameter
        self.optimizer = optimizer
        self.initializer = initializer
        self.ps_param = ps_param
        self.regularizer = regularizer

    @property
    def initializer(self):
        return self._initializer

    @initializer.setter
    def initializer(self, op):
        if op is not None and not core.IsOperator(getattr(op, "type", None)):
            raise LayerError(f"a parameter's initializer is an operator, got {type(op).__name__}", user_location())
        self._initializer = op
        if op is not None:
            self.shape = self._shape_of_initializer()

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, shape):
        if self._shape is not None and self._shape != shape:
            raise LayerError(f"parameter {self} has shape {self._shape}, now given {shape}", user_location())
        self._shape = shape

    def _shape_of_initializer(self):
        """The ``shape`` argument, else the shape the initializer makes when run alone."""
        for arg in self._initializer.arg:
            if arg.name == "shape":
                return list(arg.ints)
        previous = workspace.CurrentWorkspace()
        workspace.SwitchWorkspace("model_init_by_loading_params", True)  # (the user's blobs stay as they are)
        try:
            net = core.Net("shape_checker")
            net.Proto().op.extend([self._initializer])
            shape_blob = net.NextScopedBlob(self.parameter + "_shape")
            net.Shape([self.parameter], shape_blob)
            workspace.RunNetOnce(net)
            return workspace.FetchBlob(shape_blob).tolist()
        except (RuntimeError, DSLError) as exc:
            logger.warning("cannot infer the shape of %s from %s: %s", self.parameter, self._initializer.type, exc)
            return None
        finally:
            workspace.ResetWorkspace()
            workspace.SwitchWorkspace(previous)

    def __str__(self):
        return str(self.parameter)


def is_request_only_scalar(scalar) -> bool:
    metas = scalar.field_metadata()
    return bool(metas) and all(m and m.feature_specs and getattr(m.feature_specs, "feature_is_request_only", False)
                               for m in metas)


AccessedFeatures = namedtuple("AccessedFeatures", ["type", "ids"])


class ModelLayer:
    """The base of every layer (see the module docstring).

    ``prefix`` names the layer (made unique in the model: ``fc``, ``fc_auto_0`` ...); its
    parameters and blobs live under that name scope. ``predict_input_record_fields``: the
    subset of the input the prediction net needs. ``tags``: added to the enclosing
    ``Tags`` blocks' tags."""

    def __init__(self, model, prefix, input_record, predict_input_record_fields=None, tags=None, **kwargs):
        self.name = model.next_layer_name(prefix)
        self.model = model
        self.kwargs = kwargs
        self._input_record = input_record
        if predict_input_record_fields:
            fields = predict_input_record_fields
            self._predict_input_record = input_record[fields if isinstance(fields, list) else [fields]]
        else:
            self._predict_input_record = None
        scalars = input_record.all_scalars()
        self.request_only = bool(scalars) and all(is_request_only_scalar(s) for s in scalars)
        self.precomputation_request_only = False
        self.precomputation_object_only = False
        self._output_schema = None
        self._predict_output_schema = None
        self.eval_output_schema = None
        self.tags = set(tags or [])
        self.tags.update(TagContext.current().tags)
        self.params = []
        self._export_output_for_metrics = False
        self._export_params_for_metrics = False

    def get_type(self):
        return type(self).__name__

    def _check_output_schema(self):
        if self._output_schema is None:
            raise LayerError(f"layer {self.name} has no output schema yet", user_location())
        if self._predict_output_schema is not None and \
                not schema.is_schema_subset(self._predict_output_schema, self._output_schema):
            raise LayerError(f"layer {self.name}: the predict output schema is not part of the output schema",
                             user_location())

    @property
    def predict_input_record(self):
        return self._predict_input_record or self._input_record

    @property
    def input_record(self):
        return self._input_record

    @property
    def predict_output_schema(self):
        self._check_output_schema()
        return self._predict_output_schema or self._output_schema

    @predict_output_schema.setter
    def predict_output_schema(self, output_schema):
        assert self._predict_output_schema is None, "the predict output schema is set once"
        self._predict_output_schema = output_schema

    @property
    def output_schema(self):
        if self.request_only:
            set_request_only(self._output_schema)
        self._check_output_schema()
        return self._output_schema

    @output_schema.setter
    def output_schema(self, output_schema):
        assert self._output_schema is None, "the output schema is set once"
        self._output_schema = output_schema

    def get_parameters(self):
        return self.params

    def get_fp16_compatible_parameters(self):
        """The parameters that may be stored as fp16 (none unless a layer says so)."""
        return []

    def get_memory_usage(self):
        return 0

    def get_accessed_features(self):
        """{field: [AccessedFeatures]} for the features this layer reads (none by default)."""
        return {}

    def add_init_params(self, init_net):
        """Record each parameter's initializer into ``init_net`` once (an equal op already
        there, say from a layer sharing the parameter, is not repeated)."""
        device = scope.CurrentDeviceScope()
        ops = init_net.Proto().op
        for param in self.params:
            init_op = param.initializer
            if not init_op:
                continue
            if not init_op.HasField("device_option") and device:
                init_op = caffe2_pb2.OperatorDef.FromString(init_op.SerializeToString())
                init_op.device_option.CopyFrom(device)
            if not any(utils.OpAlmostEqual(op, init_op, "debug_info") for op in ops):
                ops.extend([init_op])

    def create_param(self, param_name, shape, initializer, optimizer, ps_param=None, regularizer=None):
        """A new parameter of this layer, named under the layer's scope (or as parameter
        sharing maps it); returns its blob."""
        with scope.NameScope(self.name, reset=True):
            param = self.model.create_param(param_name=param_name, shape=shape, initializer=initializer,
                                            optimizer=optimizer, ps_param=ps_param, regularizer=regularizer)
        if any(param.parameter == p.parameter for p in self.params):
            raise LayerError(f"layer {self.name} has parameter {param.parameter} twice", user_location())
        self.params.append(param)
        return param.parameter

    def get_next_blob_reference(self, name):
        """A fresh blob named ``<layer name>/<name>`` (with a suffix when taken)."""
        with scope.NameScope(self.name, reset=True):
            return self.model.net.NextScopedBlob(name)

    def add_operators(self, net, init_net=None, context=InstantiationContext.TRAINING):
        """Record this layer's ops for ``context`` into ``net`` (and its parameters'
        initializers into ``init_net``, which training needs)."""
        with scope.NameScope(self.name):
            if context == InstantiationContext.TRAINING and not init_net:
                raise LayerError(f"layer {self.name}: training needs an init net", user_location())
            if init_net:
                self.add_init_params(init_net)
            if context == InstantiationContext.TRAINING:
                self.add_train_ops(net)
            elif context == InstantiationContext.EVAL:
                self.add_eval_ops(net)
            elif context == InstantiationContext.ACCUMULATE_PRED:
                self.add_ops_to_accumulate_pred(net)
            else:
                self.add_ops(net)
            if context in (InstantiationContext.TRAINING, InstantiationContext.EVAL) and \
                    self._export_params_for_metrics:
                self.add_param_copy_operators(net)

    def add_ops(self, net):
        """The prediction ops (each layer defines them)."""
        raise NotImplementedError(f"{type(self).__name__} defines no add_ops")

    def add_eval_ops(self, net):
        self.add_ops(net)

    def add_train_ops(self, net):
        self.add_eval_ops(net)

    def add_ops_to_accumulate_pred(self, net):
        self.add_eval_ops(net)

    def add_param_copy_operators(self, net):
        for param in self.params:
            copy = self.model.metrics_schema[str(param.parameter)]
            net.Copy([param.parameter], copy.field_blobs())

    def export_output_for_metrics(self):
        self._export_output_for_metrics = True
        self.model.add_metric_field(self.name + "/output", self.output_schema)

    def export_params_for_metrics(self):
        self._export_params_for_metrics = True
        for param in self.params:
            copy = self.get_next_blob_reference(str(param).split("/")[-1] + "_copy")
            self.model.add_metric_field(str(param.parameter), copy)
