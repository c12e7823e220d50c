"""What FeedBlob takes and FetchBlob gives back, as real Caffe2 scripts rely on (issue 37).

Caffe2's answers were read off the real Caffe2 (torch 1.10.2's, /tmp/caffe2-venv) by
feeding the same values and fetching them back:

- a ``torch.Tensor`` becomes a tensor of its dtype and shape (DLRM feeds its batches as
  torch tensors); one that requires grad is refused ("Can wrap only non-requires-grad
  tensor"). Caffe2 refuses other array-likes and Python lists; dslc converts anything
  numpy reads as an array (docs/differences.md).
- strings come back as ``bytes``: ``FeedBlob("s", "hello")`` fetches ``b'hello'``; a
  string tensor (fed as a numpy unicode, bytes or object array, or made by
  GivenTensorStringFill) fetches as an object array of bytes.
"""
from __future__ import annotations

import array

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession

HERE = __file__.rsplit("/", 1)[-1]


class ArrayLike:
    """Not an ndarray, but numpy reads it as one (as it reads a torch.Tensor)."""

    def __init__(self, values, dtype):
        self.values, self.dtype = values, dtype

    def __array__(self, dtype=None, copy=None):
        return np.array(self.values, dtype=dtype or self.dtype)


class Refuses:
    """An array-like whose conversion fails, as a torch tensor that requires grad does."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad")


@pytest.mark.parametrize("value, dtype, shape", [
    (ArrayLike([[1.0, 2.0]], np.float32), np.float32, (1, 2)),
    (ArrayLike([1, 2, 3], np.int32), np.int32, (3,)),
    (array.array("f", [1.0, 2.5]), np.float32, (2,)),  # (a buffer)
    (memoryview(np.arange(4, dtype=np.int64)), np.int64, (4,)),
])
def test_an_array_like_is_fed_as_the_array_it_reads_as(backend, value, dtype, shape):
    # fed, it is a tensor the first op reads (before: kept as the object; the op failed)
    workspace.FeedBlob("x", value)
    got = workspace.FetchBlob("x")
    assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == shape
    net = core.Net("twice")
    net.Add(["x", "x"], "y")
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), 2 * np.asarray(value, dtype=dtype))


def test_torch_tensors_are_fed_as_caffe2_feeds_them(backend):
    torch = pytest.importorskip("torch")
    workspace.FeedBlob("x", torch.tensor([[1.0, -2.0]]))
    workspace.FeedBlob("i", torch.tensor([1, 2]))
    net = core.Net("relu")
    net.Relu("x", "y")
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    # Caffe2: float32 [1, 2] and int64 [2], Relu [[1, 0]]
    assert workspace.FetchBlob("x").dtype == np.float32 and workspace.FetchBlob("i").dtype == np.int64
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [[1.0, 0.0]])
    with pytest.raises(DSLError, match="requires grad"):
        workspace.FeedBlob("g", torch.tensor([1.0], requires_grad=True))


def test_an_array_like_that_does_not_convert_is_a_located_error():
    with pytest.raises(DSLError) as e:
        workspace.FeedBlob("x", Refuses())
    assert isinstance(e.value, TypeError) and "cannot feed blob 'x'" in str(e.value)
    assert e.value.loc.file.endswith(HERE) and e.value.loc.line > 0
    assert not workspace.HasBlob("x")  # (nothing half-made)
    with pytest.raises(TypeError):
        workspace.C.Workspace.current.create_blob("y").feed(Refuses())


def test_strings_come_back_as_bytes(backend):
    # Caffe2: b'hello'; tensors as object arrays of bytes, whatever numpy kind they were fed as
    workspace.FeedBlob("s", "hello")
    workspace.FeedBlob("u", np.array(["ab", "cd"]))
    workspace.FeedBlob("b", np.array([b"ab", b"cd"]))
    workspace.FeedBlob("o", np.array(["ab", "cd"], dtype=object))
    assert workspace.FetchBlob("s") == b"hello"
    assert workspace.FetchBlob("s").decode() == "hello"  # (what scripts do with it)
    for name in "ubo":
        got = workspace.FetchBlob(name)
        assert got.dtype == object and got.tolist() == [b"ab", b"cd"], name
    net = core.Net("strings")
    net.GivenTensorStringFill([], "g", values=["x", "y"], shape=[2])
    net.Copy("o", "c")
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    assert workspace.FetchBlob("g").tolist() == [b"x", b"y"]
    assert workspace.FetchBlob("c").tolist() == [b"ab", b"cd"]
    assert workspace.C.Workspace.current.blobs["g"].fetch().tolist() == [b"x", b"y"]


def test_task_outputs_of_strings_are_bytes(backend):
    # (Caffe2's TaskOutput.fetch reads the blob as FetchBlob does)
    from dslc.net_builder import ops
    from dslc.task import Task, final_output
    with Task() as task:
        out = final_output(ops.Const("done"))
    with LocalSession(backend=backend) as s:
        s.run(task)
    assert out.fetch() == b"done"


def test_an_ideep_device_option_runs_on_the_cpu(backend):
    # Caffe2's CPU build says use_mkldnn (and has_mkldnn False: its values, read off
    # /tmp/caffe2-venv's workspace.C); an IDEEP blob fed comes back as fed, and a net on the
    # IDEEP device computes what it computes on the CPU.
    from dslc.proto import caffe2_pb2
    assert workspace.C.use_mkldnn and not workspace.C.has_mkldnn
    ideep = core.DeviceOption(caffe2_pb2.IDEEP)
    x = np.array([[-1.5, 2.0, 0.25]], np.float32)
    workspace.FeedBlob("x_ideep", x, ideep)
    np.testing.assert_array_equal(workspace.FetchBlob("x_ideep"), x)
    net = core.Net("on_ideep")
    net.Relu("x_ideep", "y_ideep")
    net.Proto().device_option.CopyFrom(ideep)
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y_ideep"), [[0.0, 2.0, 0.25]])
