"""The xla backend's region compiler: the interpreter's, with runs of ops as jax.jit calls.

Each region is compiled as the interpreter compiles it, except that the runs
``regions.partition`` picks become one call of an XLA executable, compiled ahead for
the IR's shapes and dtypes. Beside each call stays the interpreter's code for the same
ops, which runs when an input is unset (a blob nothing wrote yet: the interpreter
reports it), when a value does not have the type the executable was compiled for, or
when one of the run's checks fails (a label outside the classes: the interpreter
reports the error at the user's line)::

    v9 = None if v1 is None or v2 is None else n0(v1, v2)
    if v9 is None:
        ... the interpreter's code for the run's ops ...
    else:
        v7, v8, = v9

Each call also races the interpreter's code for its run in the first runs
(DSLC_XLA_TRIAL_RUNS each way, default 3; 0: XLA's always): XLA's CPU convolutions, for
one, can lose to the interpreter's im2col and OpenBLAS GEMM. The faster is kept for the
rest of the process (``RunCall``, over backends/common/race.py); the answers are the same
either way, and the verdict is in the compile summary and, with ``--profile``, in the
profile's report.
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dslc.backends.common.race import Race, noting
from dslc.backends.interp.codegen import Emitter
from dslc.backends.interp.kernels import kernel_entry

from . import kernels_conv, kernels_shape  # noqa: F401  (register their kernels)
from .kernels import checking, dtype
from .regions import Loop, Run, min_work_default, partition, trial_runs

X64 = ("i64", "f64")


class XlaEmitter(Emitter):
    backend = "xla"
    interpreting = False  # set while writing a run's interpreter fallback

    def partition(self, r):
        if self.interpreting:
            return r.ops
        return partition(r, self.cfg.stats.interpreted, self.cfg.min_work)

    def island(self, run: Run, indent, loop_targets):
        call = self.cfg.stats.timed(lambda: build(run, self.cfg))
        self.cfg.stats.runs.append(run)
        result = f"v0_xla{len(self.cfg.stats.runs)}"
        args = [self.var(v) for v in run.inputs]
        if _ON_CPU():
            realign = self.bind("c", aligned)
            for v in run.inputs:
                load = getattr(v, "owner", None)
                if load is not None and load.name == "load":
                    self.emit(indent, f"{self.var(v)} = {self.cell(load.attrs['blob'])}.v = {realign}({self.var(v)})",
                              load)
        unset = " or ".join(f"{a} is None" for a in args)
        callee = self.bind("n", call)
        self.cfg.stats.calls.append(call)
        head = f"{result} = None if {unset} else {callee}({', '.join(args)})" if args else \
            f"{result} = {callee}()"
        racing = call.phase != KEPT
        if racing:
            clock = self.bind("c", call.clock)  # (the race's: both sides on one clock)
            self.emit(indent, f"_tr = {clock}()", run.ops[0])
        self.emit_timed(indent, head, run.ops[0], kind="xla run")
        self.emit(indent, f"if {result} is None:", run.ops[0])
        self.interpreting = True
        for op in run.ops:  # the interpreter's way
            super().op(op, indent + 1, loop_targets)
        if racing:
            self.emit(indent + 1, f"{callee}.interpreted({clock}() - _tr)", run.ops[0])
        else:
            self.emit(indent + 1, "pass", run.ops[0])
        self.interpreting = False
        if run.outputs:
            self.emit(indent, "else:", run.ops[0])
            self.emit(indent + 1, f"{', '.join(self.var(v) for v in run.outputs)}, = {result}", run.ops[0])


def _ON_CPU() -> bool:
    return jax.devices()[0].platform == "cpu"


def aligned(x):
    """``x``, or for a large array not on a 64-byte boundary, the same values in XLA's own
    memory (read-only, seen through numpy): XLA on the CPU takes an aligned array as it is
    and copies any other on every call (ResNet-18's 33 MB of fed weights: 22 ms of a
    160 ms batch-1 run). The region writes it back into the blob it loaded, so the next
    call finds it aligned; the values are the same, and a kernel that would write into
    it in place sees it read-only and writes a new array, as for any read-only blob."""
    if type(x) is np.ndarray and x.nbytes >= 65536 and x.ctypes.data % 64:
        return np.asarray(jax.device_put(x))
    return x


def _x64(run: Run) -> bool:
    nested = [o for op in run.ops for o in op.walk()]
    values = list(run.inputs) + [r for o in nested for r in o.results] + \
        [a for o in nested for r in o.regions for a in r.args]
    return any(v.type.dtype in X64 for v in values) or any(o.name == "Adam" for o in nested)


def _constant(op, cfg):
    return np.asarray(kernel_entry("Const")[0](op, cfg).value)


def build(run: Run, cfg) -> "RunCall":
    """The run as one function of its inputs, jitted and compiled for their types."""
    consts = {op.result: _constant(op, cfg) for top in run.ops for op in top.walk() if op.name == "Const"}
    inputs, outputs = list(run.inputs), list(run.outputs)

    def body(*args):
        env = dict(zip(inputs, args))
        env.update(consts)
        with checking() as checks:
            _evaluate(run.kernels, env)
            return [env[v].astype(dtype(v)) for v in outputs], checks.all()

    x64 = _x64(run)
    specs = [jax.ShapeDtypeStruct(tuple(v.type.shape), dtype(v)) for v in inputs]
    with _scope(x64):
        compiled = cfg.stats.compile(jax.jit(body), specs)
    return RunCall(compiled, [dtype(v) for v in outputs], x64, trial_runs(), run.where(), noting(cfg.profile))


def _evaluate(steps, env) -> None:
    """Trace ``steps`` ((op, its kernel) in order) over ``env`` (value -> jax value)."""
    for op, fn in steps:
        if op.name in ("Const", "yield"):
            continue
        if op.name == "must":
            env[op.result] = env[op.operands[0]]
        elif isinstance(fn, Loop):
            env.update(zip(op.results, _loop(fn, env)))
        else:
            got = fn(*[env[v] for v in op.operands])
            if len(op.results) == 1:
                env[op.results[0]] = got
            else:
                env.update(zip(op.results, got))


def _loop(loop: Loop, env) -> list:
    body = loop.op.regions[0]
    index, carried = body.args[0], body.args[1:]
    unread = set(loop.unread())
    start = tuple(jnp.zeros(tuple(a.type.shape), dtype(a)) if v in unread else jnp.asarray(env[v]).astype(dtype(a))
                  for v, a in zip(loop.op.operands[1:], carried))
    results = body.ops[-1].operands

    def step(i, values):
        inner = dict(env)
        inner[index] = jnp.asarray(i).astype(dtype(index))
        inner.update(zip(carried, values))
        _evaluate(loop.steps, inner)
        return tuple(jnp.asarray(inner[v]).astype(dtype(a)) for v, a in zip(results, carried))
    return list(lax.fori_loop(0, loop.trips, step, start))


def _scope(x64: bool):
    """64-bit types on in XLA for this run only (a run of int64 or float64 values)."""
    return jax.enable_x64(True) if x64 else contextlib.nullcontext()


XLA_RUNS, INTERP_RUNS, KEPT = range(3)  # a RunCall's phases


class RunCall(Race):
    """Calls a run's executable: its outputs as numpy values (a rank-0 one as a numpy
    scalar, as the interpreter keeps them), or None when the interpreter must run it.

    The race (backends/common/race.py: the samples, the verdict, its line): the first
    call (XLA's warm-up) and ``runs`` timed ones run XLA's code; the next ``runs`` answer
    None, so the interpreter's code runs, and the generated code reports each one's
    seconds (``interpreted``); then the verdict is given once, and a call of a run the
    interpreter won answers None from then on."""

    __slots__ = ("executable", "dtypes", "x64", "phase")

    def __init__(self, executable, dtypes, x64, runs=0, label="", report=None):
        super().__init__(label, runs, "xla", report)
        self.executable, self.dtypes, self.x64 = executable, dtypes, x64
        self.phase = XLA_RUNS if runs else KEPT
        if not runs:
            self.kept = "xla"

    def __call__(self, *args):
        phase = self.phase
        if phase == KEPT:
            return self.call(args) if self.kept == "xla" else None
        if phase == INTERP_RUNS:
            return None
        t = self.clock()
        got = self.call(args)
        if got is not None:
            self.compiled.append(self.clock() - t)
            if self.compiled_done():
                self.phase = INTERP_RUNS
        return got

    def interpreted(self, seconds: float) -> None:
        """The interpreter ran the run, in ``seconds``; counted while its turn lasts."""
        if self.phase != INTERP_RUNS:
            return
        self.interp.append(seconds)
        if self.interp_done():
            self.judge()
            self.phase = KEPT
            self.tell()

    def call(self, args):
        try:
            with _scope(self.x64):
                outs, ok = self.executable(*args)
        except (TypeError, ValueError):  # a value of another shape or dtype than the IR's
            return None
        if not ok:
            return None
        return [_numpy(o) for o in outs]


def _numpy(x):
    a = np.asarray(x)
    return a[()] if a.ndim == 0 else a
__all__ = ["XlaEmitter", "build", "min_work_default"]
