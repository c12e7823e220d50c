"""Caffe2's ``broadcast=1, axis_str="C"``: the axis is the letter's place in the op's ``order``
(Caffe2's elementwise_op_broadcast_test test_semantic_broadcast). The real Caffe2
(/tmp/caffe2-venv) ran this file's net with caffe2.python imports and printed a = X * Y[:, None,
None], b = X + Z exactly, dY = [0.164462, 0.162893, 0.169537] (X, Y, Z from RandomState(0)) and
dZ = 0.2 each; it refused axis with axis_str, and a letter not in the order, and ignored axis_str
without broadcast=1 (numpy broadcasting: [[1, 2, 3], [1, 2, 3]] for ones((2, 3)) + arange(3))."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession


def test_axis_str_names_the_axis_by_its_letter_in_the_order(backend):
    rng = np.random.RandomState(0)
    X = rng.rand(2, 3, 4, 5).astype(np.float32)
    Y = rng.rand(3).astype(np.float32)
    Z = rng.rand(5).astype(np.float32)
    for name, value in (("X", X), ("Y", Y), ("Z", Z)):
        workspace.FeedBlob(name, value)
    net = core.Net("semantic")
    net.Mul(["X", "Y"], "a", broadcast=1, axis_str="C")  # (NCHW: C is axis 1)
    net.Add(["X", "Z"], "b", broadcast=1, axis_str="C", order="NHWC")  # (C is axis 3)
    net.Sum(["a", "b"], "s")
    net.AveragedLoss("s", "loss")
    grads = net.AddGradientOperators(["loss"])
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    np.testing.assert_allclose(workspace.FetchBlob("a"), X * Y[:, None, None], rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("b"), X + Z, rtol=1e-6)
    # loss = mean(a + b): d/dY[c] = sum of X[:, c] / X.size, d/dZ = (X.size / 5) / X.size
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["Y"])), X.sum(axis=(0, 2, 3)) / X.size, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["Z"])), np.full(5, 0.2), rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["Y"])), [0.164462, 0.162893, 0.169537], rtol=1e-5)


@pytest.mark.parametrize("args, said", [({"axis": 1, "axis_str": "C"}, "not both"),
                                        ({"axis_str": "Q"}, "not one letter of the order 'NCHW'")])
def test_axis_str_with_axis_or_a_letter_outside_the_order_is_refused(args, said):
    workspace.FeedBlob("X", np.ones((2, 3), np.float32))
    workspace.FeedBlob("Y", np.ones(3, np.float32))
    net = core.Net("bad")
    net.Add(["X", "Y"], "c", broadcast=1, **args)
    with pytest.raises(DSLError, match=said):
        LocalSession(workspace.C.Workspace.current).run(net)


def test_axis_str_without_broadcast_is_ignored_as_caffe2_does():
    workspace.FeedBlob("X", np.ones((2, 3), np.float32))
    workspace.FeedBlob("Y", np.arange(3, dtype=np.float32))
    net = core.Net("plain")
    net.Add(["X", "Y"], "c", axis_str="C")  # (numpy broadcasting: Y along the last axis)
    LocalSession(workspace.C.Workspace.current).run(net)
    np.testing.assert_allclose(workspace.FetchBlob("c"), np.ones((2, 3)) + np.arange(3))
