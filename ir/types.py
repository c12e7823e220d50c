"""IR types: tensors with a dtype and a shape, and handle types for runtime resources.

Text forms: ``i64`` (scalar), ``f32[3]``, ``f32[?,4]``, ``f32[*]`` (unknown rank),
``?[*]`` (unknown dtype), ``!counter``, ``any``.
"""
from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np

from .budget import check_bytes, over
from .diagnostics import DSLTypeError

# Our dtype names and the numpy dtypes they stand for.
NUMPY_DTYPES = {
    "bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "f16": np.float16, "f32": np.float32,
    "f64": np.float64, "str": np.object_,
}
INT_DTYPES = frozenset({"i8", "i16", "i32", "i64", "u8", "u16"})
FLOAT_DTYPES = frozenset({"f16", "f32", "f64"})
NUMERIC_DTYPES = INT_DTYPES | FLOAT_DTYPES

# Caffe2 DataType codes (core.DataType) and our names for them.
CAFFE2_DTYPE_CODES = {
    1: "f32", 2: "i32", 3: "u8", 4: "str", 5: "bool", 6: "u8", 7: "i8", 8: "u16",
    9: "i16", 10: "i64", 12: "f16", 13: "f64",
}


_BY_NUMPY: dict = {}


def dtype_of_numpy(dt) -> str:
    """Our dtype name for a numpy dtype (strings and objects map to ``str``)."""
    got = _BY_NUMPY.get(dt)
    if got is None:
        got = _BY_NUMPY[dt] = _dtype_of_numpy(dt)
    return got


def _dtype_of_numpy(dt) -> str:
    dt = np.dtype(dt)
    if dt.kind in "USO":
        return "str"
    for name, npdt in NUMPY_DTYPES.items():
        if name != "str" and np.dtype(npdt) == dt:
            return name
    raise ValueError(f"unsupported dtype {dt}")


class Type:
    """Base of all IR types; types are immutable and compare by value.

    Every type is interned: constructing one returns the one instance for its value
    (``TensorType("f32", (3,)) is TensorType("f32", (3,))``). Value equality is then
    identity, so ``==`` and ``hash`` are object's own (in C): every pass compares and
    hashes types, and a dataclass's generated ``__eq__``/``__hash__`` ran in Python.
    The first instance made for a value is the one kept (as ``==`` goes, a shape of
    numpy ints is the same shape of ints). The tables are never cleared (a second
    instance of a value would break ``==``): one entry per distinct type a process makes.
    """

    __slots__ = ()

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")


class TensorType(Type):
    """A tensor; ``dtype`` None means unknown, ``shape`` None means unknown rank."""

    __slots__ = ("dtype", "shape")
    __match_args__ = ("dtype", "shape")
    dtype: str | None
    shape: tuple[int | None, ...] | None

    def __new__(cls, dtype: str | None, shape=()):
        try:
            return _TENSOR_TYPES[dtype, shape]
        except (KeyError, TypeError):  # a new type, or a shape given as a list
            return _new_tensor_type(cls, dtype, shape)

    def __reduce__(self):  # copies and pickles are made through the interning constructor
        return TensorType, (self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"TensorType(dtype={self.dtype!r}, shape={self.shape!r})"

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def __str__(self) -> str:
        d = self.dtype or "?"
        if self.shape is None:
            return f"{d}[*]"
        if not self.shape:
            return d
        return d + "[" + ",".join("?" if s is None else str(s) for s in self.shape) + "]"


_TENSOR_TYPES: dict = {}  # (dtype, shape) -> its one TensorType


def _check_size(dtype, shape) -> None:
    """A shape an input asks for is refused where its type is made, before anything
    allocates (ir/budget.py: DSLC_MAX_TENSOR_BYTES, else the machine's memory)."""
    n = 1
    for d in shape:
        if d is not None:
            if d < 0:
                raise DSLTypeError(f"a tensor cannot have a negative dimension ({list(shape)})")
            n *= d
    need = n * (np.dtype(NUMPY_DTYPES[dtype]).itemsize if dtype in NUMPY_DTYPES else 1)
    if over(need):
        dims = ",".join("?" if d is None else str(d) for d in shape)
        check_bytes("", need, f"a {dtype or '?'}[{dims}] tensor", error=DSLTypeError)


def _new_tensor_type(cls, dtype, shape) -> TensorType:
    shape = None if shape is None else tuple(shape)
    if shape:
        _check_size(dtype, shape)
    t = object.__new__(cls)
    object.__setattr__(t, "dtype", dtype)
    object.__setattr__(t, "shape", shape)
    # setdefault is one step under the GIL: two threads making the same type get one.
    return _TENSOR_TYPES.setdefault((dtype, shape), t)


class HandleType(Type):
    """A runtime resource held in a blob: counter, timer, queue, db, cursor, mutex."""

    __slots__ = ("kind",)
    __match_args__ = ("kind",)
    kind: str

    def __new__(cls, kind: str):
        t = _HANDLE_TYPES.get(kind)
        if t is None:
            t = object.__new__(cls)
            object.__setattr__(t, "kind", kind)
            t = _HANDLE_TYPES.setdefault(kind, t)  # (one step: see _new_tensor_type)
        return t

    def __reduce__(self):
        return HandleType, (self.kind,)

    def __repr__(self) -> str:
        return f"HandleType(kind={self.kind!r})"

    def __str__(self) -> str:
        return f"!{self.kind}"


_HANDLE_TYPES: dict = {}  # kind -> its one HandleType


class AnyType(Type):
    """A value whose type is known only at run time (e.g. a Python op's output)."""

    __slots__ = ()

    def __new__(cls):
        return ANY  # the one instance, made below

    def __reduce__(self):
        return AnyType, ()

    def __repr__(self) -> str:
        return "AnyType()"

    def __str__(self) -> str:
        return "any"


ANY = object.__new__(AnyType)
BOOL = TensorType("bool")
I64 = TensorType("i64")
I32 = TensorType("i32")
F32 = TensorType("f32")
COUNTER = HandleType("counter")
TIMER = HandleType("timer")
QUEUE = HandleType("queue")
CURSOR = HandleType("cursor")
MUTEX = HandleType("mutex")


def tensor(dtype: str | None, shape=()) -> TensorType:
    return TensorType(dtype, shape)  # (the constructor makes any iterable shape a tuple)


def dtype_of(t: Type) -> str | None:
    """The dtype of a tensor type, None when unknown or not a tensor."""
    return t.dtype if isinstance(t, TensorType) else None


def shape_of(t: Type):
    return t.shape if isinstance(t, TensorType) else None


def join(a: Type, b: Type) -> Type:
    """The most precise type that covers both (used where control flow merges)."""
    if a is b:  # (types are interned: identity is equality)
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        dtype = a.dtype if a.dtype == b.dtype else None
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(dtype, None)
        return TensorType(dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))
    return ANY


def join_into(table: dict, key, t: Type) -> None:
    """``table[key]`` becomes ``t`` joined with the type it held (just ``t`` if none)."""
    old = table.get(key)
    table[key] = t if old is None or old is t else join(old, t)


def join_all(types) -> Type | None:
    """The join of ``types`` (None if there are none)."""
    out = None
    for t in types:
        out = t if out is None or out is t else join(out, t)
    return out


def subsumes(wide: Type, t: Type) -> bool:
    """True if every value of type ``t`` is also of type ``wide`` (unknowns cover anything)."""
    if wide == t or wide == ANY:
        return True
    if not (isinstance(wide, TensorType) and isinstance(t, TensorType)):
        return False
    if wide.dtype is not None and wide.dtype != t.dtype:
        return False
    if wide.shape is None:
        return True
    if t.shape is None or len(t.shape) != len(wide.shape):
        return False
    return all(w is None or w == d for w, d in zip(wide.shape, t.shape))
