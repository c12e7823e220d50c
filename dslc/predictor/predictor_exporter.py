"""Caffe2's ``predictor_exporter``: a trained model saved for inference, and loaded back.

    meta = PredictorExportMeta(predict_net=model.net, parameters=model.params,
                               inputs=["data"], outputs=["softmax"], shapes={"data": (1, 784)})
    save_to_db("minidb", "model.minidb", meta)      # the parameters and a MetaNetDef, in one db
    ...
    predict_net = prepare_prediction_net("model.minidb", "minidb")   # parameters loaded
    workspace.FeedBlob("data", x); workspace.RunNet(predict_net)

The MetaNetDef (dslc/proto/metanet_pb2.py) holds three nets: the predict net, its init
net (zeros in every input and output, then ``extra_init_net``) and the global init net
(a Load of the parameters from the db, then ``global_init_net``). It is stored as a
serialized protobuf under ``!!META_NET_DEF``; loading it parses protobuf, nothing else.
"""
from __future__ import annotations

import collections

from dslc import core, scope, workspace
from dslc.ir.diagnostics import DSLError
from dslc.predictor import predictor_py_utils as utils
from dslc.predictor import serde
from dslc.predictor_constants import predictor_constants
from dslc.proto import caffe2_pb2, metanet_pb2
from dslc.trace.tracing import user_location


class PredictorExportError(DSLError, ValueError):
    """An export that cannot be made as asked (parameters that are also inputs...)."""


class PredictorExportMeta(collections.namedtuple(
        "PredictorExportMeta", "predict_net, parameters, inputs, outputs, shapes, name, extra_init_net, "
                               "global_init_net, net_type, num_workers, trainer_prefix")):
    """What an export holds: the predict net (a Net, Plan, NetDef or PlanDef), the names of
    its parameters, inputs and outputs (parameters apart from both), the shapes of inputs
    and outputs, a ``name`` telling several predictors of one db apart, nets appended to
    the init nets, and the predict net's ``net_type`` and ``num_workers``."""

    def __new__(cls, predict_net, parameters, inputs, outputs, shapes=None, name="", extra_init_net=None,
                global_init_net=None, net_type=None, num_workers=None, trainer_prefix=None):
        inputs, outputs, parameters = ([str(b) for b in blobs] for blobs in (inputs, outputs, parameters))
        loc = user_location()
        if len(set(inputs)) != len(inputs):
            raise PredictorExportError("a predictor's inputs must be distinct", loc, "list each input once")
        for what, blobs in (("inputs", inputs), ("outputs", outputs)):
            both = sorted(set(parameters) & set(blobs))
            if both:
                raise PredictorExportError(f"parameters and {what} must be apart; both list {both}", loc,
                                           f"drop them from the parameters or the {what}")
        if isinstance(predict_net, (core.Net, core.Plan)):
            predict_net = predict_net.Proto()
        if not isinstance(predict_net, (caffe2_pb2.NetDef, caffe2_pb2.PlanDef)):
            raise PredictorExportError(f"predict_net must be a Net, Plan, NetDef or PlanDef, got "
                                       f"{type(predict_net).__name__}", loc, "pass model.net")
        return super().__new__(cls, predict_net, parameters, inputs, outputs, shapes or {}, name,
                               extra_init_net, global_init_net, net_type, num_workers, trainer_prefix)

    def _named(self, kind):
        return utils.get_comp_name(kind, self.name)

    def inputs_name(self):
        return self._named(predictor_constants.INPUTS_BLOB_TYPE)

    def outputs_name(self):
        return self._named(predictor_constants.OUTPUTS_BLOB_TYPE)

    def parameters_name(self):
        return self._named(predictor_constants.PARAMETERS_BLOB_TYPE)

    def global_init_name(self):
        return self._named(predictor_constants.GLOBAL_INIT_NET_TYPE)

    def predict_init_name(self):
        return self._named(predictor_constants.PREDICT_INIT_NET_TYPE)

    def predict_net_name(self):
        return self._named(predictor_constants.PREDICT_NET_TYPE)

    def train_init_plan_name(self):
        plan = self._named(predictor_constants.TRAIN_INIT_PLAN_TYPE)
        return f"{self.trainer_prefix}_{plan}" if self.trainer_prefix else plan

    def train_plan_name(self):
        plan = self._named(predictor_constants.TRAIN_PLAN_TYPE)
        return f"{self.trainer_prefix}_{plan}" if self.trainer_prefix else plan


def get_predictor_exporter_helper(submodelNetName):
    """A PredictorExportMeta of nothing, for its names (``predict_net_name()``...)."""
    return PredictorExportMeta(predict_net=core.Net(submodelNetName), parameters=[], inputs=[], outputs=[],
                               name=submodelNetName)


def _global_init_net(meta, db_type):
    net = core.Net("global-init")
    net.Load([predictor_constants.PREDICTOR_DBREADER], meta.parameters)
    net.Proto().external_input.extend([predictor_constants.PREDICTOR_DBREADER])
    net.Proto().external_output.extend(meta.parameters)
    if meta.global_init_net:
        net.AppendNet(meta.global_init_net)
    utils.AddModelIdArg(meta, net.Proto())
    return net.Proto()


def get_meta_net_def(predictor_export_meta, ws=None, db_type=None):
    """The MetaNetDef describing an export: its three nets and three blob lists."""
    ws = ws or workspace.C.Workspace.current
    meta = predictor_export_meta
    out = metanet_pb2.MetaNetDef()
    utils.AddNet(out, meta.predict_init_name(), utils.create_predict_init_net(ws, meta))
    utils.AddNet(out, meta.global_init_name(), _global_init_net(meta, db_type))
    utils.AddNet(out, meta.predict_net_name(), utils.create_predict_net(meta))
    utils.AddBlobs(out, meta.parameters_name(), meta.parameters)
    utils.AddBlobs(out, meta.inputs_name(), meta.inputs)
    utils.AddBlobs(out, meta.outputs_name(), meta.outputs)
    return out


def set_model_info(meta_net_def, project_str, model_class_str, version):
    meta_net_def.modelInfo.project = project_str
    meta_net_def.modelInfo.modelClass = model_class_str
    meta_net_def.modelInfo.version = version


def save_to_db(db_type, db_destination, predictor_export_meta, use_ideep=False, *args, **kwargs):
    """Save the export's parameters (from the current workspace) and its MetaNetDef into
    the db ``db_destination``; a parameter the workspace lacks is an error."""
    meta_net_def = get_meta_net_def(predictor_export_meta, db_type=db_type)
    missing = [p for p in predictor_export_meta.parameters if not workspace.HasBlob(p)]
    if missing:
        raise PredictorExportError(f"the workspace has no parameter {missing[0]!r} to export", user_location(),
                                   "run the model's init net (or load its checkpoint) before save_to_db")
    workspace.FeedBlob(predictor_constants.META_NET_DEF, serde.serialize_protobuf_struct(meta_net_def))
    blobs = [predictor_constants.META_NET_DEF] + predictor_export_meta.parameters
    workspace.RunOperatorOnce(core.CreateOperator("Save", blobs, [], absolute_path=True, db=db_destination,
                                                  db_type=db_type, **kwargs))


def load_from_db(filename, db_type, device_option=None, *args, **kwargs):
    """The MetaNetDef of the export in db ``filename``; the db's reader is left in the
    workspace as ``!!PREDICTOR_DBREADER`` for the global init net's Load of the parameters.
    Every op of its nets gets ``device_option`` (default: the current device scope)."""
    reader = core.BlobReference(predictor_constants.PREDICTOR_DBREADER)
    workspace.RunOperatorOnce(core.CreateOperator("CreateDB", [], [reader], db=filename, db_type=db_type))
    meta_blob = core.BlobReference(predictor_constants.META_NET_DEF)
    workspace.RunOperatorOnce(core.CreateOperator("Load", [reader], [meta_blob]))
    blob = workspace.FetchBlob(predictor_constants.META_NET_DEF)
    if isinstance(blob, str):
        blob = blob.encode("utf-8")
    elif not isinstance(blob, (bytes, bytearray)):
        blob = bytes(blob.item() if hasattr(blob, "item") else blob)
    try:
        meta_net_def = serde.deserialize_protobuf_struct(bytes(blob), metanet_pb2.MetaNetDef)
    except Exception as e:  # (protobuf's DecodeError: a damaged or foreign blob)
        raise PredictorExportError(f"{filename!r} holds no readable predictor description ({e})", user_location(),
                                   "export the model with save_to_db") from None
    device_option = device_option if device_option is not None else scope.CurrentDeviceScope()
    if device_option is not None:
        for kv in meta_net_def.nets:
            for op in kv.value.op:
                op.device_option.CopyFrom(device_option)
    return meta_net_def


def prepare_prediction_net(filename, db_type, device_option=None):
    """The export's predict net, created in the current workspace with its parameters loaded
    and its inputs and outputs made: feed the inputs and ``workspace.RunNet`` it."""
    meta_net_def = load_from_db(filename, db_type, device_option)
    workspace.RunNetOnce(utils.GetNet(meta_net_def, predictor_constants.GLOBAL_INIT_NET_TYPE))
    workspace.RunNetOnce(utils.GetNet(meta_net_def, predictor_constants.PREDICT_INIT_NET_TYPE))
    predict_net = core.Net(utils.GetNet(meta_net_def, predictor_constants.PREDICT_NET_TYPE))
    workspace.CreateNet(predict_net)
    return predict_net
