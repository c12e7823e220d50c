"""Caffe2's ``caffe2.proto.caffe2_pb2``: the runtime's protobuf messages (NetDef, OperatorDef,
TensorProto, ... and the device codes ``CPU``, ``CUDA``, ...) under Caffe2's module name.
They are declared once, in runtime/proto/caffe2.py."""
from dslc.runtime.proto.caffe2 import *  # noqa: F401,F403
from dslc.runtime.proto.caffe2 import __all__  # noqa: F401
