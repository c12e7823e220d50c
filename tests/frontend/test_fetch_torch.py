"""workspace.FetchTorch and torch tensors fed with FeedBlob: the blob and the tensor are one
(dslc/driver/blobs.py over runtime/workspace.py's bound cells), as in Caffe2.

Caffe2's figures: the same calls on the real Caffe2 (torch 1.10.2's caffe2, /tmp/caffe2-venv),
values printed with ``.tolist()``. torch is not a dslc dependency: the tests that need it
skip without it; the bound cells underneath and the error without torch are tested always.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.runtime import workspace as rt
from dslc.session import LocalSession

HERE = "test_fetch_torch.py"


def _run(backend, *ops):
    net = core.Net("ops")
    for op in ops:
        net.Proto().op.extend([op])
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)


def test_the_tensor_and_the_blob_are_one_as_in_caffe2(backend):
    torch = pytest.importorskip("torch")
    _run(backend, core.CreateOperator("ConstantFill", [], "foo", shape=(4,), value=2, dtype=10))
    t = workspace.FetchTorch("foo")
    assert t.dtype == torch.int64
    t.resize_(5)  # (the tensor's own memory: it grows, and the blob with it)
    t[4] = t[2] = 777
    assert workspace.FetchBlob("foo").tolist() == [2, 2, 777, 2, 777]  # Caffe2
    assert workspace.FetchTorch("foo") is t or workspace.FetchTorch("foo").data_ptr() == t.data_ptr()

    z = torch.ones((4,), dtype=torch.int64)
    workspace.FeedBlob("bar", z)  # (fed, the tensor is the blob: an in-place Reshape reshapes it)
    _run(backend, core.CreateOperator("Reshape", ["bar"], ["bar", "_"], shape=(2, 2)))
    z[0, 1] = 123
    assert workspace.FetchBlob("bar").tolist() == [[1, 123], [1, 1]] and z.tolist() == [[1, 123], [1, 1]]  # Caffe2


def test_what_jobs_write_goes_into_the_tensor_as_in_caffe2(backend):
    torch = pytest.importorskip("torch")
    workspace.FeedBlob("x", np.array([1.0, 2.0, 3.0], np.float32))
    t = workspace.FetchTorch("x")
    t[0] = 10
    _run(backend, core.CreateOperator("Scale", ["x"], ["y"], scale=2.0))
    assert workspace.FetchBlob("y").tolist() == [20.0, 4.0, 6.0]  # Caffe2 (the op read the tensor's 10)
    _run(backend, core.CreateOperator("Scale", ["x"], ["x"], scale=2.0))
    assert t.tolist() == [20.0, 4.0, 6.0]  # Caffe2
    _run(backend, core.CreateOperator("ConstantFill", [], ["x"], shape=[2, 3], value=7.0))
    assert t.shape == (2, 3) and t.tolist() == [[7.0] * 3] * 2  # Caffe2
    workspace.FeedBlob("x", np.array([5.0, 6.0], np.float32))
    assert t.tolist() == [5.0, 6.0]  # Caffe2
    _run(backend, core.CreateOperator("ConstantFill", [], ["x"], shape=[2], value=3, dtype=core.DataType.INT32))
    assert t.dtype == torch.int32 and t.tolist() == [3, 3]  # Caffe2 (its tensor changes type in place)
    assert workspace.FetchBlob("x").dtype == np.int32
    t2, t3 = workspace.FetchTorch("y"), workspace.FetchTorch("y")
    t2[0] = -1
    assert t3.tolist() == [-1.0, 4.0, 6.0]  # Caffe2: two fetches, one tensor


def test_a_blob_torch_cannot_hold_is_a_located_error():
    pytest.importorskip("torch")
    workspace.FeedBlob("s", np.array(["a", "b"], dtype=object))  # (Caffe2: "Unsupported TypeMeta in ATen")
    with pytest.raises(DSLError, match="no torch tensor form") as e:
        workspace.FetchTorch("s")
    assert e.value.loc.file.endswith(HERE)
    with pytest.raises(DSLError, match="no blob named 'nothing'"):
        workspace.FetchTorch("nothing")


def test_without_torch_fetch_torch_says_so_at_the_callers_line(monkeypatch):
    workspace.FeedBlob("x", np.ones(2, np.float32))
    monkeypatch.setitem(sys.modules, "torch", None)  # (import torch fails, as where it is not installed)
    with pytest.raises(ImportError, match="needs PyTorch") as e:
        workspace.FetchTorch("x")
    assert isinstance(e.value, DSLError) and e.value.loc.file.endswith(HERE) and "pip install torch" in str(e.value)
    assert workspace.FetchBlob("x").tolist() == [1.0, 1.0]  # (the blob as it was)


class Store:
    """A value living outside the cell (what a torch tensor is to a bound blob)."""

    def __init__(self, value):
        self.value, self.writes = value, []

    def read(self):
        return self.value

    def write(self, v):
        self.writes.append(v)
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            self.value = v
            return True
        return False


def test_a_bound_cell_reads_and_writes_through_its_binding(backend):
    store = Store(np.array([1.0, 2.0], np.float32))
    cell = workspace.C.Workspace.current.cell("x")
    cell.bind(store.read, store.write)
    assert cell.bound() is not None and workspace.FetchBlob("x").tolist() == [1.0, 2.0]
    _run(backend, core.CreateOperator("Scale", ["x"], ["x"], scale=3.0))
    assert store.value.tolist() == [3.0, 6.0] and len(store.writes) == 1
    cell.defer(lambda a: a + 1, np.array([0.5], np.float32))  # (no deferring a bound value: written now)
    assert store.value.tolist() == [1.5]
    _run(backend, core.CreateOperator("ConstantFill", [], ["x"], shape=[2], value=4, dtype=core.DataType.INT32))
    assert cell.bound() is None and type(cell) is workspace.Blob  # (the store refused it: the cell holds it)
    assert workspace.FetchBlob("x").tolist() == [4, 4] and store.value.tolist() == [1.5]


def test_binding_replaces_a_deferred_value_without_computing_it():
    ws = rt.Workspace()
    cell, calls = ws.cell("x"), []
    cell.defer(lambda: calls.append(1) or np.arange(3))
    store = Store(np.array([7.0], np.float32))
    cell.bind(store.read, store.write)
    rt.materialize_all()
    assert cell.v.tolist() == [7.0] and not calls
