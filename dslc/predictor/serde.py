"""A protobuf message to bytes and back (what a predictor stores its MetaNetDef as)."""


def serialize_protobuf_struct(protobuf_struct):
    return protobuf_struct.SerializeToString()


def deserialize_protobuf_struct(serialized_protobuf, struct_type):
    out = struct_type()
    out.ParseFromString(serialized_protobuf)
    return out
