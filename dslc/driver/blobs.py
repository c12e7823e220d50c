"""A workspace's blobs as Caffe2's Python API sees them: ``Blob`` (what
``ws.blobs[name]`` gives: fetch, feed, serialize, ``tensor()``, ``to_torch()``), and the
values fed and fetched: a fed value in the runtime's form, a fetched one a copy with
strings as bytes, a located error for a value refused or a blob that holds none.

A blob can also *be* a torch tensor, as Caffe2's blob and tensor are one object: the
tensor ``FetchTorch`` returns, or one fed with ``FeedBlob``. Its cell is bound to the
tensor (runtime/workspace.py ``Cell.bind``): jobs read the tensor's current values, and
what a job writes goes into the tensor (``resize_`` then a copy, as Caffe2 reuses the
tensor; a new dtype through the tensor's ``.data``, as Caffe2's tensor changes type in
place), so the user's ``t.resize_`` and ``t[i] = x`` are the blob's and an in-place
``Reshape`` reshapes the tensor. A value torch cannot hold (strings) unbinds the blob (the
tensor keeps its values). torch is not a dependency: only ``FetchTorch`` imports it.
"""
from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np

from dslc.runtime import blobproto
from dslc.runtime import workspace as _rt
from dslc.ir.diagnostics import DSLError
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import NUMPY_DTYPES
from dslc.trace.tracing import user_location


class BlobError(DSLError, RuntimeError):
    """A fetch of a blob the workspace lacks or that holds nothing (Caffe2 raises RuntimeError)."""


class Blob(_rt.Cell):
    """A blob of a user's workspace: Caffe2 code reads ``ws.blobs[name].fetch()`` and ``.feed(v)``."""

    __slots__ = ()

    def fetch(self):
        """The value as numpy (a 0-d array for a scalar)."""
        return value_of(self, self.name)

    def feed(self, value, device_option=None) -> bool:
        put(self, held(value, self.name))
        return True

    def serialize(self, name=None) -> bytes:
        """This blob's value as Caffe2's BlobProto bytes (under ``name``)."""
        return blobproto.serialize(str(name if name is not None else self.name), self.fetch())

    def deserialize(self, serialized) -> None:
        """Set this blob to the value of BlobProto bytes (``serialize``'s)."""
        self.feed(blobproto.deserialize(serialized)[1])

    def tensor(self):
        """The value, to read and write in place (Caffe2's ``blob.tensor().data``)."""
        return _Tensor(self)

    def to_torch(self):
        """The blob as a torch tensor that shares its memory (Caffe2's ``Blob.to_torch``)."""
        return to_torch(self, self.name)


class _Tensor:
    """``blob.tensor()``: ``data`` is the blob's own array (writes change the blob)."""

    def __init__(self, blob):
        self.blob = blob

    @property
    def data(self):
        _rt.materialize_all()  # (a deferred value may read the array the caller is to write)
        v = self.blob.v
        if not isinstance(v, np.ndarray) or not v.flags.writeable:
            v = self.blob.v = np.array(self.blob.fetch())
        return v

    def init(self, dims, dtype):
        dt = dtype_from_code("Tensor.init", dtype)
        if dt == "str":
            raise RuntimeError("string tensors cannot be initialized from Python")
        self.blob.v = np.zeros(tuple(dims), dtype=NUMPY_DTYPES[dt])


class FeedError(DSLError, TypeError, RuntimeError):
    """A value FeedBlob cannot store as a tensor (Caffe2 raises a RuntimeError for the
    values it refuses; a TypeError is what Python code expects)."""


def fed(value, name):
    """``value`` in the runtime's form, or a FeedError at the user's line."""
    try:
        return _rt.to_value(value)
    except _rt.FeedError as e:
        raise FeedError(f"cannot feed blob {str(name)!r}: {e}", user_location(),
                        "feed a numpy array (a torch tensor: t.detach().numpy(), in a dtype numpy has)") from None


def feed(ws: _rt.Workspace, name, value) -> None:
    """Store ``value`` as blob ``name`` of ``ws`` (a value refused makes no blob)."""
    v = held(value, name)  # (before the cell: a value refused makes no blob)
    put(ws.cell(str(name)), v)


def held(value, name):
    """``value`` as a cell holds it: a CPU torch tensor numpy can view is shared (the blob
    becomes the tensor, as Caffe2's feed shares it), anything else in its runtime form."""
    torch = sys.modules.get("torch")  # (a torch tensor means torch is loaded: never import it here)
    if torch is not None and isinstance(value, torch.Tensor):
        shared = _SharedTensor.of(value)
        if shared is not None:
            return shared
    return fed(value, name)


def put(cell, v) -> None:
    """Make ``v`` (``held``'s) the cell's value."""
    if isinstance(v, _SharedTensor):
        cell.bind(v.read, v.write)
    else:
        cell.v = v


class TorchMissingError(DSLError, ImportError):
    """FetchTorch where torch cannot be imported (torch is not a dslc dependency)."""


def to_torch(cell, name):
    """Blob ``name``'s value as a torch tensor that is the blob from then on (Caffe2's
    ``FetchTorch``): its values are copied once into memory torch owns (so that ``resize_``
    works, as on Caffe2's), and the cell is bound to it. A located error if torch is
    missing, the blob holds nothing, or what it holds is not a number tensor."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise TorchMissingError(f"FetchTorch of blob {str(name)!r} needs PyTorch, which cannot be imported "
                                f"({type(e).__name__}: {e})", user_location(),
                                "pip install torch, or fetch the value as numpy with FetchBlob") from None
    if cell is None:
        raise BlobError(f"no blob named {str(name)!r} in the workspace", user_location(),
                        "feed it with FeedBlob or run the task that writes it first")
    read = cell.bound()
    if isinstance(getattr(read, "__self__", None), _SharedTensor):
        return read.__self__.tensor  # (fetched or fed before: the one tensor, as Caffe2's)
    v = cell.v
    if v is None:
        raise BlobError(f"blob {str(name)!r} exists but holds no value yet", user_location(),
                        "run the task that writes it first")
    arr = v if isinstance(v, np.ndarray) else np.asarray(v) if isinstance(v, np.generic) else None
    dtype = _torch_dtype(torch, arr.dtype) if arr is not None else None
    if dtype is None:
        what = f"a tensor of dtype {arr.dtype}" if arr is not None else f"a {type(v).__name__}"
        raise BlobError(f"blob {str(name)!r} holds {what}, which has no torch tensor form", user_location(),
                        "FetchTorch takes number and bool tensors; FetchBlob gives any blob's value")
    t = torch.empty(arr.shape, dtype=dtype)
    t.copy_(_from_numpy(torch, arr))
    shared = _SharedTensor(t, arr.dtype)
    cell.bind(shared.read, shared.write)
    return t


def _from_numpy(torch, arr):
    """A torch view of ``arr`` to copy from (a read-only array too: torch only reads it)."""
    if any(s < 0 for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ("The given NumPy array is not writable")
        return torch.from_numpy(arr)


class _SharedTensor:
    """A blob that is torch tensor ``tensor``: ``read`` gives its values (a numpy view of its
    memory), ``write`` puts a value of its dtype into it."""

    def __init__(self, tensor, dtype):
        self.tensor, self.dtype = tensor, np.dtype(dtype)

    @classmethod
    def of(cls, t):
        """The shared form of a fed tensor, or None where it has none (a tensor that requires
        grad, on another device, sparse, of a dtype numpy lacks: fed as a copy or refused)."""
        if t.requires_grad or t.device.type != "cpu" or t.layout != sys.modules["torch"].strided:
            return None
        try:
            dtype = t.new_empty(0).numpy().dtype  # (not t.numpy(): it would pin t's memory's size)
        except (TypeError, RuntimeError):
            return None
        return cls(t, dtype)

    def read(self):
        a = self.tensor.numpy()
        return a[()] if a.ndim == 0 else a

    def write(self, v) -> bool:
        if isinstance(v, np.generic):
            v = np.asarray(v)
        torch = sys.modules["torch"]
        dtype = _torch_dtype(torch, v.dtype) if isinstance(v, np.ndarray) else None
        if dtype is None:
            return False  # (a string, an object: the blob holds it unbound; the tensor keeps its values)
        t = self.tensor
        if v.dtype == self.dtype and v.shape == tuple(t.shape) and v.__array_interface__["data"][0] == t.data_ptr() \
                and v.strides == tuple(k * v.itemsize for k in t.stride()):
            return True  # (its own values: an op in place)
        storage = t.untyped_storage()
        lo, hi = np.lib.array_utils.byte_bounds(v)
        if lo < storage.data_ptr() + storage.nbytes() and storage.data_ptr() < hi:
            v = v.copy()  # (a view of the tensor's memory: Reshape's output, a slice)
        if v.dtype != self.dtype or not _resized(t, v.shape):
            # Caffe2's tensor takes the new type in place; so does this one (its .data), in new memory
            t.data = torch.empty(v.shape, dtype=dtype)
            self.dtype = v.dtype
        t.copy_(_from_numpy(torch, v))
        return True


def _resized(t, shape) -> bool:
    """Whether ``t`` took ``shape`` in its own memory (torch cannot grow memory numpy has seen)."""
    try:
        t.resize_(shape)
    except RuntimeError:
        return False
    return True


def _torch_dtype(torch, dtype):
    """torch's dtype for numpy's ``dtype``, or None where torch has none (strings, objects)."""
    try:
        return torch.from_numpy(np.empty(0, dtype)).dtype
    except TypeError:
        return None


def fetch(ws: _rt.Workspace, name):
    """The value of ``name`` as numpy (a 0-d array for scalars); a located error if it has none."""
    cell = ws.lookup(str(name))
    if cell is None:
        raise BlobError(f"no blob named {str(name)!r} in the workspace", user_location(),
                       "feed it with FeedBlob or run the task that writes it first")
    return value_of(cell, name)


def value_of(cell, name):
    if cell.v is None:
        raise BlobError(f"blob {str(name)!r} exists but holds no value yet", user_location(),
                       "run the task that writes it first")
    v = cell.v
    # a copy, as Caffe2's: the caller may write to it, and the workspace's value (perhaps a
    # read-only constant, perhaps updated in place by a later run) stays its own; strings
    # as bytes, as Caffe2's
    return _rt.to_user(np.array(v) if isinstance(v, (np.ndarray, np.generic)) else v)
