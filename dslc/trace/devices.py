"""Caffe2's device options and ``DeviceScope``: accepted and recorded, never acted on.

dslc runs every operator on the CPU (docs/differences.md). Code written for Caffe2
still builds device options, opens device scopes and compares options; those calls
work and ``core.CreateOperator`` shows the option an operator would have had.
"""
from __future__ import annotations

import contextlib
import threading

from dslc.runtime.proto import caffe2 as caffe2_pb2


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
        opt.extra_info.extend(extra_info)
    return opt


def CurrentDeviceScope():
    return _state.option


@contextlib.contextmanager
def DeviceScope(scope, node_name=None):
    """Operators made inside get ``scope`` (a DeviceOption, or a device type code) as their
    option. A nested scope keeps the outer one's node name unless it names its own, and
    adds the outer one's extra_info to its own (sorted), as Caffe2's does."""
    opt = caffe2_pb2.DeviceOption()
    if isinstance(scope, caffe2_pb2.DeviceOption):
        opt.CopyFrom(scope)
    elif scope:
        opt.device_type = int(scope)
    if node_name:
        opt.node_name = node_name
    saved = _state.option
    if saved is not None:
        if saved.HasField("node_name") and not opt.HasField("node_name"):
            opt.node_name = saved.node_name
        opt.extra_info.extend(saved.extra_info)
    opt.extra_info.sort()
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


# A device option can name the dslc backend an operator runs on (``RunOperatorOnce``, the
# op-test harness's devices): extra_info "dslc_backend=numba", with the backend's options
# as further "key=value" entries (numbers where they parse as one).
_BACKEND_KEY = "dslc_backend"


def BackendOption(backend: str, **options) -> caffe2_pb2.DeviceOption:
    """A CPU device option that runs operators on ``backend`` (with the backend's ``options``)."""
    return DeviceOption(caffe2_pb2.CPU, extra_info=[f"{_BACKEND_KEY}={backend}"] +
                        [f"{k}={v}" for k, v in sorted(options.items())])


def backend_of(option) -> tuple[str | None, dict]:
    """(backend name or None for the default, its options) named by a device option."""
    if option is None or not len(option.extra_info):
        return None, {}
    pairs = dict(e.split("=", 1) for e in option.extra_info if "=" in e)
    backend = pairs.pop(_BACKEND_KEY, None)
    if backend is None:
        return None, {}
    return backend, {k: _number(v) for k, v in pairs.items()}


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
