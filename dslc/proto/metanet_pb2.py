"""Caffe2's ``metanet_pb2``: the messages describing an exported predictor (its nets and
blob lists), built with dslc's other Caffe2 messages (dslc/proto/caffe2_pb2.py)."""
from dslc.proto.caffe2_pb2 import BlobsMap, MetaNetDef, ModelInfo, NetsMap, PlansMap, StringMap

__all__ = ["BlobsMap", "MetaNetDef", "ModelInfo", "NetsMap", "PlansMap", "StringMap"]
