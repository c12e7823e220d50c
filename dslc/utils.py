"""Caffe2's ``utils``: arguments and tensors as protobuf messages, and small helpers.

Arguments are made by the same mapping ``net.Proto()`` uses (dslc/trace/netdef.py).
"""
from __future__ import annotations

import copy
import functools
import pdb
import sys

import numpy as np

from dslc.trace import netdef
from dslc.proto import caffe2_pb2
from dslc import workspace
from dslc import core

OPTIMIZER_ITERATION_NAME = "optimizer_iteration"
ITERATION_MUTEX_NAME = "iteration_mutex"

# numpy dtype <-> TensorProto: the field its values go in, and the data type code
_TENSOR_FIELDS = {
    np.dtype(np.float32): ("float_data", caffe2_pb2.TensorProto.FLOAT),
    np.dtype(np.float64): ("double_data", caffe2_pb2.TensorProto.DOUBLE),
    np.dtype(np.int64): ("int64_data", caffe2_pb2.TensorProto.INT64),
    np.dtype(np.int32): ("int32_data", caffe2_pb2.TensorProto.INT32),
    np.dtype(np.int16): ("int32_data", caffe2_pb2.TensorProto.INT16),
    np.dtype(np.uint16): ("int32_data", caffe2_pb2.TensorProto.UINT16),
    np.dtype(np.int8): ("int32_data", caffe2_pb2.TensorProto.INT8),
    np.dtype(np.uint8): ("int32_data", caffe2_pb2.TensorProto.UINT8),
}
_BY_CODE = {code: (field, dtype) for dtype, (field, code) in _TENSOR_FIELDS.items()}


def MakeArgument(key, value):
    """An Argument message named ``key`` holding ``value`` (by its type: i, f, s, ints ...)."""
    arg = caffe2_pb2.Argument()
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        arg.name = key
        arg.floats.extend(value.reshape(-1).tolist())
        return arg
    try:
        netdef.set_argument(arg, key, value)
    except netdef.ProtoError as e:
        raise ValueError(f"unknown argument type: key={key} value={value!r}") from e
    return arg


def ArgsToDict(args) -> dict:
    """{name: value} of Argument messages, values as the message holds them (bytes for s)."""
    out = {}
    for arg in args:
        for field in ("f", "i", "s", "n", "t"):
            if arg.HasField(field):
                out[arg.name] = getattr(arg, field)
                break
        else:
            for field in ("floats", "ints", "strings", "nets", "tensors"):
                values = getattr(arg, field)
                if len(values):
                    out[arg.name] = list(values)
                    break
            else:
                out[arg.name] = []
    return out


def NumpyArrayToCaffe2Tensor(arr, name=None):
    """A TensorProto holding ``arr`` (float, double and integer dtypes)."""
    arr = np.asarray(arr)
    got = _TENSOR_FIELDS.get(arr.dtype)
    if got is None:
        raise RuntimeError(f"Numpy data type not supported yet: {arr.dtype}")
    field, code = got
    tensor = caffe2_pb2.TensorProto(data_type=code)
    tensor.dims.extend(arr.shape)
    if name:
        tensor.name = name
    getattr(tensor, field).extend(arr.reshape(-1).tolist())
    return tensor


def Caffe2TensorToNumpyArray(tensor):
    got = _BY_CODE.get(tensor.data_type)
    if got is None:
        raise RuntimeError(f"Tensor data type not supported yet: {tensor.data_type}")
    field, dtype = got
    return np.asarray(getattr(tensor, field), dtype=dtype).reshape(tuple(tensor.dims))


def OpAlmostEqual(op_a, op_b, ignore_fields=None) -> bool:
    """Whether two OperatorDefs are equal once the fields ``ignore_fields`` are cleared."""
    ignore = ignore_fields or []
    ignore = [ignore] if isinstance(ignore, str) else list(ignore)

    def clean(op):
        op = copy.deepcopy(op)
        for f in ignore:
            op.ClearField(f)
        return op

    a, b = clean(op_a), clean(op_b)
    return a == b or str(a) == str(b)


def TryReadProtoWithClass(cls, s):
    """A ``cls`` message parsed from ``s``: binary first, then text format."""
    from google.protobuf import text_format
    obj = cls()
    try:
        text_format.Parse(s, obj)
        return obj
    except (text_format.ParseError, UnicodeDecodeError, TypeError):
        obj.ParseFromString(s)
        return obj


def GetContentFromProto(obj, function_map):
    """``function_map[type of obj](obj)`` for the first type ``obj`` is an instance of."""
    for cls, function in function_map.items():
        if type(obj) is cls:
            return function(obj)


def GetContentFromProtoString(s, function_map):
    for cls, function in function_map.items():
        try:
            obj = TryReadProtoWithClass(cls, s)
            return function(obj)
        except Exception:
            continue
    return None


def ResetBlobs(blobs) -> None:
    """Empty the blobs named: they stay in the current workspace, holding nothing."""
    ws = workspace.current()
    for b in blobs:
        cell = ws.lookup(str(b))
        if cell is not None:
            cell.v = None


def raiseIfNotEqual(a, b, msg):
    if a != b:
        raise Exception(f"{msg}. {a} != {b}")


class DebugMode:
    """``DebugMode.run(main)``: on an unhandled exception, open pdb where it was raised."""

    @classmethod
    def run(cls, func):
        try:
            return func()
        except KeyboardInterrupt:
            raise
        except Exception:
            print('Entering interactive debugger. Type "bt" to print the full stacktrace.')
            print(sys.exc_info()[1])
            pdb.post_mortem()
            sys.exit(1)


def debug(f):
    """Decorate ``f`` to run under DebugMode."""
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return DebugMode.run(lambda: f(*args, **kwargs))
    return wrapper


def BuildUniqueMutexIter(init_net, net, iter=None, iter_mutex=None, iter_val=0):
    """The iteration counter blob ``iter`` (made once, in ``init_net``, with its mutex;
    ``net`` counts it up by one per run)."""
    iter = iter if iter is not None else OPTIMIZER_ITERATION_NAME
    iter_mutex = iter_mutex if iter_mutex is not None else ITERATION_MUTEX_NAME
    if init_net.BlobIsDefined(iter):
        return core.BlobReference(iter, init_net)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, extra_info=["device_type_override:cpu"])):
        iteration = init_net.ConstantFill([], iter, shape=[1], value=iter_val, dtype=core.DataType.INT64)
        mutex = init_net.CreateMutex([], [iter_mutex])
        net.AtomicIter([mutex, iteration], [iteration])
    return iteration


def EnumClassKeyVals(cls) -> dict:
    """{NAME: value} of a class's upper-case string attributes (values must be unique)."""
    enum = {}
    for k in dir(cls):
        if k == k.upper():
            v = getattr(cls, k)
            if isinstance(v, str):
                assert v not in enum.values(), f"duplicate value {v!r} in {cls.__name__}"
                enum[k] = v
    return enum


def NHWC2NCHW(tensor):
    assert tensor.ndim >= 1
    return tensor.transpose((0, tensor.ndim - 1) + tuple(range(1, tensor.ndim - 1)))


def NCHW2NHWC(tensor):
    assert tensor.ndim >= 2
    return tensor.transpose((0,) + tuple(range(2, tensor.ndim)) + (1,))
