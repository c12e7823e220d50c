"""The interpreter's kernels: one per declared op, resolved once per op before running.

``@kernel("Add")`` registers a factory ``f(op, cfg)`` that returns the callable run
for that op (or a ``Constant``). ``per_instance=True`` factories return a maker
``make(inst)`` instead, called each time the op is bound to a workspace (Python op
builders, timers, Print's every_n count). Values are numpy scalars for rank 0 and
arrays otherwise (a rank-0 string is a Python ``str``).

Kernels raise ``DSLError`` (with a hint) for the user's mistakes; the executor adds
the op's line and the task name.
"""
from __future__ import annotations

from collections.abc import Mapping

import functools
import importlib
import operator
import sys
import weakref

import numpy as np

from dslc.runtime.ieee import user_numpy
from dslc.runtime.resources import Counter, Timer
from dslc.runtime import blobproto, logfiles
from dslc.runtime.workspace import to_user, to_value
from dslc.ir import pyrefs
from dslc.ir.budget import check_size, foldable
from dslc.ir.diagnostics import DSLError
from dslc.ir.opdef import OPS
from dslc.ir.ops import numeric as num
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.ops.tensor import fill_value
from dslc.ir.types import (ANY, COUNTER, INT_DTYPES, NUMPY_DTYPES, TIMER, HandleType, TensorType,
                           dtype_of_numpy)

KERNELS: dict[str, tuple] = {}
DEFINED_IN: dict[str, str] = {}  # op name -> the module that registered its kernel

# The kernels of the ops an ``ir/ops`` module declares live in the kernels module named
# here, imported the first time a program uses one of those ops, so a first run imports
# only the kernels it needs (tensor and effect ops: this module). For an op not found
# there, every ``kernels_*`` module of this package is imported.
_HOMES = {"db": "kernels_db", "dbinput": "kernels_db", "data": "kernels_data", "index": "kernels_data", "records": "kernels_records",
          "shape": "kernels_records", "collect": "kernels_collect", "nn": "kernels_nn",
          "losses": "kernels_nn", "optim": "kernels_nn", "nn_grads": "kernels_nn", "activations": "kernels_nn",
          "segments": "kernels_nn", "products": "kernels_nn",
          "conv": "kernels_nn", "normalization": "kernels_nn", "reductions": "kernels_nn",
          "utility": "kernels_nn", "recurrent": "kernels_nn", "collective": "kernels_nn", "adaptive": "kernels_nn",
          "quantized": "kernels_nn", "pointwise": "kernels_nn", "spatial": "kernels_nn",
          "conv_fused": "kernels_nn", "norms": "kernels_nn", "features": "kernels_nn",
          "tt": "kernels_nn", "metrics": "kernels_nn", "boxes": "kernels_nn", "resample": "kernels_nn",
          "yellowfin": "kernels_nn"}


def kernel_entry(name: str):
    """``(factory, per_instance)`` registered for op ``name`` (None if no module has one)."""
    got = KERNELS.get(name)
    if got is None:
        opdef = OPS.get(name)
        home = _HOMES.get(opdef.module.rpartition(".")[2]) if opdef is not None else None
        if home is not None:
            importlib.import_module(f"{__package__}.{home}")
        got = KERNELS.get(name)
        if got is None:
            load_all()
            got = KERNELS.get(name)
    return got


@functools.cache  # (once: an op no module has a kernel for would list the package again)
def load_all() -> None:
    """Import every kernels module of this package (each registers its kernels)."""
    import pkgutil
    for info in pkgutil.iter_modules(sys.modules[__package__].__path__):
        if info.name.startswith("kernels_"):
            importlib.import_module(f"{__package__}.{info.name}")


class Constant:
    """A kernel result known before running (the value is bound into the code)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def kernel(name: str, per_instance: bool = False):
    """Register a kernel factory for the op ``name``."""
    def register(factory):
        KERNELS[name] = (factory if per_instance else _typed(factory), per_instance)
        DEFINED_IN[name] = factory.__module__
        return factory
    return register


# --- operands whose types are known only at run time (Python op outputs, merged types)
def _typed(factory):
    """Wrap ``factory`` so that ops with dynamically typed operands check them when run.

    The check is the op's own type inference applied to the runtime types, so an
    ``Add`` of a Python op's int32 output and a float32 fails as it would statically.
    """
    def make(op, cfg):
        k = factory(op, cfg)
        if isinstance(k, Constant) or op.opdef.infer is None or all(map(_static, op.operands)):
            return k
        infer, attrs, n = op.opdef.infer, op.attrs, len(op.results)

        def checked(*values):
            infer([runtime_type(v) for v in values], attrs, n)
            return k(*values)
        return checked
    return make


def _static(v) -> bool:
    t = v.type
    return isinstance(t, HandleType) or (isinstance(t, TensorType) and t.dtype is not None)


def runtime_type(v):
    """The IR type of a runtime value."""
    if isinstance(v, (np.ndarray, np.generic)):
        try:
            return TensorType(dtype_of_numpy(v.dtype), np.shape(v))
        except ValueError:
            return ANY
    if isinstance(v, str):
        return TensorType("str")
    if isinstance(v, Counter):
        return COUNTER
    if isinstance(v, Timer):
        return TIMER
    return ANY


def _dtype(op, i=0):
    t = op.results[i].type if op.results else None
    return t.dtype if isinstance(t, TensorType) else None


# --- constants
@kernel("Const")
def _const(op, cfg):
    return Constant(to_value(op.attrs["value"]))


@kernel("ConstantFill")
def _constant_fill(op, cfg):
    if not op.operands:  # the lowering folds the small ones into Const; a parsed module may not
        fill = functools.partial(op.opdef.fold, **op.opdef.known_attrs(op.attrs))
        if foldable(op.result.type.shape):
            return Constant(to_value(fill()))
        return lambda: to_value(fill())  # (a large one is made when it runs, each time, as Caffe2 does)
    dt = _dtype(op)
    value = fill_value(op.attrs, dt)
    extra, as_shape = tuple(op.attrs["extra_shape"] or ()), bool(op.attrs["input_as_shape"])
    if len(op.operands) == 2:  # (the value from the second input, each run)
        return lambda x, v: num.fill_like(x, num.fill_value_of(v), dt, extra, as_shape)
    return lambda x: num.fill_like(x, value, dt, extra, as_shape)


# --- elementwise arithmetic, comparisons, logic: the declarations' numeric semantics
def _binary(name, fn=None, pick=None):
    """Register ``fn`` (or ``pick(op)``'s choice) with Caffe2's legacy broadcast when asked."""
    @kernel(name)
    def factory(op, cfg):
        f = pick(op) if pick is not None else fn
        if op.attrs.get("broadcast"):
            axis = int(op.attrs.get("axis", -1))
            return lambda a, b: f(a, num.legacy_align(a, b, axis))
        return f


def _scalars(op) -> bool:
    """Every operand is statically a rank-0 tensor (so Python-level fast paths apply)."""
    return all(isinstance(v.type, TensorType) and v.type.shape == () for v in op.operands)


def _logic(array_fn, scalar_fn):
    """Bool logic: ``scalar_fn`` on rank-0 operands (a flag may be a Python bool), else numpy."""
    return lambda op: scalar_fn if _scalars(op) else array_fn


def _comparison(fn):
    """numpy's comparison for numbers; strings (Python strs at rank 0) need a numpy bool made."""
    wrapped = num.compare(fn)

    def pick(op):
        dtypes = [getattr(v.type, "dtype", None) for v in op.operands]
        return fn if all(d is not None and d != "str" for d in dtypes) else wrapped
    return pick


_TRUE, _FALSE = np.True_, np.False_
for _n, _f in [("Add", operator.add), ("Sub", operator.sub), ("Mul", operator.mul)]:
    _binary(_n, _f)
for _n, _f in [("GE", operator.ge), ("GT", operator.gt), ("LE", operator.le), ("LT", operator.lt),
               ("EQ", operator.eq), ("NE", operator.ne)]:
    _binary(_n, pick=_comparison(_f))
_binary("And", pick=_logic(np.logical_and, lambda a, b: _TRUE if a and b else _FALSE))
_binary("Or", pick=_logic(np.logical_or, lambda a, b: _TRUE if a or b else _FALSE))
_binary("Xor", pick=_logic(np.logical_xor, lambda a, b: _TRUE if bool(a) != bool(b) else _FALSE))
for _n, _f in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)]:
    _binary(_n, _f)
_not = _logic(np.logical_not, lambda x: _FALSE if x else _TRUE)
kernel("Not")(lambda op, cfg: _not(op))


def _div_for(op):
    """Pick the division once: the result dtype is known unless an operand's type is not."""
    dt = _dtype(op)
    if dt in INT_DTYPES:
        return num.int_div
    return num.div if dt is None else operator.truediv


_binary("Div", pick=_div_for)


def _unary(name, fn):
    kernel(name)(lambda op, cfg: fn)


for _n, _f in [("Negative", operator.neg), ("Abs", np.abs),
               ("Sqr", num.sqr), ("Sqrt", np.sqrt), ("Exp", np.exp), ("Log", np.log),
               ("Relu", num.relu), ("ZerosLike", np.zeros_like), ("Copy", num.copy), ("IsEmpty", num.is_empty),
               ("HasElements", num.has_elements), ("EnsureDense", num.copy),
               ("FloatToHalf", lambda x: np.asarray(x, np.float16)),
               ("HalfToFloat", lambda x: np.asarray(x, np.float32))]:
    _unary(_n, _f)


@kernel("Scale")
def _scale(op, cfg):
    dt = _dtype(op)
    if dt is None:
        return functools.partial(num.scale, scale=op.attrs["scale"])
    sv = NUMPY_DTYPES[dt](op.attrs["scale"])  # converted once: x's dtype is known
    return lambda x: x * sv


for _n, _f in [("Sum", operator.add), ("Max", np.maximum), ("Min", np.minimum)]:
    kernel(_n)(lambda op, cfg, f=num.variadic(_f): f)


@kernel("Cast")
def _cast(op, cfg):
    return functools.partial(num.cast, dtype=_dtype(op))


# --- printing
@kernel("Print", per_instance=True)
def _print(op, cfg):
    name = op.attrs.get("blob") or "tensor"
    every_n, limit = max(1, int(op.attrs["every_n"])), int(op.attrs["limit"])
    files = logfiles.LogFiles() if op.attrs["to_file"] else None

    def make(inst):
        runs = [0]  # this op instance's call count: print calls 1, n+1, 2n+1 ...
        file = logfiles.path(inst.ws.root(), name, ".log") if files is not None else None

        def show(x):
            runs[0] += 1
            if (runs[0] - 1) % every_n == 0:
                if file is not None:  # (Caffe2's file: its own format)
                    files.write(file, logfiles.tensor_line(name, to_user(x), limit))
                    return
                # one write per line, so lines from concurrent instances do not interleave
                (cfg.log or sys.stderr).write(f"{name}: {_format(x, limit)}\n")
        return show
    return make


def _format(x, limit: int) -> str:
    """The tensor's values; with ``limit`` > 0, only the first ``limit`` of them."""
    if limit > 0 and isinstance(x, np.ndarray) and x.size > limit:
        return np.array2string(x.reshape(-1)[:limit])[:-1] + " ...]"
    return str(x)


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
_TIMER_HINTS = {
    "TimerBegin": "end the timer (TimerEnd or TimerGetAndEnd) before this TimerBegin runs again",
    "TimerEnd": "start it with TimerBegin first, and end it once per TimerBegin",
    "TimerGet": "read it between its TimerBegin and its TimerEnd",
    "TimerGetAndEnd": "start it with TimerBegin first, and end it once per TimerBegin",
}


def _timer_step(name, step):
    """Run a timer method; misuse (not running / already running) is the user's error."""
    try:
        return step()
    except RuntimeError as e:
        raise DSLError(f"{name}: {e}", hint=_TIMER_HINTS[name]) from None


@kernel("TimerBegin", per_instance=True)
def _timer_begin(op, cfg):
    name = op.attrs["counter_name"] or "timer"

    def make(inst):
        timer = Timer(name)  # each bound op owns its timer, as in Caffe2
        return lambda: _timer_step("TimerBegin", timer.begin)
    return make


kernel("TimerEnd")(lambda op, cfg: lambda t: _timer_step("TimerEnd", t.end))
kernel("TimerGet")(lambda op, cfg: lambda t: np.int64(_timer_step("TimerGet", t.elapsed)))


@kernel("TimerGetAndEnd")
def _timer_get_and_end(op, cfg):
    def get_and_end(t):
        out = np.array([_timer_step("TimerGetAndEnd", t.elapsed)], dtype=np.int64)
        t.end()
        return out
    return get_and_end


# --- workspace and Python
@kernel("GetAllBlobNames", per_instance=True)
def _blob_names(op, cfg):
    shared = bool(op.attrs["include_shared"])
    return lambda inst: lambda: np.array(inst.ws.names(shared), dtype=object)


@kernel("EstimateAllBlobSizes", per_instance=True)
def _blob_sizes(op, cfg):
    shared, chunking = bool(op.attrs["include_shared"]), _chunk_sizes(op.attrs["options"])
    outputs = [_stored_as(r) for r in op.results]

    def run(inst):
        def estimate():
            names = sorted(set(inst.ws.names(shared)) | {o for o in outputs if o})
            # (the outputs are estimated as what they will hold: a name and a size per blob)
            will = {outputs[0]: np.array(names, dtype=object), outputs[1]: np.zeros(len(names), np.int64)}
            sizes = [blobproto.estimate_size(n, will[n] if n in will else _value(inst.ws, n), *chunking(n))
                     for n in names]
            return np.array(names, dtype=object), np.array(sizes, dtype=np.int64)
        return estimate
    return run


def _stored_as(result) -> str:
    """The blob a result is stored to ("" if none)."""
    return next((str(user.attrs["blob"]) for user, _ in result.uses if user.name == "store"), "")


def _value(ws, name):
    cell = ws.lookup(name)
    return None if cell is None else cell.v


def _chunk_sizes(options):
    """name -> (Save's chunk_size for it, whether it saves float32 as bfloat16): those of the
    first SerializationOptions entry whose blob_name_regex matches the whole name (0, the
    default, and no if none)."""
    try:
        rules = blobproto.save_rules(options)
    except ValueError as e:
        raise DSLError(f"EstimateAllBlobSizes' options: {e}", hint="pass options=caffe2_pb2.SerializationOptions(...)")

    def chunking(name):
        rule = blobproto.rule_for(name, rules)
        return (0, False) if rule is None else (rule[1] or 0, rule[2])
    return chunking


class TensorCPU:
    """What a Python op sees for each input and output: ``.data``, ``.feed(x)``, ``.reshape(dims)``."""

    __slots__ = ("_v",)

    def __init__(self, value=None):
        self._v = value

    @property
    def data(self):
        """The numpy array (writable for outputs; an output must be fed or reshaped first)."""
        if self._v is None:
            raise ValueError("this tensor has no data yet: feed() or reshape() it first")
        if not isinstance(self._v, np.ndarray):
            self._v = np.array(self._v, dtype=object if isinstance(self._v, str) else None)
        return self._v

    @property
    def shape(self):
        return () if self._v is None else np.shape(self._v)

    def feed(self, value):
        self._v = np.array(value)

    def reshape(self, dims):
        dtype = np.asarray(self._v).dtype if self._v is not None else np.float32
        check_size("Python op: reshape", dims, dtype)
        self._v = np.zeros(tuple(dims), dtype=dtype)

    def init(self, dims, dtype=np.float32):
        """Allocate zeros of shape ``dims``; ``dtype`` is a core.DataType code or a numpy dtype."""
        if isinstance(dtype, (int, np.integer)):  # Caffe2 passes DataType codes here
            dtype = NUMPY_DTYPES[dtype_from_code("init", dtype)]
        check_size("Python op: init", dims, dtype)
        self._v = np.zeros(tuple(dims), dtype=dtype)

    def value(self):
        """The runtime value (unicode arrays become object arrays, as dslc strings are)."""
        v = self._v
        if isinstance(v, np.ndarray) and v.dtype.kind == "U":
            v = v.astype(object)
        return to_value(v)


class WorkspaceView:
    """The workspace a ``pass_workspace=True`` Python op receives (Caffe2's C.Workspace calls)."""

    __slots__ = ("_ws",)

    def __init__(self, ws):
        self._ws = ws

    def has_blob(self, name) -> bool:
        return self._ws.has_blob(str(name))

    def fetch_blob(self, name):
        v = self._ws.fetch(str(name))
        return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v

    def feed_blob(self, name, value) -> bool:
        self._ws.feed(str(name), value)
        return True

    @property
    def blobs(self) -> "_Blobs":
        """{name: blob} of the workspace; a blob has ``fetch()`` and ``feed(value)``, as in Caffe2."""
        return _Blobs(self)

    def __getattr__(self, name):
        return getattr(self._ws, name)


class _Blob:
    __slots__ = ("_view", "name")

    def __init__(self, view, name):
        self._view, self.name = view, name

    def fetch(self):
        return self._view.fetch_blob(self.name)

    def feed(self, value) -> bool:
        return self._view.feed_blob(self.name, value)


class _Blobs(Mapping):
    """A workspace's blobs by name, read when asked (Caffe2's ``ws.blobs``)."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def __getitem__(self, name):
        if not self._view.has_blob(name):
            raise KeyError(name)
        return _Blob(self._view, str(name))

    def __iter__(self):
        return iter(self._view._ws.names())

    def __len__(self):
        return len(self._view._ws.names())


class PythonOpError(Exception):
    """An exception raised by the user's function inside a Python op."""


@kernel("Python", per_instance=True)
def _python(op, cfg):
    target = pyrefs.resolve(op.attrs["func"])  # (codegen locates its errors at the op)
    n_out, name = len(op.results), op.attrs["name"]
    with_ws = bool(op.attrs["pass_workspace"])

    built = weakref.WeakKeyDictionary()  # workspace -> the function its builder made there

    def make(inst):
        if isinstance(target, tuple):
            # (as Caffe2 builds it when it makes the op: once for a compiled program in a
            # workspace, however many times it runs there, so the function keeps its state)
            fn = built.get(inst.ws)
            if fn is None:
                fn = built[inst.ws] = target[0](*target[1], **target[2])
        else:
            fn = target
        extra = (WorkspaceView(inst.ws),) if with_ws else ()

        def call(*values):
            inputs = [TensorCPU(v) for v in values]
            outputs = [TensorCPU() for _ in range(n_out)]
            try:
                with user_numpy():
                    fn(inputs, outputs, *extra)
            except Exception as e:
                raise PythonOpError(f"Python op {name!r} raised {type(e).__name__}: {e}") from e
            # (an output the function leaves alone is a blob holding nothing, as Caffe2's
            # uninitialized tensor: reading it later is the located "holds nothing" error)
            res = [None if o._v is None else o.value() for o in outputs]
            return None if n_out == 0 else res[0] if n_out == 1 else tuple(res)
        return call
    return make
