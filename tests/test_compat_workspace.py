"""Caffe2's workspace API (issue 15): ``ws.blobs[name].fetch()/.feed()``, the module-level
workspace functions, the read-only proto views and the default backend.

Expected values are worked out by hand in each test's comments.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession
from dslc.test_util import TestCase

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


# ----------------------------------------------------------------------------- ws.blobs


def test_blobs_fetch_reads_what_a_session_run_wrote(backend):
    ws = workspace.C.Workspace()
    net = core.Net("fill")
    net.ConstantFill([], ["x"], shape=[2, 2], value=1.5)
    net.Add(["x", "x"], ["y"])
    LocalSession(ws, backend=backend).run(net)
    np.testing.assert_array_equal(ws.blobs["y"].fetch(), np.full((2, 2), 3.0))  # 1.5 + 1.5
    assert "x" in ws.blobs and "nothing" not in ws.blobs


def test_blobs_feed_then_a_net_reads_it(backend):
    ws = workspace.C.Workspace()
    ws.create_blob("a").feed(np.array([1.0, 2.0, 4.0], dtype=np.float32))
    net = core.Net("double")
    net.Add(["a", "a"], ["b"])
    session = LocalSession(ws, backend=backend)
    session.run(net)
    np.testing.assert_array_equal(ws.blobs["b"].fetch(), [2.0, 4.0, 8.0])
    ws.blobs["a"].feed(np.array([0.5, 0.5, 0.5], dtype=np.float32))  # feed through the existing blob
    session.run(net)
    np.testing.assert_array_equal(session.workspace.blobs["b"].fetch(), [1.0, 1.0, 1.0])


def test_blobs_of_the_current_workspace_fetch_a_scalar_as_a_0d_array(backend):
    net = core.Net("scalar")
    net.ConstantFill([], ["s"], shape=[], value=7, dtype=core.DataType.INT64)
    LocalSession(backend=backend).run(net)
    got = workspace.current().blobs["s"].fetch()
    assert isinstance(got, np.ndarray) and got.shape == () and got == 7


def test_fetch_of_a_blob_never_written_is_a_located_error():
    ws = workspace.C.Workspace()
    blob = ws.create_blob("empty")
    with pytest.raises(DSLError) as e:
        blob.fetch()
    assert "no value" in str(e.value) and _located_here(e.value)


def test_test_util_testcase_starts_with_an_empty_workspace():
    workspace.FeedBlob("left_over", np.array([1]))

    class T(TestCase):
        def test_it(self):
            assert not workspace.HasBlob("left_over")
            assert len(self.ws.blobs) == 0

    result = T("test_it").run()
    assert result.wasSuccessful(), result.failures + result.errors
