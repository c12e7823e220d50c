"""Process-wide name registries, as in Caffe2: net names and unnamed step names.

Net names are made unique against every net created so far (``x``, ``x_1``, ``x_2``);
programs and tests that spell auto-generated blob names depend on this.
``reset()`` gives a fresh start (each job file and each test begins with one).
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_net_names: set[str] = set()
_next_suffix: dict[str, int] = {}  # base -> the suffix to try first (all smaller ones are taken)
_step_count = [0]
_instances: dict[str, int] = {}  # class name -> instances made (Caffe2 names optimizers' blobs by it)


def unique_net_name(prefix: str, requested) -> str:
    """``prefix/requested`` (either part may be empty; both: ``net``), made unique."""
    if requested is None:  # (the common case: a builder's next net)
        base = prefix or "net"
    else:
        requested = str(requested)
        base = f"{prefix}/{requested}" if prefix and requested else prefix or requested or "net"
    _lock.acquire()  # (not `with`: this runs for every net, and acquire/release cost half as much)
    try:
        name = base
        if name in _net_names:
            k = _next_suffix.get(base, 1)
            name = f"{base}_{k}"
            while name in _net_names:
                k += 1
                name = f"{base}_{k}"
            _next_suffix[base] = k + 1
        _net_names.add(name)
    finally:
        _lock.release()
    return name


def unique_step_name() -> str:
    with _lock:
        k = _step_count[0]
        _step_count[0] += 1
    return "step" if k == 0 else f"step_{k}"


_control_steps: set[str] = set()
_control_suffix = [1]  # one counter for every name, as Caffe2's control module keeps


def unique_control_step_name(control: str, base: str) -> str:
    """``base/control``, else ``base/control_<k>`` with a process-wide k (dslc.control's step names)."""
    with _lock:
        joined = f"{base}/{control}"
        name = joined
        while name in _control_steps:
            name = f"{joined}_{_control_suffix[0]}"
            _control_suffix[0] += 1
        _control_steps.add(name)
    return name


def next_instance(kind: str) -> int:
    """0, 1, 2 ... for successive instances of ``kind`` (``SgdOptimizer_0_lr_cpu`` ...)."""
    with _lock:
        k = _instances.get(kind, 0)
        _instances[kind] = k + 1
    return k


def instance_count(kind: str) -> int:
    """How many instances of ``kind`` were numbered so far (the next one's number)."""
    with _lock:
        return _instances.get(kind, 0)


def reset() -> None:
    """Forget every name handed out (a new process, as far as naming goes)."""
    with _lock:
        _net_names.clear()
        _next_suffix.clear()
        _step_count[0] = 0
        _instances.clear()
        _control_steps.clear()
        _control_suffix[0] = 1
