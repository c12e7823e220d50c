"""Caffe2's ``hip_test_util``: whether a test's devices include a ROCm GPU (never, in dslc)."""
from __future__ import annotations

from dslc.proto import caffe2_pb2


def run_in_hip(gc, dc) -> bool:
    return gc.device_type == caffe2_pb2.HIP or caffe2_pb2.HIP in {d.device_type for d in dc}
