"""Device codes, ``DeviceOption`` and ``TensorProto``'s data type codes, for code written
against ``caffe2.proto.caffe2_pb2``.

dslc runs everything on the CPU and has no protobuf messages (docs/differences.md):
a DeviceOption is a plain record that operators and scopes accept and ignore.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Caffe2's DeviceTypeProto codes
CPU, CUDA, MKLDNN, OPENGL, OPENCL, IDEEP, HIP = 0, 1, 2, 3, 4, 5, 6
PROTO_CPU, PROTO_CUDA = CPU, CUDA


@dataclass
class DeviceOption:
    """Where an operator would run; dslc keeps it and runs on the CPU anyway."""

    device_type: int = CPU
    device_id: int = 0
    random_seed: int = 0
    node_name: str = ""
    numa_node_id: int = 0
    extra_info: list = field(default_factory=list)


class TensorProto:
    """Only the data type codes of Caffe2's TensorProto (``TensorProto.FLOAT``, and
    ``TensorProto.DataType.FLOAT``): ``core.DataType`` and the shape reports use them."""

    UNDEFINED, FLOAT, INT32, BYTE, STRING, BOOL, UINT8, INT8 = 0, 1, 2, 3, 4, 5, 6, 7
    UINT16, INT16, INT64, FLOAT16, DOUBLE = 8, 9, 10, 12, 13


TensorProto.DataType = TensorProto
