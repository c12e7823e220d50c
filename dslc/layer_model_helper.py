"""Caffe2's ``layer_model_helper``: ``LayerModelHelper``, a model built of layers.

A layer (dslc/layers/) owns its parameters and records its ops into any net it is
instantiated in, so one model gives its training, evaluation and prediction nets
(``layer_model_instantiator``). The model holds the records flowing between layers:
``input_feature_schema`` (the features), ``trainer_extra_schema`` (labels, weights: what
training alone reads), ``output_schema``, ``loss`` and ``metrics_schema``.

    model = LayerModelHelper("m", schema.Struct(("x", schema.Scalar((np.float32, (8,))))),
                             schema.Struct(("label", schema.Scalar((np.float32, (1,))))))
    logit = model.FC(model.input_feature_schema.x, 1)
    model.output_schema = logit
    model.add_loss(model.BatchLRLoss(schema.Struct(("label", model.trainer_extra_schema.label),
                                                   ("logit", logit))))
    model.default_optimizer = optimizer.SgdOptimizer(0.1)
    init_net, train_net = layer_model_instantiator.generate_training_nets(model)

``model.<LayerName>(...)`` makes a registered layer and adds it; ``model.<Operator>(...)`` (any
operator: ``model.Relu(record, 1)``) makes a ``Functional`` layer running that operator.
"""
from __future__ import annotations

import copy
import logging

import numpy as np

from dslc import core, model_helper, schema, utils
from dslc.ir.diagnostics import DSLError
from dslc.layers import layers
from dslc.modeling.net_modifier import NetModifier
from dslc.modeling.parameter_info import ParameterInfo
from dslc.modeling.parameter_sharing import parameter_sharing_context
from dslc.optimizer import Optimizer, get_param_device
from dslc.proto import caffe2_pb2
from dslc.regularizer import RegularizationBy, Regularizer
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


class LayerModelError(DSLError, ValueError, AssertionError):
    """A layer model used against its contract (a record set twice, inconsistent sharing)."""


def _given_tensor_fill(array):
    """The fill operator Caffe2 picks for a constant of ``array``'s dtype."""
    kind = array.dtype
    if kind == np.int32:
        return "GivenTensorIntFill"
    if kind == np.int64:
        return "GivenTensorInt64Fill"
    if kind.kind in "USO":
        return "GivenTensorStringFill"
    if kind == np.bool_:
        return "GivenTensorBoolFill"
    return "GivenTensorFill"


def _optimizer_attributes(optim) -> dict:
    """What makes two optimizers the same one for a shared parameter: their settings, not
    their instance number."""
    return {k: v for k, v in vars(optim).items() if k not in ("index", "_aux_params")}


def _set_once(attr: str, what: str):
    """A property read only once set, and set only once (Caffe2 asserts both)."""
    def get(self):
        value = getattr(self, attr)
        if value is None:
            raise AssertionError(f"{what} is not set")
        return value

    def put(self, value):
        if getattr(self, attr) is not None:
            raise AssertionError(f"{what} is set once")
        setattr(self, attr, value)
    return property(get, put)


class LayerModelHelper(model_helper.ModelHelper):
    """A model of layers (see the module docstring). ``keep_blobs``: use the schemas' own
    blobs rather than fresh ones."""

    def __init__(self, name, input_feature_schema, trainer_extra_schema, keep_blobs=False, use_attribution=True):
        super().__init__(name=name)
        self._layer_names = set()
        self._layers = []
        self._param_to_shape = {}
        self._seed = None
        self._sequence_seed = True
        self.param_to_optim = {}
        self.param_to_reg = {}
        self._default_optimizer = None
        self._loss = None
        self._prediction = []
        self._output_schema = None
        self._post_grad_net_modifiers = []
        self._final_net_modifiers = []
        self._breakdown_map = None
        if keep_blobs:
            self._input_feature_schema = input_feature_schema.clone()
            self._trainer_extra_schema = trainer_extra_schema.clone()
        else:
            self._input_feature_schema = schema.NewRecord(self.net, input_feature_schema)
            self._trainer_extra_schema = schema.NewRecord(self.net, trainer_extra_schema)
        self._metrics_schema = schema.Struct()
        self._preproc_output_schema = None
        self._init_global_constants()
        self.param_init_net = self.create_init_net("param_init_net")
        self._initialize_params = True
        self._transfer_learning_blob_name_mappings = None
        self.ad_hoc_diagnose_blobs_and_operations = []
        self.ad_hoc_plot_blobs = []
        self.use_attribution = use_attribution

    # --- records
    def clear_output_schema(self):
        self._output_schema = None

    def set_initialize_params(self, initialize_params):
        self._initialize_params = initialize_params

    def add_metric_field(self, name, value):
        if name in self._metrics_schema.fields:
            raise AssertionError(f"metric field {name!r} added twice")
        self._metrics_schema = self._metrics_schema + schema.Struct((name, value))

    def filter_metrics_schema(self, white_set):
        """Keep only the metric fields named in ``white_set``."""
        for name in self._metrics_schema.field_names():
            if name not in white_set:
                self._metrics_schema = self._metrics_schema - schema.Struct((name, schema.Scalar()))

    def add_ad_hoc_plot_blob(self, blob, dtype=None):
        if not isinstance(blob, (str, core.BlobReference)):
            raise LayerModelError(f"a plot blob is a str or BlobReference, got {type(blob).__name__}",
                                  user_location())
        self.add_metric_field(str(blob), schema.Scalar(dtype or (np.float64, (1,)), blob))
        self.ad_hoc_plot_blobs.append(blob)

    # --- global constants: blobs every init net the model makes fills first
    @staticmethod
    def _get_global_constant_initializer_op(blob_name, array=None, dtype=None, initializer=None):
        if array is not None:
            if initializer is not None:
                raise LayerModelError("a global constant takes an array or an initializer, not both",
                                      user_location(3))
            values = np.array(array) if dtype is None else np.array(array, dtype=dtype)
            return core.CreateOperator(_given_tensor_fill(values), [], blob_name, shape=values.shape,
                                       values=values.flatten().tolist())
        if initializer is None:
            raise LayerModelError("a global constant needs an array or an initializer", user_location(3))
        return initializer(blob_name)

    def add_global_constant(self, name, array=None, dtype=None, initializer=None):
        if not isinstance(name, str):
            raise LayerModelError(f"a global constant's name is a str, got {type(name).__name__}", user_location())
        if name in self.global_constants:
            raise AssertionError(f"{name} already added in global_constants")
        blob_name = self.net.NextBlob(name)
        self.global_constants[name] = blob_name
        self.global_constant_initializers[blob_name] = \
            self._get_global_constant_initializer_op(blob_name, array, dtype, initializer)
        return blob_name

    def maybe_add_global_constant(self, name, *args, **kwargs):
        """The global constant ``name``, added unless it exists (then with the same initializer)."""
        if name not in self.global_constants:
            return self.add_global_constant(name, *args, **kwargs)
        blob_name = self.global_constants[name]
        op = self._get_global_constant_initializer_op(blob_name, *args, **kwargs)
        if not utils.OpAlmostEqual(op, self.global_constant_initializers[blob_name], "debug_info"):
            raise AssertionError(f"conflicting initializers for global constant {blob_name}")
        return blob_name

    def _init_global_constants(self):
        self.global_constants = {}
        self.global_constant_initializers = {}
        self.add_global_constant("ONE", 1.0)
        self.add_global_constant("NAN", float("NaN"))
        self.add_global_constant("ZERO", 0.0)
        self.add_global_constant("ZERO_RANGE", [0, 0], dtype="int32")

    def _add_global_constants(self, init_net):
        init_net.Proto().op.extend(list(self.global_constant_initializers.values()))

    def create_init_net(self, name):
        """A new init net holding the global constants' fills."""
        init_net = core.Net(name)
        self._add_global_constants(init_net)
        return init_net

    # --- parameters
    def _validate_param_shape(self, param_name, shape):
        ref_shape = self._param_to_shape.get(param_name)
        if param_name in self._param_to_shape and shape != ref_shape:
            raise ValueError(f"Got inconsistent shapes between shared parameters: {param_name} has {ref_shape}, now asked for {shape} "
                             f"(in scope {core.CurrentNameScope()!r})")

    def _validate_param_optim(self, param_name, optim):
        """A shared parameter is updated by one optimizer: every layer sharing it names the
        same one (None: the default optimizer)."""
        if param_name not in self.param_to_optim:
            return
        ref = self.param_to_optim[param_name]
        if optim is None:
            ok = ref == self._default_optimizer
        elif optim == self.NoOptim:
            ok = ref == self.NoOptim
        elif isinstance(optim, Optimizer):
            ok = isinstance(ref, Optimizer) and type(optim) is type(ref) and \
                _optimizer_attributes(optim) == _optimizer_attributes(ref)
        else:
            raise ValueError(f"optim is None, NoOptim or an Optimizer; got {optim!r}")
        if not ok:
            raise AssertionError(f"parameter {param_name} is shared with one updated by {ref!r}; "
                                 f"this layer asks for {optim!r}: give every sharer the same optimizer")

    def create_param(self, param_name, shape, initializer, optimizer=None, ps_param=None, regularizer=None):
        """A ``layers.LayerParameter`` named ``param_name`` (under the current scope, or the
        one parameter sharing maps it to), filled by ``initializer`` = (op type[, args])."""
        if isinstance(param_name, core.BlobReference):
            param_name = str(param_name)
        elif isinstance(param_name, str):
            param_name = parameter_sharing_context.get_parameter_name(param_name)
        else:
            raise ValueError(f"a parameter name is a str or BlobReference, got {type(param_name).__name__}")
        param_blob = core.BlobReference(param_name)
        if len(initializer) == 1:
            init_args = {}
        elif len(initializer) == 2:
            init_args = copy.deepcopy(initializer[1])
        else:
            raise LayerModelError(f"an initializer is (op type,) or (op type, args), got {initializer!r}",
                                  user_location())
        if shape is not None:
            if "shape" in init_args:
                raise LayerModelError(f"parameter {param_name}: the shape is given twice", user_location())
            init_args["shape"] = shape
        init_op = core.CreateOperator(initializer[0], [], param_blob, **init_args) \
            if self._initialize_params else None
        param = layers.LayerParameter(parameter=param_blob, initializer=init_op, optimizer=optimizer,
                                      ps_param=ps_param, regularizer=regularizer)
        self._validate_param_shape(param_name, shape)
        self._validate_param_optim(param_name, optimizer)
        self._param_to_shape[param_name] = shape
        return param

    def next_layer_name(self, prefix):
        """``prefix`` under the current name scope, made unique among the model's layers."""
        base = core.ScopedName(prefix)
        name, index = base, 0
        while name in self._layer_names:
            name = f"{base}_auto_{index}"
            index += 1
        self._layer_names.add(name)
        return name

    def add_layer(self, layer):
        """Add ``layer``: its parameters join the model's, its ops go into ``net`` and
        ``param_init_net``; returns its output record."""
        self._layers.append(layer)
        for param in layer.get_parameters():
            self.param_to_optim[str(param.parameter)] = param.optimizer or self.default_optimizer
            self.params.append(param.parameter)
            if isinstance(param, layers.LayerParameter):
                self.param_to_reg[param.parameter] = param.regularizer
            elif not isinstance(param, ParameterInfo):
                raise ValueError(f"a layer parameter is a LayerParameter or ParameterInfo, got {param!r}")
        layer.add_operators(self.net, self.param_init_net)
        return layer.output_schema

    def get_parameter_blobs(self):
        return [p.parameter for layer in self._layers for p in layer.get_parameters()]

    def add_post_grad_net_modifiers(self, modifier):
        self._add_modifier(self._post_grad_net_modifiers, modifier)

    def add_final_net_modifiers(self, modifier):
        self._add_modifier(self._final_net_modifiers, modifier)

    @staticmethod
    def _add_modifier(modifiers, modifier):
        if modifier in modifiers:
            raise AssertionError(f"{modifier} is already in {modifiers}")
        if not isinstance(modifier, NetModifier):
            raise AssertionError(f"{modifier} has to be a NetModifier instance")
        modifiers.append(modifier)

    @property
    def seed(self):
        return self._seed

    @property
    def sequence_seed(self):
        return self._sequence_seed

    def store_seed(self, seed, sequence_seed=True):
        self._seed = seed
        self._sequence_seed = sequence_seed

    def apply_seed(self, net):
        if self._seed:
            net.set_rand_seed(self._seed, self._sequence_seed)

    @property
    def default_optimizer(self):
        return self._default_optimizer

    @default_optimizer.setter
    def default_optimizer(self, optimizer):
        self._default_optimizer = optimizer

    @property
    def input_feature_schema(self):
        return self._input_feature_schema

    @property
    def trainer_extra_schema(self):
        return self._trainer_extra_schema

    @property
    def metrics_schema(self):
        """The outputs reported as metrics (appended to the output in train and eval nets)."""
        return self._metrics_schema

    output_schema = _set_once("_output_schema", "the model's output_schema")
    preproc_output_schema = _set_once("_preproc_output_schema", "preproc_output_schema")

    @property
    def prediction(self):
        if not self._prediction:
            raise AssertionError("model prediction is empty")
        return self._prediction

    def add_prediction(self, prediction, weight=1.0):
        if prediction is None:
            raise AssertionError("added prediction should not be None")
        self._prediction.append((prediction, weight))

    @property
    def transfer_learning_blob_name_mappings(self):
        return self._transfer_learning_blob_name_mappings

    @transfer_learning_blob_name_mappings.setter
    def transfer_learning_blob_name_mappings(self, mappings):
        if mappings is None:
            raise AssertionError("transfer learning blob name mappings should not be None")
        self._transfer_learning_blob_name_mappings = mappings

    loss = _set_once("_loss", "the model's loss (add more with add_loss)")

    def has_loss(self):
        return self._loss is not None

    def add_loss(self, loss, name="unnamed"):
        """Add a loss record (Scalar or Struct) as field ``name`` of the model's loss
        (``name_auto_0`` ... when taken); training differentiates their sum."""
        if loss is None:
            raise AssertionError("added loss should not be None")
        if not isinstance(loss, (schema.Scalar, schema.Struct)):
            raise AssertionError("added loss should be a scalar or a struct")
        if self._loss is None:
            self._loss = schema.Struct((name, loss))
            return
        if isinstance(self._loss, schema.Scalar):
            self._loss = schema.Struct(("unnamed", self._loss))
        field, index = name, 0
        while field in self._loss:
            field = f"{name}_auto_{index}"
            index += 1
        self._loss = self._loss + schema.Struct((field, loss))

    def add_output_schema(self, name, value):
        if value is None:
            raise AssertionError(f"added output schema {name} should not be None")
        if not isinstance(value, (schema.Scalar, schema.Struct)):
            raise AssertionError(f"added output schema {name} should be a scalar or a struct, got {type(value)}")
        if self._output_schema is None:
            self._output_schema = schema.Struct((name, value))
            return
        if name in self._output_schema.fields:
            raise AssertionError(f"output schema field {name} already exists")
        self._output_schema = self._output_schema + schema.Struct((name, value))

    def add_trainer_extra_schema(self, trainer_extra_schema):
        self._trainer_extra_schema += schema.NewRecord(self.net, trainer_extra_schema)

    # --- layers by name: model.FC(...), model.Relu(...)
    def __getattr__(self, layer):
        if layer.startswith("__"):
            raise AttributeError(layer)
        if layers.layer_exists(layer):
            def make_layer(*args, **kwargs):
                return self._add_new(layers.create_layer(layer, self, *args, **kwargs), kwargs)
            return make_layer
        op_type = layer[len("FunctionalLayer"):] if layer.startswith("FunctionalLayer") else layer
        if core.IsOperator(op_type) or layer.startswith("FunctionalLayer"):
            def make_functional(*args, **kwargs):
                def apply_operator(net, in_record, out_record, **op_args):
                    getattr(net, op_type)(in_record.field_blobs(), out_record.field_blobs(), **op_args)
                kwargs.setdefault("name", op_type)
                new = layers.create_layer("Functional", self, *args, function=apply_operator, **kwargs)
                return self._add_new(new, kwargs)
            return make_functional
        raise AttributeError(f"Trying to create non-registered layer: {layer}")

    def _add_new(self, new_layer, kwargs):
        if kwargs.get("output_to_metrics", False):
            new_layer.export_output_for_metrics()
        if kwargs.get("params_to_metrics", False):
            new_layer.export_params_for_metrics()
        return self.add_layer(new_layer)

    @property
    def layers(self):
        return self._layers

    # --- what training adds after the forward ops
    def apply_regularizers_on_loss(self, train_net, train_init_net, blob_to_device=None):
        """Add each parameter's regularization term (those regularizing by loss) to the loss."""
        for param, regularizer in list(self.param_to_reg.items()):
            if regularizer is None:
                continue
            if not isinstance(regularizer, Regularizer):
                raise LayerModelError(f"the regularizer of {param} is not a Regularizer: {regularizer!r}",
                                      user_location())
            term = regularizer(train_net, train_init_net, param, grad=None, by=RegularizationBy.ON_LOSS)
            if term is not None:
                self.add_loss(schema.Scalar(blob=term), str(term))

    def apply_regularizers_after_optimizer(self, train_net, train_init_net, grad_map, blob_to_device=None):
        """Record each parameter's regularization step that runs after its update (projections)."""
        cpu = core.DeviceOption(caffe2_pb2.CPU)
        for param, regularizer in list(self.param_to_reg.items()):
            if regularizer is None:
                continue
            if not isinstance(regularizer, Regularizer):
                raise LayerModelError(f"the regularizer of {param} is not a Regularizer: {regularizer!r}",
                                      user_location())
            grad = grad_map.get(str(param))
            device = get_param_device(param, grad, param_to_device=blob_to_device or {}, default_device=cpu)
            with core.DeviceScope(device):
                regularizer(train_net, train_init_net, param, grad=grad, by=RegularizationBy.AFTER_OPTIMIZER)

    def apply_post_grad_net_modifiers(self, trainer_net, trainer_init_net, grad_map, blob_to_device=None,
                                      modify_output_record=False):
        param_grad_map = {p: grad_map[p] for p in self.param_to_optim if p in grad_map}
        for modifier in self._post_grad_net_modifiers:
            modifier(trainer_net, trainer_init_net, param_grad_map, blob_to_device=blob_to_device,
                     modify_output_record=modify_output_record)

    def apply_final_net_modifiers(self, trainer_net, trainer_init_net, grad_map, blob_to_device=None,
                                  modify_output_record=False):
        for modifier in self._final_net_modifiers:
            modifier(trainer_net, trainer_init_net, grad_map, blob_to_device=blob_to_device,
                     modify_output_record=modify_output_record)

    def apply_optimizers(self, train_net, train_init_net, grad_map, blob_to_device=None):
        """Record each parameter's update by its optimizer (the default one where it named
        none; ``NoOptim``: no update)."""
        cpu = core.DeviceOption(caffe2_pb2.CPU)
        for param, optimizer in list(self.param_to_optim.items()):
            if optimizer is None:
                raise LayerModelError(f"parameter {param} has no optimizer and the model no default_optimizer",
                                      user_location(), "set model.default_optimizer before adding the layers (each takes the default when added)")
            grad = grad_map.get(str(param))
            device = get_param_device(param, grad, param_to_device=blob_to_device or {}, default_device=cpu)
            with core.DeviceScope(device):
                optimizer(train_net, train_init_net, param, grad)

    def _GetOne(self):
        return self.global_constants["ONE"]

    def NoOptim(self, *args, **kwargs):
        """The optimizer of parameters nothing updates."""

    @property
    def breakdown_map(self):
        return self._breakdown_map

    @breakdown_map.setter
    def breakdown_map(self, breakdown_map):
        if not isinstance(breakdown_map, dict) or not all(isinstance(k, str) for k in breakdown_map) or \
                sorted(breakdown_map.values()) != list(range(len(breakdown_map))):
            raise AssertionError("breakdown_map maps names to 0..n-1")
        self._breakdown_map = breakdown_map
