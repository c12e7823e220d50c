"""The interpreter's kernels: one per declared op, resolved once per op before running.

``@kernel("Add")`` registers a factory ``f(op, cfg)`` that returns the callable run
for that op (or a ``Constant``). ``per_instance=True`` factories return a maker
``make(inst)`` instead, called each time the op is bound to a workspace (Python op
builders, timers). Values are numpy scalars for rank 0 and arrays otherwise.
"""
from __future__ import annotations

import functools
import operator
import sys

import numpy as np

from dslc.backends.runtime.resources import Counter, Timer
from dslc.backends.runtime.workspace import to_value
from dslc.ir import pyrefs
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import INT_DTYPES, NUMPY_DTYPES, TensorType

KERNELS: dict[str, tuple] = {}


class Constant:
    """A kernel result known before running (the value is bound into the code)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def kernel(name: str, per_instance: bool = False):
    def register(factory):
        KERNELS[name] = (factory, per_instance)
        return factory
    return register


def _dtype(op, i=0):
    t = op.results[i].type if op.results else None
    return t.dtype if isinstance(t, TensorType) else None


@kernel("Const")
def _const(op, cfg):
    return Constant(to_value(op.attrs["value"]))


def _binary(name, fn):
    @kernel(name)
    def factory(op, cfg):
        axis = op.attrs.get("axis", -1)
        if op.attrs.get("broadcast") and axis not in (-1, None):
            return functools.partial(_legacy_broadcast, fn, axis)
        return fn


def _legacy_broadcast(fn, axis, a, b):
    """Caffe2's old ``broadcast=1, axis=k``: b's dims line up with a's starting at k."""
    b = np.asarray(b)
    a_nd = np.ndim(a)
    return fn(a, b.reshape(b.shape + (1,) * (a_nd - axis - b.ndim)))


for _n, _f in [("Add", operator.add), ("Sub", operator.sub), ("Mul", operator.mul),
               ("GE", operator.ge), ("GT", operator.gt), ("LE", operator.le), ("LT", operator.lt),
               ("EQ", operator.eq), ("NE", operator.ne),
               ("And", operator.and_), ("Or", operator.or_), ("Xor", operator.xor)]:
    _binary(_n, _f)


def _int_div(a, b):
    """C++ integer division: truncate toward zero; dividing by zero is an error."""
    if np.any(np.asarray(b) == 0):
        raise ZeroDivisionError("integer division by zero")
    q = a // b
    fix = (a % b != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(np.asarray(q).dtype) if isinstance(fix, np.ndarray) else q + type(q)(fix)


def _any_div(a, b):
    if np.asarray(a).dtype.kind in "iu":
        return _int_div(a, b)
    return a / b


@kernel("Div")
def _div(op, cfg):
    dt = _dtype(op)
    if dt in INT_DTYPES:
        return _int_div
    return _any_div if dt is None else operator.truediv


def _unary(name, fn):
    kernel(name)(lambda op, cfg: fn)


_unary("Not", operator.invert)
_unary("Negative", operator.neg)
_unary("Abs", operator.abs)
_unary("Sqr", lambda x: x * x)
_unary("Sqrt", np.sqrt)
_unary("Exp", np.exp)
_unary("Log", np.log)


_unary("Relu", lambda x: np.maximum(x, 0))  # a Python 0 keeps x's dtype (NEP 50)


@kernel("Scale")
def _scale(op, cfg):
    s = op.attrs["scale"]
    dt = _dtype(op)
    if dt is not None:
        sv = NUMPY_DTYPES[dt](s)
        return lambda x: x * sv
    return lambda x: x * np.asarray(s, np.asarray(x).dtype)[()]


def _copy(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


@kernel("Copy")
def _copy_k(op, cfg):
    return _copy


@kernel("Sum")
def _sum(op, cfg):
    def total(*xs):
        if len(xs) == 1:
            return _copy(xs[0])
        return functools.reduce(operator.add, xs)
    return total


@kernel("Max")
def _max(op, cfg):
    return lambda *xs: _copy(xs[0]) if len(xs) == 1 else functools.reduce(np.maximum, xs)


@kernel("Min")
def _min(op, cfg):
    return lambda *xs: _copy(xs[0]) if len(xs) == 1 else functools.reduce(np.minimum, xs)


@kernel("Cast")
def _cast(op, cfg):
    to = NUMPY_DTYPES[dtype_from_code("Cast", op.attrs["to"])]

    def cast(x):
        return np.asarray(x).astype(to)[()] if np.ndim(x) == 0 else np.asarray(x).astype(to)
    return cast


@kernel("ConstantFill")
def _constant_fill(op, cfg):
    t = op.results[0].type
    dtype = NUMPY_DTYPES[t.dtype]
    value, extra = op.attrs["value"], tuple(op.attrs["extra_shape"] or ())
    as_shape = op.attrs["input_as_shape"]

    def fill(x):
        shape = tuple(int(d) for d in np.asarray(x).reshape(-1)) if as_shape else np.shape(x) + extra
        return to_value(np.full(shape, value, dtype=dtype))
    return fill


@kernel("IsEmpty")
def _is_empty(op, cfg):
    return lambda x: np.bool_(np.size(x) == 0)


@kernel("Print")
def _print(op, cfg):
    name = op.attrs.get("blob") or "tensor"

    def show(x):
        print(f"{name}: {x}", file=cfg.log or sys.stderr)
    return show


# --- counters
@kernel("CreateCounter")
def _create_counter(op, cfg):
    init = int(op.attrs["init_count"])
    return lambda: Counter(init)


@kernel("ResetCounter")
def _reset_counter(op, cfg):
    init = int(op.attrs["init_count"])
    return lambda c: c.reset(init)


kernel("CountUp")(lambda op, cfg: operator.methodcaller("count_up"))
kernel("CountDown")(lambda op, cfg: operator.methodcaller("count_down"))
kernel("RetrieveCount")(lambda op, cfg: operator.methodcaller("retrieve"))
kernel("CheckCounterDone")(lambda op, cfg: operator.methodcaller("done"))


# --- timers
@kernel("TimerBegin", per_instance=True)
def _timer_begin(op, cfg):
    name = op.attrs["counter_name"] or "timer"
    return lambda inst: Timer(name).begin


kernel("TimerEnd")(lambda op, cfg: operator.methodcaller("end"))
kernel("TimerGet")(lambda op, cfg: lambda t: np.int64(t.elapsed()))


@kernel("TimerGetAndEnd")
def _timer_get_and_end(op, cfg):
    def get_and_end(t):
        out = np.array([t.elapsed()], dtype=np.int64)
        t.end()
        return out
    return get_and_end


# --- workspace and Python
@kernel("GetAllBlobNames", per_instance=True)
def _blob_names(op, cfg):
    shared = bool(op.attrs["include_shared"])
    return lambda inst: lambda: np.array(inst.ws.names(shared), dtype=object)


class TensorCPU:
    """What a Python op sees for each input and output: ``.data``, ``.feed(x)``, ``.reshape(dims)``."""

    __slots__ = ("_v",)

    def __init__(self, value=None):
        self._v = value

    @property
    def data(self):
        if self._v is None:
            raise ValueError("this tensor has no data yet: feed() or reshape() it first")
        if isinstance(self._v, np.generic):
            self._v = np.array(self._v)
        return self._v

    @property
    def shape(self):
        return () if self._v is None else np.shape(self._v)

    def feed(self, value):
        self._v = np.array(value)

    def reshape(self, dims):
        dtype = np.asarray(self._v).dtype if self._v is not None else np.float32
        self._v = np.zeros(tuple(dims), dtype=dtype)

    def init(self, dims, dtype=np.float32):
        self._v = np.zeros(tuple(dims), dtype=dtype)

    def value(self):
        return to_value(self._v)


class PythonOpError(Exception):
    """An exception raised by the user's function inside a Python op."""


@kernel("Python", per_instance=True)
def _python(op, cfg):
    target = pyrefs.resolve(op.attrs["func"])
    n_out, name = len(op.results), op.attrs["name"]
    with_ws = bool(op.attrs["pass_workspace"])

    def make(inst):
        fn = target[0](*target[1], **target[2]) if isinstance(target, tuple) else target

        def call(*values):
            inputs = [TensorCPU(v) for v in values]
            outputs = [TensorCPU() for _ in range(n_out)]
            try:
                fn(inputs, outputs, inst.ws) if with_ws else fn(inputs, outputs)
            except Exception as e:
                raise PythonOpError(f"Python op {name!r} raised {type(e).__name__}: {e}") from e
            res = []
            for i, o in enumerate(outputs):
                if o._v is None:
                    raise PythonOpError(f"Python op {name!r} did not set output {i}")
                res.append(o.value())
            return None if n_out == 0 else res[0] if n_out == 1 else tuple(res)
        return call
    return make
