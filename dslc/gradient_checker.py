"""Caffe2's ``gradient_checker``: an operator's gradient against central finite differences.

The loss is half the sum of squares of the outputs checked, so the gradient fed to
each such output is the output itself. The gradient ops come from the one gradient
table (``core.GradientRegistry.GetGradientForOp``) unless given.

Caffe2 estimates only the first and last three elements of the input (all of them with
CAFFE2_FULL_GRAD_CHECK=1); dslc estimates every element of inputs up to
``FULL_CHECK_SIZE`` elements and an evenly spread sample of that many past it.
"""
from __future__ import annotations

import os

import numpy as np

from dslc import core, workspace
from dslc.core import InferOpBlobDevicesAsDict
from dslc.proto import caffe2_pb2

FULL_CHECK_SIZE = 256


def getGradientForOp(op):
    return core.GradientRegistry.GetGradientForOp(op, [s + "_grad" for s in op.output])


class GradientChecker:
    """Checks one input's gradient of an operator on one device (``device_option``)."""

    def __init__(self, stepsize, threshold, device_option=None, workspace_name="gradient_check",
                 input_device_options=None):
        self._stepsize = stepsize
        self._threshold = threshold
        self._device_option = device_option or caffe2_pb2.DeviceOption()
        self._workspace_name = workspace_name
        self._input_device_options = input_device_options or {}

    def GetLossAndGrad(self, op, grad_ops, inputs, input_names, input_to_check, grad_name,
                       outputs_with_grads):
        """(loss, the gradient of input ``input_to_check``) at ``inputs``."""
        for name, arr in zip(input_names, inputs):
            workspace.FeedBlob(name, arr, self._input_device_options.get(name, self._device_option))
        workspace.RunOperatorOnce(op)
        loss = 0.0
        for k in outputs_with_grads:
            out = workspace.FetchBlob(op.output[k])
            loss += float((out.astype(np.float64) ** 2).sum())
            workspace.FeedBlob(op.output[k] + "_grad", out, self._device_option)
        workspace.RunOperatorsOnce(grad_ops)
        if isinstance(grad_name, core.GradientSlice):
            x = inputs[input_to_check]
            dense = np.zeros_like(x, dtype=x.dtype)
            np.add.at(dense, workspace.FetchBlob(str(grad_name.indices)),
                      workspace.FetchBlob(str(grad_name.values)))
            return loss / 2, dense
        return loss / 2, workspace.FetchBlob(str(grad_name))

    def CheckSimple(self, op, inputs, input_to_check, outputs_with_grads, grad_ops=None,
                    input_device_options=None, ensure_outputs_are_inferred=False):
        """(passed, the op's gradient, the finite-difference estimate) for input ``input_to_check``."""
        saved = workspace.CurrentWorkspace()
        if self._workspace_name != saved:
            workspace.SwitchWorkspace(self._workspace_name, True)
        try:
            op.device_option.CopyFrom(self._device_option)
            if grad_ops is None:
                grad_ops, g_input = getGradientForOp(op)
            else:
                g_input = [f"{b}_grad" for b in op.input]
            self._input_device_options = input_device_options or InferOpBlobDevicesAsDict(op)[0]
            grad_name = g_input[input_to_check]
            if grad_name is None:
                raise ValueError(f"{op.type} gives its input {op.input[input_to_check]!r} no gradient")
            args = (op, grad_ops, inputs, op.input, input_to_check, grad_name, outputs_with_grads)
            _, grad = self.GetLossAndGrad(*args)
            x = inputs[input_to_check]
            estimate = np.array(grad, copy=True)
            if estimate.shape != x.shape:
                raise ValueError(f"the gradient's shape {grad.shape} is not its input's {x.shape}")
            for at in _positions(x.size):
                kept = x.flat[at]
                x.flat[at] = kept + self._stepsize
                plus, _ = self.GetLossAndGrad(*args)
                x.flat[at] = kept - self._stepsize
                minus, _ = self.GetLossAndGrad(*args)
                x.flat[at] = kept
                estimate.flat[at] = (plus - minus) / self._stepsize / 2
            _, grad = self.GetLossAndGrad(*args)  # (at the unperturbed input again)
            bad = ~np.isclose(grad, estimate, atol=self._threshold, rtol=self._threshold)
            if bad.any():
                where = np.flatnonzero(bad)
                print(f"gradient of {op.input[input_to_check]!r} differs from its estimate at "
                      f"{where.tolist()[:10]}: {np.asarray(grad).flat[where[:10]]} vs "
                      f"{estimate.flat[where[:10]]}")
            return not bad.any(), grad, estimate
        finally:
            if self._workspace_name != saved:
                workspace.SwitchWorkspace(saved)


def _positions(size: int):
    if size <= FULL_CHECK_SIZE or os.getenv("CAFFE2_FULL_GRAD_CHECK") == "1":
        return range(size)
    return np.unique(np.linspace(0, size - 1, FULL_CHECK_SIZE).astype(np.int64))


# ----------------------------------------------------------------------------- whole nets

def _dense_grad(grad, input_name):
    """A gradient's value; a GradientSlice made dense (SparseToDense) first."""
    if isinstance(grad, core.GradientSlice):
        workspace.RunOperatorOnce(core.CreateOperator("SparseToDense", [grad.indices, grad.values, input_name],
                                                      ["_dense_grad"], wrap_indices=1))
        return workspace.FetchBlob("_dense_grad")
    return workspace.FetchBlob(str(grad))


def _net_with_grads(net, outputs, outputs_with_grad, input_values, inputs_with_grads):
    """(forward results, {input: its gradient}, the net with its gradient ops) after one run."""
    grad_net = net.Clone(net.Name() + "_copy")
    grad_map = grad_net.AddGradientOperators(outputs_with_grad)
    for name, value in (input_values or {}).items():
        workspace.FeedBlob(name, value)
    for name in inputs_with_grads:
        assert name in grad_map, f"{name} has no gradient: its net gradient cannot be checked"
        assert workspace.HasBlob(str(name)), f"{name} is not in the workspace"
    workspace.RunNetOnce(grad_net)
    results = [(o, workspace.FetchBlob(str(o))) for o in outputs]
    return results, {name: _dense_grad(grad_map[name], name) for name in inputs_with_grads}, grad_net


def _assert_close(a, b, threshold, err_msg=""):
    np.testing.assert_allclose(a, b, atol=threshold, rtol=threshold, err_msg=err_msg)
    delta = np.abs(np.asarray(a) - np.asarray(b)).ravel()
    return float(np.mean(delta)), float(delta.max()) if delta.size else 0.0


class NetGradientChecker:
    """Gradients of whole nets: nets that should agree, and a net against finite differences."""

    @staticmethod
    def CompareNets(nets, outputs, outputs_with_grad_ids, inputs_with_grads, input_values=None,
                    threshold=0.0000001, print_net_images=False):
        """Each net (with its outputs named in ``outputs``) gives the same forward results and
        the same gradients of ``inputs_with_grads`` (of the outputs picked by ``outputs_with_grad_ids``)."""
        results = [_net_with_grads(net, outs, [outs[i] for i in outputs_with_grad_ids], input_values,
                                   inputs_with_grads) for net, outs in zip(nets, outputs)]
        first, first_grads, _ = results[0]
        for later, grads, _ in results[1:]:
            assert len(later) == len(first)
            for k, ((b1, v1), (b2, v2)) in enumerate(zip(first, later)):
                _assert_close(v1, v2, threshold, f"different forward results for output {k}: {b1} and {b2}")
            assert grads.keys() == first_grads.keys()
            for name, value in grads.items():
                _assert_close(first_grads[name], value, threshold, f"different gradients for input {name}")

    @staticmethod
    def Check(net, outputs_with_grad, input_values, input_to_check, step_size=0.0001, threshold=0.05,
              print_net=True):
        """The net's gradient of ``input_to_check`` (of the sum of ``outputs_with_grad``) against
        central differences, element by element; returns (mean, max) absolute difference."""
        _, grads, full = _net_with_grads(net, [], outputs_with_grad, input_values, [input_to_check])

        def loss(value):
            workspace.FeedBlob(input_to_check, value)
            workspace.RunNetOnce(full)
            return sum(np.asarray(workspace.FetchBlob(str(o)), dtype=np.float64).sum() for o in outputs_with_grad)

        base = input_values[input_to_check]
        estimate = np.zeros_like(base)
        for k in range(base.size):
            plus, minus = base.copy(), base.copy()
            plus.flat[k] += step_size
            minus.flat[k] -= step_size
            estimate.flat[k] = (loss(plus) - loss(minus)) / step_size / 2
        workspace.FeedBlob(input_to_check, base)
        msg = f"gradient check of net {net.Name()}" + (f": {net.Proto()}" if print_net else "")
        return _assert_close(grads[input_to_check], estimate, threshold, msg)
