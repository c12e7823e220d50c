"""Caffe2's ``mkl_test_util``: the op-test devices plus MKL-DNN's, which dslc does not have
(``workspace.C.has_mkldnn`` is False, so tests that need it skip themselves, as on a
Caffe2 build without MKL-DNN)."""
from __future__ import annotations

import hypothesis.strategies as st

from dslc import hypothesis_test_util as hu
from dslc.proto import caffe2_pb2

cpu_do = hu.cpu_do
gpu_do = hu.gpu_do
mkl_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.MKLDNN)
device_options = list(hu.device_options)


def device_checker_device_options():
    return st.just(device_options)


def gradient_checker_device_option():
    return st.sampled_from(device_options)


gcs = dict(gc=gradient_checker_device_option(), dc=device_checker_device_options())
