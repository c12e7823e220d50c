"""Workspaces: named blob cells resolved through a chain of parents, as in Caffe2.

Binding a region to a workspace resolves each blob name once: an existing cell
anywhere up the chain is shared, otherwise a new one is made locally. A cell whose
value is None was created but never written.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np


class Cell:
    """One blob: a name and its current value (None until something writes it)."""

    __slots__ = ("v", "name", "__weakref__")

    def __init__(self, name: str, v=None):
        self.name = name
        self.v = v

    def __repr__(self):
        return f"Cell({self.name!r})"

    def defer(self, fn, *args) -> None:
        """Make the cell's value ``fn(*args)``, computed when something first reads it.

        A value nobody may read (a gradient no op of the job uses, such as ``data_grad``:
        Caffe2 makes the blob, so it must exist with its value) costs nothing until a
        fetch or a later run reads it. The cell turns into its class's ``Deferred`` twin,
        whose ``v`` computes the value, stores it and turns the cell back: a plain cell's
        reads pay nothing. ``args`` are the values at the store (arrays no kernel writes
        in place while this holds them: the in-place updates check who else holds an
        array); ``materialize_all`` computes every pending value before a user may write
        an array in place."""
        if type(_RAW.__get__(self)) is _Binding:  # (a value living elsewhere: written there now)
            self.v = fn(*args)
            return
        _RAW.__set__(self, _Pending(fn, args))
        self.__class__ = _deferred_class(type(self))
        _PENDING.add(self)


    def bind(self, read, write) -> None:
        """Make the cell's value live in another object (a torch tensor that is the blob, as
        Caffe2's blob and its tensor are one): reads give ``read()``, a write calls
        ``write(v)``, which returns False for a value that cannot live there (the cell then
        holds that value itself, unbound). ``bound()`` gives ``read`` back while it holds.
        The binding replaces the cell's value (a deferred one is never computed)."""
        plain = getattr(type(self), "_plain", None) or type(self)
        _PENDING.discard(self)
        _RAW.__set__(self, _Binding(read, write))
        self.__class__ = _bound_class(plain)

    def bound(self):
        """The ``read`` of the binding the cell holds, or None."""
        raw = _RAW.__get__(self)
        return raw.read if type(raw) is _Binding else None


_RAW = Cell.v  # the slot itself, under the Deferred and Bound classes' property
_PENDING: "weakref.WeakSet[Cell]" = weakref.WeakSet()
_DEFERRED: dict = {}


class _Pending:
    __slots__ = ("fn", "args")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args


def _deferred_class(cls):
    if getattr(cls, "_plain", None) is not None:
        return cls
    got = _DEFERRED.get(cls)
    if got is None:
        def read(cell):
            v = _RAW.__get__(cell)
            if type(v) is _Pending:
                v = v.fn(*v.args)
                write(cell, v)
            return v

        def write(cell, v):
            _RAW.__set__(cell, v)
            cell.__class__ = cls
            _PENDING.discard(cell)

        got = _DEFERRED[cls] = type(f"Deferred{cls.__name__}", (cls,),
                                    {"__slots__": (), "_plain": cls, "v": property(read, write)})
    return got


class _Binding:
    __slots__ = ("read", "write")

    def __init__(self, read, write):
        self.read, self.write = read, write


_BOUND: dict = {}


def _bound_class(cls):
    got = _BOUND.get(cls)
    if got is None:
        def read(cell):
            return _RAW.__get__(cell).read()

        def write(cell, v):
            if not _RAW.__get__(cell).write(v):
                _RAW.__set__(cell, v)
                cell.__class__ = cls

        got = _BOUND[cls] = type(f"Bound{cls.__name__}", (cls,),
                                 {"__slots__": (), "_plain": cls, "v": property(read, write)})
    return got


def materialize_all() -> None:
    """Compute every deferred value now (before a user writes into an array in place)."""
    for cell in list(_PENDING):
        cell.v  # noqa: B018  (the read computes it)


class Workspace:
    """Blobs by name, with an optional parent whose blobs are visible here."""

    cell_type = Cell  # the front end's workspace makes cells users can fetch from and feed
    root_folder = "."  # where a relative db name is (Caffe2's root folder): see root()

    def __init__(self, parent: "Workspace | None" = None):
        self.parent = parent
        self.blobs: dict[str, Cell] = {}
        self._lock = threading.Lock()
        self.epoch = 0  # counts resets: cells resolved before one are stale

    def lookup(self, name: str) -> Cell | None:
        ws = self
        while ws is not None:
            c = ws.blobs.get(name)
            if c is not None:
                return c
            ws = ws.parent
        return None

    def cell(self, name: str) -> Cell:
        """The cell ``name`` resolves to, created here if no workspace up the chain has it."""
        c = self.lookup(name)
        if c is None:
            with self._lock:
                c = self.blobs.get(name)
                if c is None:
                    c = self.blobs[name] = self.cell_type(name)
        return c

    def create_blob(self, name: str) -> Cell:
        """A cell in this workspace itself (LocalSession pre-creates task outputs this way)."""
        with self._lock:
            c = self.blobs.get(name)
            if c is None:
                c = self.blobs[name] = self.cell_type(name)
        return c

    def root(self) -> str:
        """The root folder of the outermost workspace of the chain (a task's own workspace
        reads and writes dbs where the workspace it runs in does)."""
        ws = self
        while ws.parent is not None:
            ws = ws.parent
        return ws.root_folder

    def has_blob(self, name: str) -> bool:
        return self.lookup(name) is not None

    def names(self, include_shared: bool = True) -> list[str]:
        """Sorted blob names here, then (optionally) those of the parents."""
        out = sorted(self.blobs)
        if include_shared and self.parent is not None:
            seen = set(out)
            out += [n for n in self.parent.names(True) if n not in seen]
        return out

    def feed(self, name: str, value) -> None:
        self.cell(name).v = to_value(value)

    def fetch(self, name: str):
        c = self.lookup(name)
        if c is None:
            raise KeyError(f"no blob named {name!r} in the workspace")
        return c.v

    def reset(self) -> None:
        self.blobs.clear()
        self.epoch += 1


class FeedError(TypeError):
    """A value that looks like an array but would not become one (a torch tensor that
    requires grad, a dtype numpy lacks); the front end locates it at the user's feed."""


def to_value(x):
    """The runtime form of a tensor: numpy scalars for rank 0, arrays otherwise.

    Array-likes (anything with ``__array__`` or the array interface, such as a
    ``torch.Tensor``, and buffers such as ``memoryview`` or ``array.array``) become
    numpy arrays, as Caffe2's feed turns a torch tensor into its tensor. Numpy strings
    become object arrays, as Caffe2's ``FeedBlob`` makes them. ``bytes`` and ``str`` are
    strings; other Python objects are kept as they are (a Python op's state).
    """
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "US":
            x = x.astype(object)  # (Caffe2's FeedBlob: "plain NumPy strings are weird")
        return x[()] if x.ndim == 0 else x
    if isinstance(x, (np.generic,)) or x is None:
        return x
    if isinstance(x, (bool, int, float, str, list, tuple)):
        arr = np.array(x)  # Python int -> int64, float -> float64, as numpy (and Caffe2's FeedBlob) does
        if arr.dtype.kind == "U":
            arr = arr.astype(object)  # strings are object tensors, as GivenTensorStringFill makes
        return arr[()] if arr.ndim == 0 else arr
    if _array_like(x):
        try:
            arr = np.asarray(x)
        except Exception as e:  # (torch: "Can't call numpy() on Tensor that requires grad")
            raise FeedError(f"a {type(x).__name__} could not become a numpy array: "
                            f"{type(e).__name__}: {e}") from e
        return to_value(arr)
    return x


def _array_like(x) -> bool:
    """Whether numpy reads ``x`` as an array of its own (not as one Python object)."""
    if isinstance(x, (bytes, str)):
        return False  # (buffers too, but Caffe2 feeds them as strings)
    t = type(x)
    if hasattr(t, "__array__") or hasattr(t, "__array_interface__") or hasattr(t, "__array_struct__"):
        return True
    try:
        memoryview(x)
    except TypeError:
        return False
    return True


def to_user(v):
    """A runtime value as Caffe2's fetch gives it: strings as ``bytes`` (a string tensor
    as an object array of bytes), everything else as it is. The runtime keeps text as
    ``str``; Caffe2 holds ``std::string``, which Python sees as bytes."""
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, np.ndarray) and v.dtype.kind in "OUS":
        out = np.empty(v.shape, dtype=object)
        flat_in, flat_out = v.reshape(-1), out.reshape(-1)
        for i, e in enumerate(flat_in):
            flat_out[i] = e.encode("utf-8") if isinstance(e, str) else bytes(e) if isinstance(e, np.bytes_) else e
        return out
    return v
