"""Caffe2's device options and ``DeviceScope``: accepted and recorded, never acted on.

dslc runs every operator on the CPU (docs/differences.md). Code written for Caffe2
still builds device options, opens device scopes and compares options; those calls
work and ``core.CreateOperator`` shows the option an operator would have had.
"""
from __future__ import annotations

import contextlib
import threading

from dslc.proto import caffe2_pb2


class _DeviceState(threading.local):
    option = None  # each thread starts outside any DeviceScope


_state = _DeviceState()


def DeviceOption(device_type, device_id=0, random_seed=None, node_name=None, numa_node_id=None,
                 extra_info=None) -> caffe2_pb2.DeviceOption:
    opt = caffe2_pb2.DeviceOption(device_type=device_type, device_id=device_id)
    if random_seed is not None:
        opt.random_seed = random_seed
    if node_name is not None:
        opt.node_name = node_name
    if numa_node_id is not None:
        opt.numa_node_id = numa_node_id
    if extra_info is not None:
        opt.extra_info = list(extra_info)
    return opt


def CurrentDeviceScope():
    return _state.option


@contextlib.contextmanager
def DeviceScope(scope, node_name=None):
    """Operators made inside get ``scope`` (a DeviceOption, or a device type code) as their option."""
    opt = scope if isinstance(scope, caffe2_pb2.DeviceOption) else DeviceOption(scope)
    if node_name is not None:
        opt = caffe2_pb2.DeviceOption(**{**vars(opt), "node_name": node_name})
    saved = _state.option
    _state.option = opt
    try:
        yield
    finally:
        _state.option = saved


def device_option_equal(opt1, opt2, ignore_node_name=True, ignore_random_seed=True) -> bool:
    """Whether two options name the same device; two CPU options are equal whatever their ids."""
    if not opt1 or not opt2:
        return opt1 == opt2
    if not ignore_node_name and opt1.node_name != opt2.node_name:
        return False
    if not ignore_random_seed and opt1.random_seed != opt2.random_seed:
        return False
    if opt1.device_type == caffe2_pb2.CPU or opt2.device_type == caffe2_pb2.CPU:
        return opt1.device_type == opt2.device_type
    return opt1.device_type == opt2.device_type and opt1.device_id == opt2.device_id
