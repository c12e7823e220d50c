"""Small Caffe2 workspace helpers: CreateBlob (a blob holding nothing yet), FetchBlobs, and
``core.workspace`` (Caffe2 code calls ``core.workspace.RunPlan``)."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError


def test_create_blob_makes_an_empty_blob():
    assert workspace.CreateBlob("made")
    assert workspace.HasBlob("made") and "made" in workspace.Blobs()
    with pytest.raises(DSLError, match="holds no value yet"):
        workspace.FetchBlob("made")


def test_fetch_blobs_in_order_and_core_workspace_is_the_module():
    workspace.FeedBlob("a", np.array([1, 2]))
    workspace.FeedBlob("b", np.float32(2.5))
    a, b = workspace.FetchBlobs(["a", core.BlobReference("b")])
    assert a.tolist() == [1, 2] and b == np.float32(2.5)
    assert core.workspace is workspace
    net = core.Net("n")
    net.Add(["a", "a"], "c")
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("s", net))
    core.workspace.RunPlan(plan)
    assert workspace.FetchBlob("c").tolist() == [2, 4]
