"""Caffe2's ``metanet_pb2``: the messages describing an exported predictor (its nets and
blob lists), built with dslc's other Caffe2 messages (runtime/proto/caffe2.py)."""
from dslc.runtime.proto.caffe2 import BlobsMap, MetaNetDef, ModelInfo, NetsMap, PlansMap, StringMap

__all__ = ["BlobsMap", "MetaNetDef", "ModelInfo", "NetsMap", "PlansMap", "StringMap"]
