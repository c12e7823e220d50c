"""Caffe2's ``workspace``: the current workspace and the calls on it (FeedBlob, FetchBlob,
RunNetOnce, CreateNet/RunNet, RunPlan, SwitchWorkspace, immediate mode ...).

There is one current workspace per process, as in Caffe2. ``LocalSession()`` runs in it
by default, and makes its own root current while it runs, so Python ops that call
``FetchBlob`` read the workspace of the session running them. The machinery is the
driver's: the runner and the current workspace (dslc/driver/runner.py), blob values
(dslc/driver/blobs.py), the raw DB API (dslc/driver/db_api.py), shape inference
(dslc/driver/shapes.py), transforms (dslc/driver/transforms.py) and immediate mode
(dslc/driver/immediate.py).
"""
# ruff: noqa: F401  (the driver's names Caffe2 programs and tests reach through this module)
from __future__ import annotations

import contextlib
import types

import numpy as np

from dslc.runtime import blobproto
from dslc.runtime import values as _values
from dslc.driver import blobs as _blobs
from dslc.driver import db_api, runner, transforms
from dslc.driver import immediate as _immediate
from dslc.driver.blobs import Blob, BlobError, FeedError
from dslc.driver.blobs import fetch as _fetch
from dslc.driver.immediate import (FeedImmediate, FetchImmediate, ImmediateBlobs, IsImmediate, RunOperatorImmediate,
                                   StartImmediate, StopImmediate)
from dslc.driver.runner import CURRENT as _current
from dslc.driver.runner import (NotANetError, Workspace, WorkspaceError, as_net, current, current_as, net_name,
                                operator_net, parsed, raises_runtime_error)
from dslc.driver.runner import _current_name, _named
from dslc.ir.diagnostics import DSLError
from dslc.ir.opdef import OPS
from dslc.predictor.runner import Predictor as _Predictor
from dslc.proto import caffe2_pb2
from dslc.trace import devices
from dslc.trace.oprecord import ALIASES, is_operator
from dslc.trace.steps import plan_from_message
from dslc.trace.tracing import user_location


def RegisteredOperators() -> list[str]:
    """The operator names nets can record (``net.<Op>``)."""
    return sorted(n for n in {d.name for d in OPS} | ALIASES if is_operator(n))


def registered_dbs() -> list[str]:
    """The ``db_type`` names Save, Load and the checkpoint managers accept."""
    from dslc.runtime import blobdb  # (the DB formats load on first use)
    return blobdb.names()


# Caffe2's C extension module, as far as its Python users reach into it. use_mkldnn is
# Caffe2's CPU build's (True; has_mkldnn False there too): an IDEEP device option is a CPU one,
# and dslc runs it as the CPU's, as every device option.
C = types.SimpleNamespace(Workspace=Workspace, registered_dbs=registered_dbs, has_mkldnn=False,
                          use_mkldnn=True, create_db=db_api.create_db, Mode=db_api.Mode,
                          benchmark_net=lambda *args: BenchmarkNet(*args))
has_gpu_support = has_cuda_support = has_hip_support = False
has_fbgemm = True  # (what Caffe2 gets from fbgemm that its tests ask about: bfloat16 serialization)
GpuDeviceType = 1  # Caffe2's CUDA device type code (no device other than the CPU is used)


def GetBlobSizeBytes(name) -> int:
    """The bytes blob ``name``'s value takes: its elements' size, and each string's length."""
    v = _blobs.fetch(current(), name)
    if isinstance(v, (bytes, str)):
        return len(v)
    arr = np.asarray(v)
    if arr.dtype.kind in "OSU":  # (a string tensor: a pointer per element, then the text)
        texts = [x if isinstance(x, (bytes, str)) else str(x) for x in arr.reshape(-1)]
        return arr.size * 8 + sum(len(t) for t in texts)
    return int(arr.nbytes)


def RunPlanInBackground(plan) -> runner.BackgroundPlan:
    """Run ``plan`` on another thread in the current workspace; poll the handle's is_done()."""
    return runner.BackgroundPlan(plan)


def GlobalInit(args=None) -> bool:
    """Caffe2 initializes its C++ runtime from command-line flags; dslc has nothing to set up."""
    return True


def CurrentWorkspace() -> str:
    """The name of the current workspace ("default" at first)."""
    return _current_name[0]


def Workspaces() -> list[str]:
    return sorted(_named)


def SwitchWorkspace(name, create_if_missing: bool = False) -> None:
    """Make workspace ``name`` current; each keeps its blobs and created nets."""
    runner.switch(name, create_if_missing)  # (Caffe2's returns nothing)


@contextlib.contextmanager
def WorkspaceGuard(workspace_name):
    """Run the block in workspace ``workspace_name`` (made if missing), then switch back to the
    workspace current before, even when the block raises."""
    previous = CurrentWorkspace()
    SwitchWorkspace(workspace_name, True)
    try:
        yield
    finally:
        SwitchWorkspace(previous)


def RootFolder() -> str:
    """Where the current workspace's relative db names are ("." : the working directory)."""
    return current().root_folder


def NumGpuDevices() -> int:
    return 0  # (dslc runs every operator on the CPU)


def GetCuDNNVersion() -> int:
    return 0  # (no cuDNN: the value Caffe2's CPU build reports)


def GetCUDAVersion() -> int:
    return 0


NumCudaDevices = NumGpuDevices


def Predictor(init_net, predict_net):
    """A model served from a workspace of its own (dslc/predictor/runner.py)."""
    return _Predictor(init_net, predict_net)


def ApplyTransform(transform_key, net):
    """The NetDef ``net`` rewritten by the transform named ``transform_key`` (dslc/driver/transforms.py)."""
    return transforms.apply(transform_key, net)


def ApplyTransformIfFaster(transform_key, net, init_net, **kwargs):
    """The transformed NetDef if it runs faster by ``improvement_threshold`` (default 1.01),
    timed here after ``init_net``; else the original."""
    return transforms.apply_if_faster(transform_key, net, init_net, **kwargs)


def StringifyProto(obj) -> str:
    """A message's bytes, or a string as it is (what Caffe2's C++ calls take)."""
    return obj if isinstance(obj, (str, bytes)) else obj.SerializeToString()


@raises_runtime_error
def RunOperatorOnce(operator) -> bool:
    """Run one OperatorDef (``core.CreateOperator(...)``, or its serialized bytes) in the current
    workspace, on the backend its device option names (devices.BackendOption; default
    DSLC_BACKEND, else interp)."""
    if isinstance(operator, (bytes, bytearray)):
        operator = parsed(caffe2_pb2.OperatorDef, operator, "the operator")
    return RunOperatorsOnce([operator])


@raises_runtime_error
def RunOperatorsOnce(operators) -> bool:
    operators = list(operators)
    if not operators:
        return True
    net = operator_net(operators)
    backend, options = devices.backend_of(operators[0].device_option
                                          if operators[0].HasField("device_option") else None)
    return current().run(net, backend, **options)


@raises_runtime_error
def GetOperatorCost(operator, blobs) -> tuple[int, int, int]:
    """``(flops, bytes_written, bytes_read)`` of one run of ``operator`` (an OperatorDef or its
    bytes) on the current values of the workspace blobs ``blobs`` (its inputs), by the op's
    cost rule (ir/cost.py); nothing runs."""
    from dslc.driver import shapes  # (it lowers: loaded on first use, as InferShapesAndTypes does)
    if isinstance(operator, (bytes, bytearray)):
        operator = parsed(caffe2_pb2.OperatorDef, operator, "the operator")
    known, _ = _values.blob_types(current(), only=[str(b) for b in blobs])
    return shapes.operator_cost(operator_net([operator]), {str(o) for o in operator.output}, known)


def RunOperatorMultiple(operator, num_runs) -> bool:
    for _ in range(int(num_runs)):
        RunOperatorOnce(operator)
    return True


def ResetWorkspace(root_folder=None) -> bool:
    """Start over with a fresh, empty current workspace (blobs and created nets go);
    ``root_folder``: where its relative db names and its ops' log files are (default "."),
    made if missing, as Caffe2's is."""
    runner.reset(root_folder)
    return True


def FeedBlob(name, value, device_option=None) -> bool:
    """Store ``value`` as blob ``name``; jobs read it. A numpy array, or anything numpy
    reads as one (a buffer, a Python scalar or list), becomes a tensor; ``str`` and ``bytes``
    a string. A CPU ``torch.Tensor`` becomes the blob itself, as in Caffe2: what a job writes
    to the blob is written into the tensor (dslc/driver/blobs.py)."""
    _blobs.feed(current(), name, value)
    return True


def CreateBlob(name) -> bool:
    """Make blob ``name`` in the current workspace, holding nothing yet (Caffe2's empty blob)."""
    current().create_blob(str(name))
    return True


def FetchBlobs(names) -> list:
    """The values of several blobs, in order (``FetchBlob`` of each)."""
    return [FetchBlob(n) for n in names]


def FetchBlob(name):
    return _blobs.fetch(current(), name)


def FetchTorch(name):
    """Blob ``name`` as a torch tensor that shares its memory: writes through either are
    the other's, ``resize_`` included (Caffe2's; needs torch, which dslc does not)."""
    return _blobs.to_torch(current().lookup(str(name)), name)


def SerializeBlob(name) -> bytes:
    """Blob ``name``'s value as Caffe2's BlobProto bytes."""
    return blobproto.serialize(str(name), _blobs.fetch(current(), name))


def DeserializeBlob(name, serialized) -> bool:
    """Set blob ``name`` to the value of BlobProto bytes (``SerializeBlob``'s)."""
    try:
        value = blobproto.deserialize(serialized)[1]
    except DSLError as e:
        e.loc = e.loc or user_location()  # (bytes from anywhere: the error is the caller's line)
        raise
    current().feed(str(name), value)
    return True


def HasBlob(name) -> bool:
    return current().has_blob(str(name))


def Blobs() -> list[str]:
    return current().names()


@raises_runtime_error
def CreateNet(net, overwrite: bool = False, input_blobs=None) -> bool:
    """Compile ``net`` in the current workspace to run it by name (``RunNet``)."""
    ws = current()
    for b in input_blobs or ():
        ws.create_blob(str(b))
    ws.create_net(net, overwrite)
    return True


@raises_runtime_error
def BenchmarkNet(name, warmup_runs, main_runs, run_individual) -> list:
    """Time the created net ``name`` as Caffe2 does: ``warmup_runs`` untimed runs, then
    ``main_runs`` timed ones, and with ``run_individual`` each op alone. Prints Caffe2's report;
    returns [ms per run, then ms per run of each op] (the ops' are 0.0 without run_individual)."""
    return current().benchmark_net(name, warmup_runs, main_runs, run_individual)


@raises_runtime_error
def RunNet(name, num_iter: int = 1, allow_fail: bool = False) -> bool:
    """Run the created net ``name`` (or Net) ``num_iter`` times."""
    return current().run_net(name, num_iter)


def GetNetName(net) -> str:
    """The name a net is created and run under: a Net's, a NetDef's, or the string itself."""
    return net_name(net)


@raises_runtime_error
def RunNetOnce(net) -> bool:
    """Run a Net (or a NetDef message) once in the current workspace."""
    return current().run(as_net(net))


@raises_runtime_error
def RunPlan(plan_or_step) -> bool:
    """Run a Plan or ExecutionStep, or a PlanDef message (or its serialized bytes)."""
    if isinstance(plan_or_step, (bytes, bytearray)):
        plan_or_step = parsed(caffe2_pb2.PlanDef, plan_or_step, "the plan")
    if isinstance(plan_or_step, caffe2_pb2.PlanDef):
        plan_or_step = plan_from_message(plan_or_step)
    return current().run(plan_or_step)


def InferShapesAndTypes(nets, blob_dimensions=None, nets_proto=False, blob_types=None):
    """``(shapes, types)`` of the blobs ``nets`` (core.Net objects, run in order) write and
    of those they start from, keyed by blob name: dims as a list, and Caffe2's dtype code
    (``caffe2_pb2.TensorProto.FLOAT``...). They start from the current workspace's blobs,
    or, given ``blob_dimensions`` (name -> dims), from those blobs only, typed by
    ``blob_types`` (name -> code; float where missing). Blobs of unknown shape are left out.
    """
    from dslc.driver import shapes  # (it lowers: loaded on first use, not by every `import workspace`)
    if nets_proto:
        raise DSLError("InferShapesAndTypes(nets_proto=True): dslc has no NetDef protos to read",
                       user_location(), "pass the core.Net objects with nets_proto=False")
    if blob_dimensions is None:
        if blob_types is not None:
            raise DSLError("InferShapesAndTypes: blob_types needs blob_dimensions", user_location(),
                           "give the dims of the same blobs (blob_dimensions={name: [dims]})")
        known, created = _values.blob_types(current())
    else:
        known, created = shapes.types_from_map(blob_dimensions, blob_types), frozenset()
    return shapes.infer_shapes_and_types(nets, known, created)


class _CurrentBlobs:
    """``workspace.blobs``: the current workspace's blobs as a mapping of name -> value."""

    def __getitem__(self, name):
        return FetchBlob(name)

    def __setitem__(self, name, value):
        FeedBlob(name, value)

    def __contains__(self, name):
        return HasBlob(name)

    def __iter__(self):
        return iter(Blobs())

    def __len__(self):
        return len(Blobs())


blobs = _CurrentBlobs()


def __getattr__(name):
    if name == "_immediate_root_folder":  # (Caffe2's module variable, read by its tests)
        return _immediate.root_folder()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
