"""Caffe2's protobuf messages (those of ``caffe2.proto.caffe2_pb2``), as real protobuf messages.

Field names, numbers, types and defaults are Caffe2's (read off the real Caffe2's
descriptors), so a NetDef serialized here parses in Caffe2 and back. dslc itself keeps
nets as op records; ``net.Proto()`` builds a NetDef from them, and nets made from a
NetDef (``core.Net(netdef)``, ``workspace.CreateNet(netdef)``) read its ops back
(dslc/trace/netdef.py).

Besides the messages and enums, the device codes ``CPU``, ``CUDA``, ... that Caffe2's
Python package adds to this module are here too. The runtime reads and writes blobs and DBs
with these; the Caffe2-named surface ``dslc.proto.caffe2_pb2`` (what ``caffe2.proto.caffe2_pb2``
resolves to) re-exports ``__all__``.
"""
from __future__ import annotations

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from .messages import Message, build

_DEVICE_TYPES = ["PROTO_CPU", "PROTO_CUDA", "PROTO_MKLDNN", "PROTO_OPENGL", "PROTO_OPENCL", "PROTO_IDEEP",
                 "PROTO_HIP", "PROTO_FPGA", "PROTO_ORT", "PROTO_XLA", "PROTO_MLC",
                 "PROTO_COMPILE_TIME_MAX_DEVICE_TYPES"]

_SCHEMA = [
    Message("TensorProto", [
        ("repeated", "dims", 1, "int64"),
        ("optional", "data_type", 2, "DataType", "FLOAT"),
        ("optional", "data_format", 15, "uint32", 0),
        ("packed", "float_data", 3, "float"),
        ("packed", "int32_data", 4, "int32"),
        ("optional", "byte_data", 5, "bytes"),
        ("repeated", "string_data", 6, "bytes"),
        ("packed", "double_data", 9, "double"),
        ("packed", "int64_data", 10, "int64"),
        ("optional", "raw_data", 13, "bytes"),
        ("optional", "name", 7, "string"),
        ("optional", "device_detail", 8, "DeviceOption"),
        ("optional", "segment", 11, "Segment"),
    ], enums={
        "DataType": ["UNDEFINED", "FLOAT", "INT32", "BYTE", "STRING", "BOOL", "UINT8", "INT8", "UINT16",
                     "INT16", "INT64", ("FLOAT16", 12), "DOUBLE", "ZERO_COLLISION_HASH", "REBATCHING_BUFFER"],
        "SerializationFormat": ["FMT_PROTOBUF", "FMT_BFLOAT16"],
    }, nested=[Message("Segment", [("required", "begin", 1, "int64"), ("required", "end", 2, "int64")])]),
    Message("QTensorProto", [
        ("repeated", "dims", 1, "int64"),
        ("required", "precision", 2, "int32"),
        ("required", "scale", 3, "double"),
        ("required", "bias", 4, "double"),
        ("required", "is_signed", 5, "bool"),
        ("packed", "data", 6, "int32"),
        ("optional", "name", 7, "string"),
        ("optional", "data_type", 8, "TensorProto.DataType", "INT32"),
        ("repeated", "scales", 9, "double"),
        ("repeated", "biases", 10, "double"),
        ("optional", "axis", 11, "int32"),
        ("optional", "is_multiparam", 12, "bool", False),
    ]),
    Message("TensorProtos", [("repeated", "protos", 1, "TensorProto")]),
    Message("TensorShape", [
        ("repeated", "dims", 1, "int64"),
        ("optional", "data_type", 2, "TensorProto.DataType", "FLOAT"),
        ("repeated", "unknown_dims", 3, "int32"),
        ("optional", "unknown_shape", 4, "bool", False),
        ("optional", "name", 5, "string"),
    ]),
    Message("TensorShapes", [("repeated", "shapes", 1, "TensorShape")]),
    Message("TensorBoundShape", [
        ("optional", "shape", 1, "TensorShape"),
        ("repeated", "dim_type", 2, "DimType"),
        ("optional", "name", 3, "string"),
        ("optional", "shape_is_final", 4, "bool"),
    ], enums={"DimType": ["UNKNOWN", "CONSTANT", "BATCH", "BATCH_OF_FEATURE_MAX",
                          "BATCH_OF_FEATURE_MAX_DEFAULT", "FEATURE_MAX", "FEATURE_MAX_DEFAULT"]}),
    Message("TensorBoundShapes", [
        ("repeated", "shapes", 1, "TensorBoundShape"),
        ("optional", "max_batch_size", 2, "int64"),
        ("optional", "max_feature_len", 3, "int64"),
    ]),
    Message("AOTConfig", [
        ("required", "max_batch_size", 1, "int64"),
        ("required", "max_seq_size", 2, "int64"),
        ("required", "in_batch_broadcast", 3, "bool"),
        ("optional", "onnxifi_blacklist_ops", 4, "string"),
        ("optional", "onnxifi_min_ops", 5, "int32"),
    ]),
    Message("Argument", [
        ("optional", "name", 1, "string"),
        ("optional", "f", 2, "float"),
        ("optional", "i", 3, "int64"),
        ("optional", "s", 4, "bytes"),
        ("optional", "t", 10, "TensorProto"),
        ("optional", "n", 8, "NetDef"),
        ("repeated", "floats", 5, "float"),
        ("repeated", "ints", 6, "int64"),
        ("repeated", "strings", 7, "bytes"),
        ("repeated", "tensors", 11, "TensorProto"),
        ("repeated", "nets", 9, "NetDef"),
        ("repeated", "qtensors", 12, "QTensorProto"),
    ]),
    Message("DeviceOption", [
        ("optional", "device_type", 1, "int32", 0),
        ("optional", "device_id", 2, "int32"),
        ("optional", "random_seed", 3, "uint32"),
        ("optional", "node_name", 4, "string"),
        ("optional", "numa_node_id", 5, "int32"),
        ("repeated", "extra_info", 6, "string"),
    ]),
    Message("OperatorDef", [
        ("repeated", "input", 1, "string"),
        ("repeated", "output", 2, "string"),
        ("optional", "name", 3, "string"),
        ("optional", "type", 4, "string"),
        ("repeated", "arg", 5, "Argument"),
        ("optional", "device_option", 6, "DeviceOption"),
        ("optional", "engine", 7, "string"),
        ("repeated", "control_input", 8, "string"),
        ("optional", "is_gradient_op", 9, "bool", False),
        ("optional", "debug_info", 10, "string"),
        ("optional", "domain", 11, "string"),
        ("optional", "op_version", 12, "int64"),
    ]),
    Message("MapFieldEntry", [("required", "key", 1, "string"), ("required", "val", 2, "string")]),
    Message("BackendOptions", [
        ("required", "backend_name", 1, "string"),
        ("repeated", "option", 2, "MapFieldEntry"),
    ]),
    Message("PartitionInfo", [
        ("required", "name", 1, "string"),
        ("repeated", "device_id", 2, "int32"),
        ("optional", "extra_info", 3, "string"),
        ("repeated", "backend_options", 4, "BackendOptions"),
    ]),
    Message("NetDef", [
        ("optional", "name", 1, "string"),
        ("repeated", "op", 2, "OperatorDef"),
        ("optional", "type", 3, "string"),
        ("optional", "num_workers", 4, "int32"),
        ("optional", "device_option", 5, "DeviceOption"),
        ("repeated", "arg", 6, "Argument"),
        ("repeated", "external_input", 7, "string"),
        ("repeated", "external_output", 8, "string"),
        ("repeated", "partition_info", 9, "PartitionInfo"),
    ]),
    Message("ExecutionStep", [
        ("optional", "name", 1, "string"),
        ("repeated", "substep", 2, "ExecutionStep"),
        ("repeated", "network", 3, "string"),
        ("optional", "num_iter", 4, "int64"),
        ("optional", "criteria_network", 5, "string"),
        ("optional", "report_net", 7, "string"),
        ("optional", "report_interval", 8, "int32"),
        ("optional", "run_every_ms", 11, "int64"),
        ("optional", "concurrent_substeps", 6, "bool"),
        ("optional", "should_stop_blob", 9, "string"),
        ("optional", "only_once", 10, "bool"),
        ("optional", "create_workspace", 12, "bool"),
        ("optional", "num_concurrent_instances", 13, "int32"),
    ]),
    Message("PlanDef", [
        ("optional", "name", 1, "string"),
        ("repeated", "network", 2, "NetDef"),
        ("repeated", "execution_step", 3, "ExecutionStep"),
    ]),
    Message("BlobProto", [
        ("optional", "name", 1, "string"),
        ("optional", "type", 2, "string"),
        ("optional", "tensor", 3, "TensorProto"),
        ("optional", "content", 4, "bytes"),
        ("optional", "qtensor", 5, "QTensorProto"),
        ("optional", "content_num_chunks", 6, "int32"),
        ("optional", "content_chunk_id", 7, "int32"),
    ]),
    Message("DBReaderProto", [
        ("optional", "name", 1, "string"),
        ("optional", "source", 2, "string"),
        ("optional", "db_type", 3, "string"),
        ("optional", "key", 4, "string"),
    ]),
    Message("BlobSerializationOptions", [
        ("optional", "blob_name_regex", 1, "string"),
        ("optional", "chunk_size", 2, "int64"),
        ("optional", "float_format", 3, "FloatFormat"),
    ], enums={"FloatFormat": ["FLOAT_DEFAULT", "FLOAT_PROTOBUF", "FLOAT_BFLOAT16"]}),
    Message("SerializationOptions", [("repeated", "options", 1, "BlobSerializationOptions")]),
    # metanet.proto's messages (a predictor's nets and blob lists: dslc/predictor/), in
    # package caffe2 as there, so they serialize as Caffe2's
    Message("ModelInfo", [
        ("optional", "project", 1, "string"), ("optional", "modelClass", 2, "string"),
        ("optional", "version", 3, "string"), ("optional", "predictorType", 4, "string", "SINGLE_PREDICTOR"),
        ("optional", "modelId", 5, "string"),
    ]),
    Message("BlobsMap", [("required", "key", 1, "string"), ("repeated", "value", 2, "string")]),
    Message("NetsMap", [("required", "key", 1, "string"), ("required", "value", 2, "NetDef")]),
    Message("PlansMap", [("required", "key", 1, "string"), ("required", "value", 2, "PlanDef")]),
    Message("StringMap", [("required", "key", 1, "string"), ("required", "value", 2, "string")]),
    Message("MetaNetDef", [
        ("repeated", "blobs", 1, "BlobsMap"), ("repeated", "nets", 2, "NetsMap"),
        ("optional", "modelInfo", 3, "ModelInfo"), ("repeated", "plans", 4, "PlansMap"),
        ("repeated", "applicationSpecificInfo", 5, "StringMap"), ("repeated", "blobsOrder", 6, "string"),
        ("repeated", "preLoadBlobs", 7, "string"), ("optional", "tensorBoundShapes", 8, "TensorBoundShapes"),
        ("repeated", "requestOnlyEmbeddings", 9, "string"), ("optional", "aotConfig", 10, "AOTConfig"),
    ]),
]

_built = build("caffe2", "caffe2/proto/caffe2.proto", {"DeviceTypeProto": _DEVICE_TYPES}, _SCHEMA)

TensorProto = _built["TensorProto"]
QTensorProto = _built["QTensorProto"]
TensorProtos = _built["TensorProtos"]
TensorShape = _built["TensorShape"]
TensorShapes = _built["TensorShapes"]
TensorBoundShape = _built["TensorBoundShape"]
TensorBoundShapes = _built["TensorBoundShapes"]
AOTConfig = _built["AOTConfig"]
Argument = _built["Argument"]
DeviceOption = _built["DeviceOption"]
OperatorDef = _built["OperatorDef"]
MapFieldEntry = _built["MapFieldEntry"]
BackendOptions = _built["BackendOptions"]
PartitionInfo = _built["PartitionInfo"]
NetDef = _built["NetDef"]
ExecutionStep = _built["ExecutionStep"]
PlanDef = _built["PlanDef"]
BlobProto = _built["BlobProto"]
DBReaderProto = _built["DBReaderProto"]
BlobSerializationOptions = _built["BlobSerializationOptions"]
SerializationOptions = _built["SerializationOptions"]
ModelInfo, BlobsMap, NetsMap = _built["ModelInfo"], _built["BlobsMap"], _built["NetsMap"]
PlansMap, StringMap, MetaNetDef = _built["PlansMap"], _built["StringMap"], _built["MetaNetDef"]
DESCRIPTOR = TensorProto.DESCRIPTOR.file

DeviceTypeProto = EnumTypeWrapper(_built["DeviceTypeProto"])
(PROTO_CPU, PROTO_CUDA, PROTO_MKLDNN, PROTO_OPENGL, PROTO_OPENCL, PROTO_IDEEP, PROTO_HIP, PROTO_FPGA,
 PROTO_ORT, PROTO_XLA, PROTO_MLC, PROTO_COMPILE_TIME_MAX_DEVICE_TYPES) = range(12)
# (Caffe2's Python package adds these short names to the module)
CPU, CUDA, MKLDNN, OPENGL, OPENCL, IDEEP, HIP = PROTO_CPU, PROTO_CUDA, PROTO_MKLDNN, PROTO_OPENGL, \
    PROTO_OPENCL, PROTO_IDEEP, PROTO_HIP

# what the Caffe2-named module (dslc/proto/caffe2_pb2.py) re-exports: every message, enum and code
__all__ = [*_built, "DESCRIPTOR", *_DEVICE_TYPES, "CPU", "CUDA", "MKLDNN", "OPENGL", "OPENCL", "IDEEP", "HIP"]
