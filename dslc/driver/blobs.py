"""A workspace's blobs as Caffe2's Python API sees them: ``Blob`` (what
``ws.blobs[name]`` gives: fetch, feed, serialize, ``tensor()``), and the values fed and
fetched: a fed value in the runtime's form, a fetched one a copy with strings as bytes,
a located error for a value refused or a blob that holds none.
"""
from __future__ import annotations

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
        self.v = fed(value, self.name)
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
