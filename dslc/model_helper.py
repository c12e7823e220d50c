"""ModelHelper: a model's two nets and its parameters, as Caffe2's ``model_helper`` has them.

A model is a ``param_init_net`` (run once: creates and fills the parameters) and a
``net`` (run per step: forward, and once ``AddGradientOperators`` ran, backward and
the optimizer's updates). ``params`` lists the parameters' blob references in the
order they were added; checkpoints save them, optimizers update them.

    model = ModelHelper(name="mlp")
    w = model.param_init_net.XavierFill([], "w", shape=[10, 4])
    model.AddParameter(w, ParameterTags.WEIGHT)
    model.net.FC(["x", w, "b"], "y")
"""
from __future__ import annotations

import logging

from dslc import core
from dslc.ir.diagnostics import DSLError
from dslc.brew_helpers import db_input
from dslc.modeling.initializers import ExternalInitializer
from dslc.modeling.parameter_info import ParameterInfo, ParameterTags
from dslc.optimizer_context import DEFAULT_OPTIM, OptimizerContext
from dslc.trace.tracing import user_location


# The operators Caffe2's ModelHelper records through ``model.Op(...)`` without a warning
# (those that need no parameters); any other operator is recorded too, with a logged
# warning, or refused with ``allow_not_known_ops=False``, as there.
KNOWN_WORKING_OPS = frozenset({
    "Accuracy", "Adam", "Add", "Adagrad", "SparseAdagrad", "Adadelta", "SparseAdadelta", "AveragedLoss",
    "Cast", "Checkpoint", "ConstantFill", "Copy", "CopyGPUToCPU", "CopyCPUToGPU", "DequeueBlobs",
    "EnsureCPUOutput", "ExpandDims", "Flatten", "FlattenToVec", "LabelCrossEntropy", "LearningRate",
    "MakeTwoClass", "MatMul", "NCCLAllreduce", "NHWC2NCHW", "PackSegments", "Print", "PRelu",
    "ReduceFrontSum", "Scale", "ScatterWeightedSum", "Sigmoid", "SortedSegmentSum", "Snapshot", "Softmax",
    "SoftmaxWithLoss", "SquaredL2Distance", "Squeeze", "StopGradient", "Summarize", "Tanh", "Transpose",
    "UnpackSegments", "WeightedSum", "YellowFin"})

_log = logging.getLogger("dslc.model_helper")


class ModelError(DSLError, RuntimeError):
    """A ModelHelper used out of order (gradients twice, or asked for before they exist)."""


def _tag_set(tags) -> set:
    if not tags:
        return set()
    return set(tags) if isinstance(tags, (list, tuple, set)) else {tags}


def _normalize_scope(namescope) -> str:
    if namescope is None:
        return core.CurrentNameScope()
    namescope = str(namescope)
    return namescope if namescope == "" or namescope.endswith("/") else namescope + "/"


class ModelHelper:
    """A model: ``param_init_net``, ``net``, ``params`` (Caffe2's ``model_helper.ModelHelper``).

    ``param_model``: share another model's init net and parameters (Caffe2's way of building a
    test net beside a train net over the same weights).
    """

    def __init__(self, name=None, init_params=True, allow_not_known_ops=True,
                 skip_sparse_optim=False, param_model=None, arg_scope=None):
        self.name = name or "model"
        self.net = core.Net(self.name)
        if param_model is not None:
            self.param_init_net = param_model.param_init_net
            self.params = param_model.params
            self.param_to_grad = param_model.param_to_grad
            self._computed_params = param_model._computed_params
            self._parameters_info = param_model._parameters_info
        else:
            self.param_init_net = core.Net(self.name + "_init")
            self.params = []
            self.param_to_grad = {}
            self._computed_params = []
            self._parameters_info = {}  # parameter name -> ParameterInfo (create_param)
        self.init_params = init_params
        self.allow_not_known_ops = allow_not_known_ops
        self.skip_sparse_optim = skip_sparse_optim
        self.weights = []
        self.biases = []
        self.gradient_ops_added = False
        self.grad_map = {}
        # Caffe2's defaults: its CPU build ignores the cuDNN engine the helpers then name
        self._arg_scope = {"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": False}
        if arg_scope:
            self._arg_scope.update(arg_scope)

    @property
    def arg_scope(self):
        return self._arg_scope

    def get_name(self):
        return self.name

    def __repr__(self):
        return f"ModelHelper({self.name!r}, {len(self.params)} params)"

    # --- parameters
    def AddParameter(self, param, tags=None):
        """Register ``param`` (a BlobReference or name) as a parameter, with Caffe2's tags."""
        ref = param if isinstance(param, core.BlobReference) else core.BlobReference(str(param))
        tags = _tag_set(tags)
        if ParameterTags.COMPUTED_PARAM in tags:
            self._computed_params.append(ref)
        else:
            self.params.append(ref)
        if ParameterTags.WEIGHT in tags:
            self.weights.append(ref)
        if ParameterTags.BIAS in tags:
            self.biases.append(ref)
        return ref

    def create_param(self, param_name, shape, initializer, tags=None):
        """The parameter ``param_name`` (under the current NameScope when a str) made by
        ``initializer`` in ``param_init_net``; asked for again, the same one (same shape)."""
        name = str(param_name) if isinstance(param_name, core.BlobReference) else core.ScopedName(param_name)
        known = self._parameters_info.get(name)
        if known is not None:
            if known.shape != shape:
                raise ModelError(f"parameter {name!r} was made with shape {known.shape}, now asked for {shape}",
                                 user_location(), "give the second parameter another name")
            return known.blob
        if not self.init_params:
            initializer = ExternalInitializer()
        info = initializer.create_param(param_name=core.BlobReference(name), init_net=self.param_init_net,
                                        shape=shape)
        context = OptimizerContext.current()
        for tag in list(_tag_set(tags)) + [DEFAULT_OPTIM]:
            if context.has_optimizer(tag):
                info.optimizer = context.get_optimizer(tag)
                break
        self._parameters_info[name] = info
        self.AddParameter(info.blob, tags)
        return info.blob

    def GetCompleteNet(self):
        """One net: the init net's ops (marked ``/param_init_net`` in their debug_info), then
        the training net's; ``ConstructInitTrainNetfromNet`` splits it back."""
        complete = self.param_init_net.Clone(self.name + "_complete_net", keep_schema=True)
        for op in complete.Proto().op:
            op.debug_info = op.debug_info + "/param_init_net"
        complete.AppendNet(self.net)
        if self.net.Proto().HasField("type"):  # (the training net's execution type)
            complete.Proto().type = self.net.Proto().type
        return complete

    def ConstructInitTrainNetfromNet(self, net):
        """This model's init and training nets, from a net ``GetCompleteNet`` made."""
        ops = list(net.Proto().op)
        init = [k for k, op in enumerate(ops) if op.debug_info.endswith("/param_init_net")]
        train = [k for k, op in enumerate(ops) if not op.debug_info.endswith("/param_init_net")]
        self.param_init_net = net.Clone(net.Name() + "/generated_param_init_net", keep_schema=True,
                                        op_id_mask=init, update_external_list=True)
        self.net = net.Clone(net.Name() + "/generated_net", keep_schema=True, op_id_mask=train,
                             update_external_list=True)

    def get_param_info(self, param):
        return self._parameters_info.get(str(param))

    def GetParams(self, namescope=None, top_scope=False):
        """The parameters under ``namescope`` (default: the current NameScope; '' means all)."""
        prefix = _normalize_scope(namescope)
        if prefix == "":
            return list(self.params)
        return [p for p in self.params if p.GetNameScope().startswith(prefix)]

    def GetComputedParams(self, namescope=None):
        prefix = _normalize_scope(namescope)
        return [p for p in self._computed_params if p.GetNameScope().startswith(prefix)]

    def GetAllParams(self, namescope=None):
        return self.GetParams(namescope) + self.GetComputedParams(namescope)

    def _Validate(self) -> list:
        """The parameters registered more than once, sorted."""
        names = sorted(str(p) for p in self.params)
        return sorted({b for a, b in zip(names, names[1:]) if a == b})

    def Validate(self):
        """Refuse a parameter registered twice (Caffe2 asserts the same)."""
        dupes = self._Validate()
        if dupes:
            raise ModelError(f"duplicate parameters in model {self.name!r}: {dupes}",
                             user_location(), "add each parameter once (AddParameter / brew)")

    # --- gradients
    def AddGradientOperators(self, *args, **kwargs):
        """Record the backward ops into ``net``; returns the gradient map (blob -> its gradient)."""
        if self.gradient_ops_added:
            raise ModelError("AddGradientOperators was already called on this model", user_location(),
                             "call it once, after the whole forward net is built")
        self.Validate()
        add = getattr(self.net, "AddGradientOperators", None)
        if add is None:
            raise ModelError("gradients are not available in this build of dslc", user_location())
        self.grad_map = add(*args, **kwargs)
        self.gradient_ops_added = True
        self.param_to_grad = self.get_param_to_grad(self.params)
        return self.grad_map

    def get_param_to_grad(self, params):
        """Each of ``params`` that has a gradient, mapped to its gradient blob."""
        if not self.gradient_ops_added:
            raise ModelError("no gradients yet", user_location(), "call model.AddGradientOperators([loss]) first")
        return {p: self.grad_map[str(p)] for p in params if str(p) in self.grad_map}

    # --- the nets
    def Proto(self):
        return self.net.Proto()

    def InitProto(self):
        return self.param_init_net.Proto()

    # --- op helpers Caffe2's ModelHelper has as methods
    def CreateDB(self, blob_out, db, db_type, **kwargs):
        """A DB reader ``blob_out`` made in ``param_init_net`` (run once, read by the net's ops)."""
        return self.param_init_net.CreateDB([], blob_out, db=db, db_type=db_type, **kwargs)

    def TensorProtosDBInput(self, unused_blob_in, blob_out, batch_size, db, db_type, **kwargs):
        """Batches of ``db``'s TensorProtos records into ``blob_out``: its reader
        ``dbreader_<db>`` is made in ``param_init_net`` (brew's db_input)."""
        if len(unused_blob_in):
            raise ModelError("model.TensorProtosDBInput makes its own reader: it takes no input blobs",
                             user_location(), "pass [] as the first argument, or record the op on "
                             "model.net.TensorProtosDBInput([reader], ...) to read with a reader of your own")
        return db_input(self, blob_out, batch_size, db, db_type, **kwargs)

    def GetDevices(self):
        """The devices data_parallel_model spread this model over."""
        devices = getattr(self, "_devices", None)
        if not devices:
            raise ModelError("this model runs on no devices of its own", user_location(),
                             "use data_parallel_model.Parallelize to run it on several devices")
        return devices

    def RunAllOnGPU(self, *args, **kwargs):
        """Both nets' device option: a GPU (recorded; dslc runs them on the CPU)."""
        self.param_init_net.RunAllOnGPU(*args, **kwargs)
        self.net.RunAllOnGPU(*args, **kwargs)

    def GetOptimizationParamInfo(self, params=None):
        """The ParameterInfo of each parameter with a gradient (of ``params``, if given; those
        with a sparse gradient left out when the model skips sparse optimization)."""
        if not self.gradient_ops_added:
            raise ModelError("no gradients yet", user_location(), "call model.AddGradientOperators([loss]) first")
        to_grad = self.get_param_to_grad(params) if params else self.param_to_grad
        out = []
        for param, grad in to_grad.items():
            if self.skip_sparse_optim and isinstance(grad, core.GradientSlice):
                continue
            info = self.get_param_info(param)
            if info is None:
                info = self._parameters_info[str(param)] = ParameterInfo(param_id=None, param=param, grad=grad)
            info.grad = grad
            out.append(info)
        return out

    def __dir__(self):
        return sorted(set(super().__dir__()) | KNOWN_WORKING_OPS)

    def __getattr__(self, op_type):
        """``model.Op(...)``: record ``Op`` into ``net`` (ops without parameters). An operator
        Caffe2's ModelHelper does not list is recorded with a logged warning, as there, or
        refused when the model was made with ``allow_not_known_ops=False``."""
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        if not core.is_operator(op_type):
            raise AttributeError(f"{op_type!r} is neither a ModelHelper attribute nor an operator")
        if op_type not in KNOWN_WORKING_OPS:
            if not self.__dict__.get("allow_not_known_ops", True):
                raise AttributeError(f"operator {op_type!r} is not one ModelHelper records directly "
                                     "(allow_not_known_ops=False): record it on model.net")
            _log.warning("ModelHelper records %s, an operator it does not list, into model.net as given", op_type)
        return getattr(self.net, op_type)
