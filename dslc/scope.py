"""Caffe2's ``scope`` module: the name and device scopes ops are recorded under.

The scopes themselves live in dslc/trace/blobref.py (NameScope) and dslc/trace/devices.py
(DeviceScope); this module gathers them under Caffe2's names and adds the two
"empty" scopes, which clear a scope for the block they cover.
"""
# ruff: noqa: F401  (re-exports)
from __future__ import annotations

import contextlib

from dslc.trace import devices
from dslc.trace.blobref import CurrentNameScope, NameScope
from dslc.trace.devices import CurrentDeviceScope, DeviceScope


def EmptyNameScope():
    """Record with no name scope inside the block (the outer one comes back after)."""
    return NameScope("", reset=True)


@contextlib.contextmanager
def EmptyDeviceScope():
    """No device scope inside the block (the outer one comes back after)."""
    saved = devices._state.option
    devices._state.option = None
    try:
        yield
    finally:
        devices._state.option = saved
