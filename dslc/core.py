"""Nets, blob references and execution steps: Caffe2's ``core`` module, as records.

Nothing runs here. A Net is a list of op records (type, input and output blob
names, arguments, the user's file:line); steps are trees of nets and steps.
Names follow Caffe2's rules so that programs and tests that spell blob names
keep working (see docs/differences.md for where dslc departs from them).

This module gathers the names Caffe2 code reaches as ``core.<name>``; they live in
  dslc/trace/oprecord.py    OpRecord, DataType, which names are operators
  dslc/trace/blobref.py     NameScope, BlobReference
  dslc/trace/net_record.py  recording ops into a Net, CreateOperator
  dslc/trace/net.py         Net: names, external inputs/outputs, composition, Clone
  dslc/trace/net_ssa.py     get_ssa, get_undefined_blobs (a net's blobs by version)
  dslc/trace/steps.py       ExecutionStep, execution_step, Plan
  dslc/autodiff/gradient_registry.py  GradientRegistry, GradientSlice
"""
# ruff: noqa: F401  (every import here is a re-export)
from dslc import workspace  # Caffe2 code reaches it as core.workspace
from dslc.trace.blobref import (BlobArithmeticError, BlobReference, CurrentNameScope, NameScope, NoNetError,
                          ScopedBlobReference, ScopedName)
from dslc.trace.devices import CurrentDeviceScope, DeviceOption, DeviceScope, device_option_equal
from dslc.autodiff.gradient_registry import IR, GradientRegistry, GradientSlice
from dslc.trace.net import Net
from dslc.trace.net_ssa import get_output_producers, get_ssa, get_undefined_blobs
from dslc.trace.net_record import CreateOperator, CreatePythonOperator, GetattrShortcut, _OpRecorder
from dslc.trace.oprecord import (ALIASES, FILL_ALIASES, SPECIAL_ARGS, DataType, IsOperator, IsOperatorWithEngine,
                           OpRecord, is_operator)
from dslc.trace.steps import ExecutionStep, Plan, execution_step, iter_nets, scoped_execution_step, to_execution_step
from dslc.ir.opdef import OPS
from dslc.proto import caffe2_pb2
from dslc.workspace import C  # Caffe2's core.C is its workspace.C


def IsGPUDeviceType(device_type) -> bool:
    """Whether a device type code is a GPU's (CUDA, HIP); dslc runs on neither."""
    return device_type in (caffe2_pb2.CUDA, caffe2_pb2.HIP)


def InferOpBlobDevicesAsDict(op) -> tuple[dict, dict]:
    """({input: device option}, {output: device option}): every blob of ``op`` on its device."""
    option = op.device_option if op.HasField("device_option") else caffe2_pb2.DeviceOption()
    return {b: option for b in op.input}, {b: option for b in op.output}


def InferOpBlobDevices(op) -> tuple[list, list]:
    ins, outs = InferOpBlobDevicesAsDict(op)
    return list(ins.values()), list(outs.values())


def InjectCrossDeviceCopies(net, blob_to_device=None, blob_remap=None, placeHolderOps=None) -> tuple:
    """``(new net, blob_to_device)``: Caffe2 inserts a copy op wherever a blob crosses devices.
    dslc runs every device's operators on the CPU, where no copy is needed: the new net
    (``<name>_cross_device``) has ``net``'s ops as they are, and ``blob_to_device`` (the given
    map, added to) gives each blob an op writes that op's device option, and a blob read
    before any op writes it the net's (as Caffe2 gives an external input it was not told of)."""
    new_net = net.Clone(net.Name() + "_cross_device", keep_schema=True)
    proto = new_net.Proto()
    net_option = proto.device_option if proto.HasField("device_option") else caffe2_pb2.DeviceOption()
    devices = dict(blob_to_device or {})
    for op in proto.op:
        for b in op.input:
            devices.setdefault(b, net_option)
        devices.update(InferOpBlobDevicesAsDict(op)[1])
    return new_net, devices


def _registered_operators() -> set:
    return {n for n in ({d.name for d in OPS} | ALIASES | set(OPS.aliases)) if is_operator(n)}


def RefreshRegisteredOperators() -> None:
    global _REGISTERED_OPERATORS
    _REGISTERED_OPERATORS = _registered_operators()


_REGISTERED_OPERATORS = _registered_operators()


def GlobalInit(args=None) -> bool:
    """Caffe2 initializes its C++ runtime from command-line flags; dslc has nothing to set up."""
    return True
