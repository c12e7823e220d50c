"""ExpandDims and Squeeze with an axis listed twice: Caffe2 sorts and dedups ``dims`` (with a
warning), so the real Caffe2 (/tmp/caffe2-venv, caffe2.python imports) gave shape (1, 2, 3, 1) for
ExpandDims(ones((2, 3)), dims=[0, 0, 3]) and (2, 3) for Squeeze of that with dims=[3, 0, 0]
(Caffe2's hypothesis_test test_squeeze_expand_dims draws such dims)."""
from __future__ import annotations

import numpy as np

from dslc import core, workspace
from dslc.session import LocalSession


def test_a_repeated_axis_counts_once(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    workspace.FeedBlob("X", x)
    net = core.Net("dims")
    net.ExpandDims("X", "Y", dims=[0, 0, 3])
    net.Squeeze("Y", "Z", dims=[3, 0, 0])
    net.AveragedLoss("Y", "L")
    grads = net.AddGradientOperators(["L"])
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    assert workspace.FetchBlob("Y").shape == (1, 2, 3, 1)
    np.testing.assert_array_equal(workspace.FetchBlob("Z"), x)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["X"])), np.full((2, 3), 1 / 6))
