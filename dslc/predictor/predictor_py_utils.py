"""The MetaNetDef an exported predictor is described by: its nets, plans and blob lists
under their names (protobuf has no maps here: lists of key/value entries), and the nets
an export makes (the predict net and its init net)."""
from __future__ import annotations

from dslc import core, scope


def create_predict_net(predictor_export_meta):
    """The predict net of an export: the model's ops, its inputs and parameters as external
    inputs, its outputs as external outputs."""
    src = predictor_export_meta.predict_net
    net = core.Net(src.name or "predict")
    proto = net.Proto()
    proto.op.extend(src.op)
    proto.partition_info.extend(src.partition_info)
    proto.external_input.extend(predictor_export_meta.inputs + predictor_export_meta.parameters)
    proto.external_output.extend(predictor_export_meta.outputs)
    proto.arg.extend(src.arg)
    if predictor_export_meta.net_type is not None:
        proto.type = predictor_export_meta.net_type
    if predictor_export_meta.num_workers is not None:
        proto.num_workers = predictor_export_meta.num_workers
    return proto


def create_predict_init_net(ws, predictor_export_meta):
    """A net filling every input and output with zeros of its shape (from ``shapes``, else
    from what ``ws`` holds), then ``extra_init_net``."""
    net = core.Net("predict-init")
    blobs = predictor_export_meta.inputs + predictor_export_meta.outputs
    for blob in blobs:
        shape = predictor_export_meta.shapes.get(blob)
        if shape is None:
            if blob not in ws.blobs:
                raise ValueError(f"{blob!r} is not in the workspace, and shapes gives it no shape: the "
                                 "predictor's init net needs it (pass shapes={name: dims})")
            shape = ws.blobs[blob].fetch().shape
        with scope.EmptyDeviceScope():  # (the net's users choose where these fills run)
            net.ConstantFill([], blob, shape=list(shape), value=0.0)
    net.Proto().external_input.extend(blobs)
    if predictor_export_meta.extra_init_net:
        net.AppendNet(predictor_export_meta.extra_init_net)
    AddModelIdArg(predictor_export_meta, net.Proto())
    return net.Proto()


def get_comp_name(string, name):
    return f"{string}_{name}" if name else string


def to_first_match_dict(kv_list):
    out = {}
    for item in kv_list:
        out.setdefault(item.key, item.value)
    return out


def _ProtoMapGet(field, key):
    """The value of the first entry of ``field`` under ``key`` (None if none)."""
    for v in field:
        if v.key == key:
            return v.value
    return None


def GetPlan(meta_net_def, key):
    return _ProtoMapGet(meta_net_def.plans, key)


GetPlanOriginal = GetPlan


def GetBlobs(meta_net_def, key):
    blobs = _ProtoMapGet(meta_net_def.blobs, key)
    return [] if blobs is None else blobs


def GetBlobsByTypePrefix(meta_net_def, blob_type_prefix):
    seen = {}
    for b in meta_net_def.blobs:
        if b.key.startswith(blob_type_prefix):
            for blob in b.value:
                seen.setdefault(blob, len(seen))
    return sorted(seen, key=seen.get)


def GetNet(meta_net_def, key):
    return _ProtoMapGet(meta_net_def.nets, key)


GetNetOriginal = GetNet


def GetApplicationSpecificInfo(meta_net_def, key):
    return _ProtoMapGet(meta_net_def.applicationSpecificInfo, key)


def GetApplicationSpecificInfoDict(meta_net_def):
    return to_first_match_dict(meta_net_def.applicationSpecificInfo)


def AddBlobs(meta_net_def, blob_name, blob_def):
    blobs = _ProtoMapGet(meta_net_def.blobs, blob_name)
    if blobs is None:
        blobs = meta_net_def.blobs.add(key=blob_name).value
    blobs.extend(blob_def)


def ReplaceBlobs(meta_net_def, blob_name, blob_def):
    blobs = _ProtoMapGet(meta_net_def.blobs, blob_name)
    if blobs is None:
        raise KeyError(f"the MetaNetDef has no blob list {blob_name!r} to replace")
    del blobs[:]
    blobs.extend(blob_def)


def AddPlan(meta_net_def, plan_name, plan_def):
    meta_net_def.plans.add(key=plan_name, value=plan_def)


def AddNet(meta_net_def, net_name, net_def):
    meta_net_def.nets.add(key=net_name, value=net_def)


def SetBlobsOrder(meta_net_def, blobs_order):
    meta_net_def.blobsOrder.extend(blobs_order)


def SetPreLoadBlobs(meta_net_def, pre_load_blobs):
    meta_net_def.preLoadBlobs.extend(pre_load_blobs)


def SetRequestOnlyEmbeddings(meta_net_def, request_only_embeddings):
    meta_net_def.requestOnlyEmbeddings.extend(request_only_embeddings)


def GetBlobsOrder(meta_net_def):
    return meta_net_def.blobsOrder


def SetTensorBoundShapes(meta_net_def, tensor_bound_shapes):
    meta_net_def.tensorBoundShapes.CopyFrom(tensor_bound_shapes)


def SetAOTConfig(meta_net_def, aot_config):
    meta_net_def.aotConfig.CopyFrom(aot_config)


def GetArgumentByName(net_def, arg_name):
    return next((arg for arg in net_def.arg if arg.name == arg_name), None)


def AddModelIdArg(meta_net_def, net_def):
    """Give ``net_def`` the ``model_id`` argument of the export's predict net, if it has one."""
    model_id = GetArgumentByName(meta_net_def.predict_net, "model_id")
    if model_id is None:
        return
    old = GetArgumentByName(net_def, "model_id")
    if old is not None:
        old.i = model_id.i
    else:
        net_def.arg.add(name="model_id", i=model_id.i)
