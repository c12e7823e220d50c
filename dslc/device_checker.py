"""Caffe2's ``device_checker``: run an operator or a net on several devices and compare.

In dslc a "device" is a backend (``devices.BackendOption``): the interpreter and numba
with every region compiled are the devices the op-test harness compares
(``hypothesis_test_util.device_options``).
"""
from __future__ import annotations

import copy

import numpy as np

from dslc import workspace
from dslc.core import InferOpBlobDevicesAsDict


class DeviceChecker:
    """Checks that outputs agree, within ``threshold``, across ``device_options``."""

    def __init__(self, threshold, device_options):
        self._threshold = threshold
        self._device_options = list(device_options)

    def CheckSimple(self, op, inputs, outputs_to_check, input_device_options=None) -> bool:
        """Run ``op`` on ``inputs`` on each device; True when the outputs ``outputs_to_check``
        (indices) agree with the first device's."""
        op = copy.deepcopy(op)
        results = []
        with _scratch_workspace():
            for option in self._device_options:
                op.device_option.CopyFrom(option)
                placed = input_device_options or InferOpBlobDevicesAsDict(op)[0]
                for name, arr in zip(op.input, inputs):
                    workspace.FeedBlob(name, np.array(arr), placed.get(name, option))
                workspace.RunOperatorOnce(op)
                results.append([workspace.FetchBlob(op.output[k]) for k in outputs_to_check])
                workspace.ResetWorkspace()
        names = [op.output[k] for k in outputs_to_check]
        return self._agree(results, names)

    def CheckNet(self, net, inputs=None, blobs_to_check=None, ignore=None) -> bool:
        """Run the NetDef ``net`` on each device (after feeding ``inputs``, name -> array);
        True when every blob of ``blobs_to_check`` (default: every op output) agrees."""
        inputs, ignore = inputs or {}, set(ignore or ())
        if blobs_to_check is None:
            blobs_to_check = [b for op in net.op for b in op.output]
        blobs_to_check = [b for b in blobs_to_check if b not in ignore]
        results = []
        with _scratch_workspace():
            for option in self._device_options:
                for name, arr in inputs.items():
                    workspace.FeedBlob(name, arr, option)
                for op in net.op:
                    op.device_option.CopyFrom(option)
                workspace.RunNetOnce(net)
                results.append([workspace.FetchBlob(b) for b in blobs_to_check])
        return self._agree(results, blobs_to_check)

    def _agree(self, results, names) -> bool:
        ok = True
        for k in range(1, len(results)):
            for j, name in enumerate(names):
                got, first = results[k][j], results[0][j]
                if not np.allclose(got, first, atol=self._threshold, rtol=self._threshold):
                    print(f"device option {k} disagrees with device option 0 on output {name}:\n"
                          f"  {np.asarray(got).ravel()}\n  {np.asarray(first).ravel()}")
                    ok = False
        return ok


class _scratch_workspace:
    """Run inside the workspace "_device_check_", then switch back to the current one."""

    def __enter__(self):
        self.saved = workspace.CurrentWorkspace()
        workspace.SwitchWorkspace("_device_check_", True)

    def __exit__(self, *exc):
        workspace.SwitchWorkspace(self.saved)
