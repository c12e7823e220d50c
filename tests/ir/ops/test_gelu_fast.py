"""Gelu's ``fast_gelu`` (Caffe2's tanh approximation) forward and gradient. The figures are the
real Caffe2's (/tmp/caffe2-venv): Gelu(X, fast_gelu=1) then AveragedLoss, run with caffe2.python
imports, Y and 7 * dX printed (Caffe2's activation_ops_test test_gelu passes fast_gelu)."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.session import LocalSession

X = np.array([-3.0, -1.2, -0.3, 0.0, 0.4, 1.1, 2.5], np.float32)
CAFFE2 = {  # fast_gelu: (Y, 7 dX)
    0: ([-0.0040497, -0.1380836, -0.1146266, 0.0, 0.2621687, 0.9507673, 2.4844759],
        [-0.0119456, -0.1179536, 0.2676722, 0.5, 0.8027298, 1.1039714, 1.0376111]),
    1: ([-0.0036375, -0.1382972, -0.1146291, 0.0, 0.2621612, 0.9505811, 2.4849157],
        [-0.0115845, -0.1177261, 0.2677046, 0.5, 0.8026588, 1.1036595, 1.0379517]),
}


@pytest.mark.parametrize("fast", [0, 1])
def test_gelu_and_its_gradient_are_caffe2s(backend, fast):
    workspace.FeedBlob("X", X)
    net = core.Net("gelu")
    net.Gelu("X", "Y", fast_gelu=fast)
    net.AveragedLoss("Y", "L")
    grads = net.AddGradientOperators(["L"])
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    y, dx = CAFFE2[fast]
    np.testing.assert_allclose(workspace.FetchBlob("Y"), y, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["X"])) * len(X), dx, rtol=1e-4, atol=1e-6)
    if fast:  # (and the tanh form by hand, in float64)
        x = X.astype(np.float64)
        want = x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))) / 2
        np.testing.assert_allclose(workspace.FetchBlob("Y"), want, rtol=1e-5, atol=1e-7)
