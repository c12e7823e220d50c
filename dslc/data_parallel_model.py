"""Caffe2's ``data_parallel_model``: one model trained as replicas over devices, their
gradients combined every step (synchronous SGD).

    Parallelize_CPU(model, input_builder_fun, forward_pass_builder_fun,
                    optimizer_builder_fun=build, devices=[0, 1])

builds, for each device d, the input and forward ops under the name scope ``cpu_d/``
(each replica reads its own ``cpu_d/data``, keeps its own parameters ``cpu_d/fc_w``), the
gradients of every replica's losses (scaled by 1 / the number of replicas, so the sum of
the replicas' gradients is the gradient of the whole batch), an ``Allreduce`` of each
parameter's gradients (added in device order: the result does not depend on timing), and
the optimizer's update of every replica's parameters. The init net gives every replica
the first replica's initial values, so the replicas stay equal. With ``shared_model``
the replicas read the first replica's parameters and only those are updated.

The replicas are ops of one net: dslc runs them in one process, where the interpreter
runs independent ops side by side and numba's compiled code releases the GIL.

Across processes or machines, ``rendezvous=dict(shard_id=i, num_shards=n)`` makes this
model shard i of n (Caffe2's ``kv_handler``, ``engine``, ``transport``, ``interface`` and
``exit_nets`` are accepted; dslc needs none: the shards meet through the session, Ray's
object store on a cluster). Every shard builds the same model on its own Node; the init
net broadcasts shard 0's initial values, the loss scale is 1 / (devices x shards), and
each gradient's Allreduce adds every shard's replicas (sparse rows are gathered), in
shard order: n shards of batch B train as one replica of batch n B (docs/distributed.md).
"""
from __future__ import annotations

import copy
from collections import OrderedDict

from dslc import core, scope
from dslc.ir.cores import usable_cpus
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location
from dslc.utils import MakeArgument
from dslc import workspace


class DataParallelError(DSLError, ValueError):
    """A data-parallel model that cannot be built as asked."""


def Parallelize_CPU(*args, **kwargs):
    kwargs["cpu_device"] = True
    return Parallelize(*args, **kwargs)


def Parallelize_GPU(*args, **kwargs):
    return Parallelize(*args, **kwargs)


def Parallelize(model_helper_obj, input_builder_fun, forward_pass_builder_fun, param_update_builder_fun=None,
                optimizer_builder_fun=None, post_sync_builder_fun=None, pre_grad_net_transformer_fun=None,
                net_transformer_fun=None, devices=None, rendezvous=None, net_type="dag",
                broadcast_computed_params=True, optimize_gradient_memory=False, dynamic_memory_management=False,
                blobs_to_keep=None, use_nccl=False, max_concurrent_distributed_ops=16, cpu_device=False,
                ideep=False, num_threads_per_device=4, shared_model=False, combine_spatial_bn=False,
                barrier_net_timeout_sec=300):
    """Replicate ``model_helper_obj``'s model over ``devices`` (see the module docstring).

    ``input_builder_fun(model)`` adds a replica's input ops; ``forward_pass_builder_fun(model,
    loss_scale)`` its forward ops, returning its losses; ``optimizer_builder_fun(model)``
    (once for the whole model) or ``param_update_builder_fun(model)`` (once per replica)
    the updates. Without either, only the forward replicas are built (a test model)."""
    current = scope.CurrentDeviceScope()
    assert current is None or current.device_type == caffe2_pb2.CPU, \
        "Parallelize must be called without a device scope"
    loc = user_location()
    rendezvous = _check_rendezvous(rendezvous, shared_model, loc)
    if not (cpu_device or ideep):
        raise DataParallelError("dslc has no GPU devices", loc, "use Parallelize_CPU (or cpu_device=True)")
    if param_update_builder_fun is not None and optimizer_builder_fun is not None:
        raise DataParallelError("give param_update_builder_fun or optimizer_builder_fun, not both", loc,
                                "drop one of them")
    model = model_helper_obj
    if not isinstance(model, ModelHelper):
        raise DataParallelError(f"Parallelize needs a ModelHelper, got {type(model).__name__}", loc,
                                "pass model_helper.ModelHelper(...) (or a CNNModelHelper)")
    devices = list(range(usable_cpus())) if devices is None else list(devices)
    model._device_type, model._device_prefix = caffe2_pb2.CPU, "cpu"
    model._devices, model._rendezvous, model._shared_model = devices, rendezvous, shared_model
    model._broadcast_context, model._grad_names, model._optimizer = None, [], None
    model.net.Proto().type = net_type
    model.net.Proto().num_workers = len(devices) * num_threads_per_device
    non_datapar_params = list(model.params)
    has_updates = param_update_builder_fun is not None or optimizer_builder_fun is not None
    loss_scale = 1.0 / (len(devices) * _shards(model)[0])

    losses_by_device = {}
    for d in devices:
        with _on(model, d):
            input_builder_fun(model)
            losses = forward_pass_builder_fun(model, loss_scale)
            if has_updates:
                if not isinstance(losses, list) or not all(isinstance(x, core.BlobReference) for x in losses):
                    raise DataParallelError("forward_pass_builder_fun must return a list of loss blobs", loc,
                                            "return [loss] (BlobReferences)")
            losses_by_device[d] = losses
    model._device_grouped_blobs = _group_by_device(model, model.params, non_datapar_params)
    computed = _group_by_device(model, model.GetComputedParams(""), [])
    model._device_grouped_blobs.update(computed)
    model._param_names = list(model._device_grouped_blobs)
    model._computed_param_names = list(computed)

    if pre_grad_net_transformer_fun:
        pre_grad_net_transformer_fun(model)
    if has_updates:
        _add_gradient_operators(model, losses_by_device)
    if net_transformer_fun:
        net_transformer_fun(model, len(devices), model._device_prefix, model._device_type)
    if not has_updates:
        return

    if combine_spatial_bn:
        _interleave_ops(model)
        _inter_device_batch_normalization(model)

    grads = [model.param_to_grad[p] for p in model.params if p in model.param_to_grad]
    non_datapar_grads = [model.param_to_grad[p] for p in non_datapar_params if p in model.param_to_grad]
    grouped_grads = _group_by_device(model, grads, non_datapar_grads)
    model._device_grouped_blobs.update(grouped_grads)
    model._grad_names = list(grouped_grads)
    model._losses_by_gpu = losses_by_device
    if broadcast_computed_params:
        for name in model._computed_param_names:
            _broadcast(model, model.net, name)
    if _shards(model)[0] > 1:  # across shards: every dense gradient in one call
        _allreduce_bucket(model, [n for n in reversed(model._grad_names)
                                  if not isinstance(model._device_grouped_blobs[n][model._devices[0]],
                                                    core.GradientSlice)])
    for name in reversed(model._grad_names):  # (Caffe2's order: the last layer's gradients first)
        _allreduce(model, name)

    all_params = set(model.GetParams(""))
    if shared_model:
        _prune_parameters_for_sharing(model)
    if param_update_builder_fun is not None:
        for d in devices:
            with _on(model, d):
                param_update_builder_fun(model)
    else:
        model._optimizer = optimizer_builder_fun(model)

    sync_blobs, sync_names = _blobs_to_sync(model)
    model._device_grouped_blobs.update(_group_by_device(model, sync_blobs, []))
    arg = model.net.Proto().arg.add()
    arg.name, arg.i = "first_iter_only_one_worker", 1
    # every replica starts from the first one's values (across shards: shard 0's first one's)
    sync = _broadcast_shards if _shards(model)[0] > 1 else _broadcast
    for name in sorted(sync_names):
        sync(model, model.param_init_net, name)
    if post_sync_builder_fun is not None:
        for d in devices:
            with _on(model, d):
                post_sync_builder_fun(model)
    model._data_parallel_model_init_nets = [model.param_init_net]
    model._data_parallel_model_nets = [model.net]
    if shared_model:
        _remap_parameters_for_shared_model(model, all_params)


_RENDEZVOUS_KEYS = {"shard_id", "num_shards", "kv_handler", "engine", "transport", "interface", "exit_nets",
                    "group"}


def _check_rendezvous(rendezvous, shared_model, loc):
    """Caffe2's rendezvous dict, checked; None for one shard (as Caffe2 treats it)."""
    if rendezvous is None:
        return None
    if not isinstance(rendezvous, dict) or "shard_id" not in rendezvous or "num_shards" not in rendezvous:
        raise DataParallelError("rendezvous must be a dict with shard_id and num_shards", loc,
                                "pass rendezvous=dict(shard_id=i, num_shards=n) on shard i of n")
    unknown = set(rendezvous) - _RENDEZVOUS_KEYS
    if unknown:
        raise DataParallelError(f"rendezvous has unknown keys {sorted(unknown)}", loc,
                                f"use {sorted(_RENDEZVOUS_KEYS)}")
    n, i = rendezvous["num_shards"], rendezvous["shard_id"]
    if not (isinstance(n, int) and isinstance(i, int) and n >= 1 and 0 <= i < n):
        raise DataParallelError(f"rendezvous shard_id={i!r} of num_shards={n!r}", loc,
                                "num_shards is a count >= 1, shard_id this shard's number in 0 .. num_shards - 1")
    if n == 1:
        return None
    if shared_model:
        raise DataParallelError("shared_model trains on one machine only (as in Caffe2)", loc,
                                "drop shared_model, or the rendezvous")
    return dict(rendezvous)


def _shards(model) -> tuple:
    """(num_shards, shard_id, group) of the model's rendezvous ((1, 0, prefix) without one)."""
    r = model._rendezvous
    if r is None:
        return 1, 0, model._device_prefix
    return r["num_shards"], r["shard_id"], str(r.get("group") or "data_parallel")


class _on:
    """The device scope and the name scope (``cpu_<d>``) of replica ``d``."""

    def __init__(self, model, d):
        self.device = core.DeviceScope(core.DeviceOption(model._device_type, d))
        self.names = core.NameScope(f"{model._device_prefix}_{d}")

    def __enter__(self):
        self.device.__enter__()
        self.names.__enter__()

    def __exit__(self, *exc):
        self.names.__exit__(*exc)
        self.device.__exit__(*exc)


def stripBlobName(param) -> str:
    """A blob's name without its replica's scope (``cpu_1/fc_w`` -> ``fc_w``)."""
    if isinstance(param, core.GradientSlice):
        return stripBlobName(param.indices) + ":" + stripBlobName(param.values)
    name = str(param)
    return name[name.index("/") + 1:] if "/" in name else name


def _device_of(model, blob) -> int:
    name = str(blob.indices if isinstance(blob, core.GradientSlice) else blob)
    prefix = name.split("/", 1)[0]
    head = f"{model._device_prefix}_"
    if "/" not in name or not prefix.startswith(head) or not prefix[len(head):].isdigit():
        raise DataParallelError(f"{name!r} is not under a replica's name scope ({head}<device>/)", user_location(),
                                "create the model's parameters inside forward_pass_builder_fun")
    return int(prefix[len(head):])


def _group_by_device(model, blobs, non_data_parallel) -> OrderedDict:
    """{name without the replica scope: {device: blob}}, in the blobs' order (those made
    before Parallelize, ``non_data_parallel``, left out)."""
    grouped = OrderedDict()
    for b in blobs[len(non_data_parallel):]:
        grouped.setdefault(stripBlobName(b), {})[_device_of(model, b)] = b
    return grouped


def _add_gradient_operators(model, losses_by_device):
    """Each replica's losses seeded with 1 on that replica, then one backward pass."""
    seeds = {}
    for d in model._devices:
        with core.DeviceScope(core.DeviceOption(model._device_type, d)):
            for loss in losses_by_device[d]:
                seeds[str(loss)] = str(model.net.ConstantFill(loss, str(loss) + "_grad", value=1.0))
    model.AddGradientOperators(seeds)


def _replicas(model, name) -> dict:
    """{device: the blob} of every replica's ``name``."""
    return model._device_grouped_blobs.get(name) or {
        d: core.BlobReference(f"{model._device_prefix}_{d}/{name}") for d in model._devices}


def _broadcast(model, net, name):
    """Copy the first replica's ``name`` to every other replica (in ``net``)."""
    blobs = _replicas(model, name)
    master = blobs[model._devices[0]]
    for d in model._devices[1:]:
        with core.DeviceScope(core.DeviceOption(model._device_type, d)):
            net.Copy(master, blobs[d])


def _broadcast_shards(model, net, name):
    """Every shard's replicas of ``name`` take shard 0's value."""
    shards, shard, group = _shards(model)
    blobs = _replicas(model, name)
    group_blobs = [blobs[d] for d in model._devices if d in blobs]
    with core.DeviceScope(core.DeviceOption(model._device_type, model._devices[0])):
        net.Broadcast(group_blobs, group_blobs, root=0, group=group, shards=shards, shard=shard)


def _allreduce_bucket(model, names):
    """Across shards, the dense gradients ``names`` summed by one Allreduce (a round trip
    between machines costs more than summing a small gradient)."""
    if not names:
        return
    shards, shard, group = _shards(model)
    grads = [model._device_grouped_blobs[n][d] for d in model._devices for n in names]
    with core.DeviceScope(core.DeviceOption(model._device_type, model._devices[0])):
        model.net.Allreduce(grads, grads, reduce="sum", group=group, shards=shards, shard=shard,
                            tensors=len(names))


def _allreduce(model, name):
    """Each replica's gradient ``name`` replaced by the sum of all of them: dense, one
    Allreduce (across shards, ``_allreduce_bucket`` did it); sparse (indices, values), every
    replica's rows, concatenated in device order (and shard order)."""
    blobs = model._device_grouped_blobs[name]
    devices = [d for d in model._devices if d in blobs]
    shards, shard, group = _shards(model)
    if len(devices) < 2 and shards == 1:
        return
    grads = [blobs[d] for d in devices]
    net = model.net
    if not isinstance(grads[0], core.GradientSlice):
        if shards == 1:
            net.Allreduce(grads, grads, reduce="sum", group=group)
        return
    for part in ("indices", "values"):
        rows = [getattr(g, part) for g in grads]
        if len(rows) == 1:  # (a lone replica: only the other shards' rows to join)
            net.Allgather(rows[0], rows[0], group=group, shards=shards, shard=shard)
            continue
        combined = f"{model._device_prefix}_{devices[0]}/{stripBlobName(rows[0])}_combined"
        net.Concat(rows, [combined, combined + "_dims"], axis=0)
        if shards > 1:
            net.Allgather(combined, combined, group=group, shards=shards, shard=shard)
        for r in rows:
            net.Copy(combined, r)


def _blobs_to_sync(model):
    """The replicas' blobs the init net makes (parameters, optimizer state), sorted by
    device, and their names without the replica scope; a shared model syncs only the
    computed parameters (its replicas read the first one's parameters)."""
    if model._shared_model:
        blobs = [str(p) for p in model.GetComputedParams("")]
    else:
        head = f"{model._device_prefix}_"
        blobs = [o for op in model.param_init_net.Proto().op for o in op.output if o.startswith(head)]
        missing = set(model._param_names) - {stripBlobName(b) for b in blobs}
        if missing:
            raise DataParallelError(f"parameters not made by the init net: {sorted(missing)}", user_location(),
                                    "create parameters with model.create_param or a brew helper")
    blobs = sorted(set(blobs), key=lambda b: (_device_of(model, b), b))
    return [core.BlobReference(b) for b in blobs], {stripBlobName(b) for b in blobs}


def _prune_parameters_for_sharing(model):
    master = f"{model._device_prefix}_{model._devices[0]}/"
    model.params = model.GetParams(master)
    keep = set(model.params)
    model.param_to_grad = {p: g for p, g in model.param_to_grad.items() if p in keep}
    model.weights = [w for w in model.weights if w in keep]
    model.biases = [b for b in model.biases if b in keep]


def _remap_parameters_for_shared_model(model, all_params):
    """Every replica reads the first replica's parameters: ops making another replica's
    copy go, reads of it read the first one's."""
    master = f"{model._device_prefix}_{model._devices[0]}/"
    names = {str(p) for p in all_params}
    masters = {str(p) for p in model.GetParams("")}
    for net in (model.param_init_net, model.net):
        proto = net.Proto()
        kept = []
        for op in proto.op:
            if any(o in names and o not in masters for o in op.output):
                continue
            for j, name in enumerate(op.input):
                if name in names and name not in masters:
                    op.input[j] = master + stripBlobName(name)
            kept.append(op)
        del proto.op[:]
        proto.op.extend(kept)


def _interleave_ops(model):
    """The replicas' ops one from each in turn (they are built alike), so that an op that
    needs every replica's value (batch statistics) finds them all computed before it."""
    ops = list(model.net.Proto().op)
    per_device = {d: [] for d in model._devices}
    for op in ops:
        per_device.setdefault(op.device_option.device_id, []).append(op)
    counts = {len(v) for v in per_device.values()}
    if len(counts) != 1:
        raise DataParallelError("combine_spatial_bn needs replicas with the same ops, got "
                                f"{sorted(len(v) for v in per_device.values())} ops", user_location(),
                                "build every replica alike (no op outside the replicas' scopes)")
    new = [per_device[d][k] for k in range(counts.pop()) for d in model._devices]
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(new)


def _inter_device_batch_normalization(model):
    """Every SpatialBN normalizes with the statistics of all replicas' batches together:
    ChannelStats per replica, summed, then SpatialBN with num_batches; its gradient alike
    with ChannelBackpropStats. (The ops of one SpatialBN come in a run, one per replica,
    after ``_interleave_ops``.)"""
    n = len(model._devices)
    ops = list(model.net.Proto().op)
    out, run = [], []

    def flush():
        if not run:
            return
        if run[0].type == "SpatialBN":
            x0 = run[0].input[0]
            stats = [(op.input[0] + "_sums", op.input[0] + "_sumsq") for op in run]
            for op, (s, q) in zip(run, stats):
                out.append(_op("ChannelStats", [op.input[0]], [s, q], op))
            out.append(_op("Sum", [s for s, _ in stats], [x0 + "_sums_combined"], run[0]))
            out.append(_op("Sum", [q for _, q in stats], [x0 + "_sumsq_combined"], run[0]))
            for op in run:
                op.input.extend([x0 + "_sums_combined", x0 + "_sumsq_combined"])
                op.arg.extend([_arg("num_batches", n)])
        else:  # SpatialBNGradient (X, scale, dY, mean, rstd) -> (dX, dscale, dbias)
            for op in run:
                out.append(_op("ChannelBackpropStats", [op.input[0], op.input[3], op.input[4], op.input[2]],
                               [op.output[1], op.output[2]], op))
            for k in (1, 2):
                parts = [op.output[k] for op in run]
                combined = f"{model._device_prefix}_{model._devices[0]}/{stripBlobName(parts[0])}_combined"
                out.append(_op("Sum", parts, [combined], run[0]))
                out.extend(_op("Copy", [combined], [p], run[0]) for p in parts)
            for op in run:
                op.input.extend([op.output[1], op.output[2]])
                op.arg.extend([_arg("num_batches", n)])
        out.extend(run)
        run.clear()

    for op in ops:
        if op.type in ("SpatialBN", "SpatialBNGradient") and (not run or run[0].type == op.type) and len(run) < n:
            run.append(op)
            continue
        flush()
        if op.type in ("SpatialBN", "SpatialBNGradient"):
            run.append(op)
        else:
            out.append(op)
    flush()
    del model.net.Proto().op[:]
    model.net.Proto().op.extend(out)


def _op(op_type, inputs, outputs, like):
    op = core.CreateOperator(op_type, inputs, outputs)
    op.device_option.CopyFrom(like.device_option)
    return op


def _arg(name, value):
    return MakeArgument(name, value)


def AddBlobSync(model, blobs, net=None):
    """Copy the first replica's ``blobs`` (names without the replica scope) to the others
    at this point of ``net`` (the training net by default), every run."""
    net = model.net if net is None else net
    for b in blobs:
        if b.startswith(model._device_prefix):
            raise DataParallelError(f"AddBlobSync takes names without the replica scope, got {b!r}",
                                    user_location(), f"pass {stripBlobName(b)!r}")
        model._device_grouped_blobs[b] = {
            d: core.BlobReference(f"{model._device_prefix}_{d}/{b}") for d in model._devices}
        _broadcast(model, net, b)


def GetLearningRateBlobNames(model):
    """The learning-rate blobs of the model's optimizer."""
    if getattr(model, "_optimizer", None) is not None and hasattr(model._optimizer, "get_cpu_blob_name"):
        return [model._optimizer.get_cpu_blob_name("lr")]
    return [op.output[0] for op in model.net.Proto().op if op.type == "LearningRate"]


def GetCheckpointParams(model):
    """The blobs a checkpoint needs: the first replica's (parameters, computed parameters,
    optimizer state) and the iteration counters outside the replicas."""
    blobs, _ = _blobs_to_sync(model)
    first = f"{model._device_prefix}_{model._devices[0]}/"
    out = {b for b in blobs if str(b).startswith(first)}
    for op in model.net.Proto().op:
        if op.type in ("Iter", "AtomicIter") and not op.output[0].startswith(f"{model._device_prefix}_"):
            out.add(core.BlobReference(op.output[0]))
    return out


def FinalizeAfterCheckpoint(model, blobs=None, cpu_mode=False):
    """After loading a checkpoint of the first replica: copy its blobs to the other replicas."""
    if not hasattr(model, "_checkpoint_net"):
        names = _blobs_to_sync(model)[1] if blobs is None else {stripBlobName(b) for b in blobs}
        model._checkpoint_net = core.Net("checkpoint_sync_net")
        for name in sorted(names):
            _broadcast(model, model._checkpoint_net, name)
        workspace.CreateNet(model._checkpoint_net)
    workspace.RunNet(model._checkpoint_net.Proto().name)


def ConvertNetForDevice(net, device=None):
    """A copy of ``net`` with every blob under the device's replica scope (``cpu_<id>/``) and
    its ops on that device: to append another model's nets inside forward_pass_builder_fun."""
    copied = copy.deepcopy(net)
    device = device or scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU, 0)
    prefix = f"cpu_{device.device_id}/"
    proto = copied.Proto()
    for op in proto.op:
        if "RecurrentNetwork" in op.type:
            raise DataParallelError("ConvertNetForDevice of a RecurrentNetwork op is not supported (nor in "
                                    "Caffe2)", user_location(), "build the recurrent net inside the replica")
        op.input[:] = [prefix + b for b in op.input]
        op.output[:] = [prefix + b for b in op.output]
        op.control_input[:] = [prefix + b for b in op.control_input]
        op.device_option.CopyFrom(device)
    proto.external_input[:] = [prefix + b for b in proto.external_input]
    proto.external_output[:] = [prefix + b for b in proto.external_output]
    return copied


def GetDevices(model):
    return list(model._devices)
