"""The numba backend's region compiler: the interpreter's, with islands compiled.

Each region is compiled as the interpreter compiles it, except that worthwhile runs
of numeric ops (``islands.partition``) become one call to a numba function, and
standalone fused groups call a fused kernel. If an island input is unset at run
time (a blob nothing wrote yet), the same ops run on the interpreter instead.

Compiled "hot" (hot.py), the call is made only once the function is ready; until then
the interpreter's code runs, timed:

    if n3 is None or v1 is None:      # not compiled yet, or an input unset
        _ht = c5()
        ... the island's ops, the interpreter's way ...
        h4.spent(c5() - _ht)          # hot enough: queued for compiling, n3 set when done
    else:
        v9, = n3(v1, v2)

Compiled before the run (DSLC_NUMBA_COMPILE=now), the same code is written and n3 set
before the run starts; either way n3 first times its calls against the interpreter's
(trial.py) and goes back to None for good if the interpreter's code was the faster.
With no race (DSLC_NUMBA_TRIAL_RUNS=0) a region compiled before the run is called
directly (``direct``).
"""
from __future__ import annotations

import os

import numpy as np

from dslc.backends.interp.codegen import Emitter, syntax_error
from dslc.backends.interp.kernels_nn import op_stream

from . import islands
from .cache import module_for
from .hot import CompileTimeout, Hot, over_limit, pool as hot_pool, switcher
from .lazy import CLOCK
from .trial import Trial
from .calls import FusedCall, IslandCall
from .failures import Sites
from dslc.ir.escape import source_text
from dslc.ir.types import COUNTER, NUMPY_DTYPES

from .kernels import draws, scalar, tensor
from .source import Writer, fused_source, helper_modules


# The ops whose interpreted kernels numba replaces with compiled loops (sparse.KERNELS,
# conv.KERNELS), named here so that a "hot" compile need not import them (they import
# numba) before one is hot; tests/backends/numba/test_hot.py checks the two agree.
HELPER_KERNELS = frozenset({
    "SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum", "ScatterWeightedSum", "SparseAdagrad",
    "RowWiseSparseAdagrad", "Conv", "ConvFused", "ConvGradient", "ConvTranspose", "ConvTransposeGradient",
    "MaxPool", "MaxPoolGradient"})


# The helper kernels whose compiled loops every op of the kind shares (conv.py's): their
# interpreted seconds count together (hot.Pool). (The sparse kernels could join; their
# ops are few per net.)
POOLED = frozenset({"Conv", "ConvFused", "ConvGradient", "ConvTranspose", "ConvTransposeGradient", "MaxPool",
                    "MaxPoolGradient"})


def helper_kernel(name: str):
    """numba's compiled-loop kernel factory for op ``name``, or None."""
    from . import conv, sparse  # compiled loops the interpreted ops call (they import numba)
    return sparse.KERNELS.get(name) or conv.KERNELS.get(name)


class NumbaEmitter(Emitter):
    backend = "numba"
    interpreting = False  # set while writing an island's interpreter fallback

    def __init__(self, cfg):
        super().__init__(cfg)
        self.hots: list = []

    @property
    def now(self) -> bool:
        return self.cfg.when == "now"

    @property
    def direct(self) -> bool:
        """Compiled callees bound as they are: compiled before the run, racing nothing."""
        return self.now and not self.cfg.trial_runs

    def kernel_entry(self, name: str):
        if name in HELPER_KERNELS and self.direct:
            return helper_kernel(name), False
        return super().kernel_entry(name)

    def finish(self):
        code = super().finish()
        for h in self.hots:  # (the namespace their callees are read from)
            h.ns = code.fn.__globals__
            if self.now:
                h.now()
        return code

    def hot(self, label: str, build, callee: str | None = None, pool=None, loc=None):
        """(callee, hot, clock): names of a Hot's callee (None until compiled, unless given),
        the Hot (counting in hot.Pool ``pool``, if given; ``loc``: the user's line a warning
        about it names), and the clock that times the interpreted runs."""
        trial = None
        if self.cfg.trial_runs:
            trial = Trial(label, self.cfg.trial_runs, self.cfg.report_trial)
            self.cfg.stats.trials.append(trial)
        h = Hot(label, build, self.cfg.hot_seconds, switcher(), trial, pool)
        h.name = callee or self.bind("n", None)
        h.loc = loc
        self.hots.append(h)
        self.cfg.hots.append(h)
        return h.name, self.bind("h", h), self.bind("c", CLOCK)

    def op(self, op, indent, loop_targets):
        if self.direct or self.interpreting or op.name not in HELPER_KERNELS or \
                super().kernel_entry(op.name) is None or super().kernel_entry(op.name)[1]:
            return super().op(op, indent, loop_targets)
        # the interpreter's kernel, timed; the compiled loops' replace it once hot
        clock = self.bind("c", CLOCK)
        self.emit(indent, f"_ht = {clock}()", op)
        before = set(self.env)
        super().op(op, indent, loop_targets)
        kname = [k for k in self.env if k not in before and k.startswith("k")]
        cfg = self.cfg
        _, h, _ = self.hot(f"{op.name} at {_where(op)}", lambda bg: helper_kernel(op.name)(op, cfg), kname[0],
                           hot_pool("conv") if op.name in POOLED else None)
        self.emit(indent, f"{h}.spent({clock}() - _ht)", op)

    def partition(self, r):
        if self.interpreting:
            return r.ops
        local = self.cfg.local_counters
        items = islands.partition(r, local, self.cfg.min_work, self.cfg.nn_min_work)
        for item in items:
            # (a Const outside an island is no work: the interpreter binds its value)
            if not isinstance(item, islands.Island) and item.name not in ("yield", "break_if", "fused", "Const"):
                self.cfg.stats.interpreted(item, "cold" if islands.compilable(item, local) else None)
        return items

    def island(self, island, indent, loop_targets):
        cfg = self.cfg
        if self.direct:
            try:
                call, args, streams = cfg.stats.timed(lambda: build_island(island, cfg))
            except CompileTimeout as e:  # (DSLC_NUMBA_COMPILE_LIMIT: the region stays interpreted)
                over_limit(_region(island), e.limit, island.ops[0].loc)
                self.interpreting = True
                for op in island.ops:
                    cfg.stats.interpreted(op, f"over DSLC_NUMBA_COMPILE_LIMIT ({e.limit:g} s)")
                    super().op(op, indent, loop_targets)
                self.interpreting = False
                return
            callee, hot = self.bind("n", call), None
        else:
            # (its source is written when it is hot: what the call passes is known before)
            args = [v for v in island.inputs if Writer().arg_or_literal(v) is None]
            streams = [o for top in island.ops for o in top.walk() if draws(o)]
            callee, hot, clock = self.hot(_region(island), lambda bg: cfg.stats.timed(
                lambda: late_island(island, cfg, args, streams, bg)), loc=island.ops[0].loc)
            call = None
        cfg.stats.islands.append((island, call))
        gens = []  # the random ops' generators: per instance, as the interpreter binds them
        for op in streams:
            self.makers.append(op_stream(op, self.cfg))
            gens.append(f"s{len(self.makers) - 1}")
        cond = " or ".join(([f"{callee} is None"] if hot else []) +
                           [f"{self.var(v)} is None" for v in args if v not in island.unread]) or "False"
        self.emit(indent, f"if {cond}:", island.ops[0])
        self.interpreting = True
        start = len(self.body)
        if hot:
            self.emit(indent + 1, f"_ht = {clock}()", island.ops[0])
        for op in island.ops:  # the interpreter's way, for unset inputs (and until compiled)
            super().op(op, indent + 1, loop_targets)
        if hot:
            self.emit(indent + 1, f"{hot}.spent({clock}() - _ht)", island.ops[0])
        if len(self.body) == start:  # (its ops bound constants only: no statement)
            self.emit(indent + 1, "pass", island.ops[0])
        self.interpreting = False
        self.emit(indent, "else:", island.ops[0])
        outs = [self.var(v) for v in island.outputs]
        lhs = (", ".join(outs) + (" = " if len(outs) == 1 else ", = ")) if outs else ""
        passed = [self.var(v) if v not in island.unread else
                  f"({self.var(v)} if {self.var(v)} is not None else {self.bind('p', stand_in(v))})" for v in args]
        self.emit_timed(indent + 1, f"{lhs}{callee}({', '.join(passed + gens)})", island.ops[0],
                        f"numba region ({len(island.ops)} ops)")

    def op_fused(self, op, indent, loop_targets):
        if self.interpreting or not islands.compilable(op) or islands.work(op) < self.cfg.min_work:
            self.cfg.stats.interpreted(op, "cold" if islands.compilable(op) else None)
            return super().op_fused(op, indent, loop_targets)
        cells = []
        for res in op.results:  # a store of the result in this region may lend its buffer
            stores = [u for u, _ in res.uses if u.name == "store" and u.parent is op.parent]
            cells.append(self.cell(stores[0].attrs["blob"]) if stores else "None")
        outs = [self.var(r) for r in op.results]
        lhs = ", ".join(outs) + (" = " if len(outs) == 1 else ", = ")
        args = [self.var(v) for v in op.operands] + cells
        if self.direct:
            call = self.cfg.stats.timed(lambda: build_fused(op, self.cfg))
            self.emit_timed(indent, f"{lhs}{self.bind('n', call)}({', '.join(args)})", op, "numba fused")
            return
        cfg = self.cfg
        callee, hot, clock = self.hot(f"a fused group at {_where(op)}",
                                      lambda bg: cfg.stats.timed(lambda: build_fused(op, cfg, worker=bg)))
        self.emit(indent, f"if {callee} is None:", op)
        self.emit(indent + 1, f"_ht = {clock}()", op)
        self.interpreting = True
        super().op_fused(op, indent + 1, loop_targets)
        self.interpreting = False
        self.emit(indent + 1, f"{hot}.spent({clock}() - _ht)", op)
        self.emit(indent, "else:", op)
        self.emit_timed(indent + 1, f"{lhs}{callee}({', '.join(args)})", op, "numba fused")


def stand_in(v):
    """A value of ``v``'s numba type that nothing reads (see Island.unread)."""
    t = tensor(v)
    dt = np.bool_ if t.dtype == "bool" else NUMPY_DTYPES[t.dtype]
    return dt(0) if t.shape == () else np.zeros((0,) * len(t.shape), dt)


def build_island(island, cfg):
    """Generate, write, import and compile the island's function."""
    w, source, args = write_island(island, cfg)
    return load_island(island, cfg, w, source, args), args, [op for _, op in w.streams]


def write_island(island, cfg):
    """(writer, source, arguments) of the island's function (no numba needed yet)."""
    w = Writer(_source_file(island.ops[0]), cfg.namer())
    params = w.island(island)
    source = w.module("kernel", params)
    cfg.stats.sources.append(source)
    args = [v for v in island.inputs if v in w.names and w.names[v] in params]
    return w, source, args


def late_island(island, cfg, args, streams, worker):
    """The IslandCall of an island whose call was written passing ``args`` and ``streams``."""
    w, source, written = write_island(island, cfg)
    if written != args or [op for _, op in w.streams] != streams:
        raise RuntimeError("the island's function takes other arguments than its call passes (dslc's bug)")
    return load_island(island, cfg, w, source, args, worker)


def load_island(island, cfg, w, source, args, worker=False):
    """The island's IslandCall: its module imported, its function compiled (or loaded)."""
    mod = _module(source, island.ops[0], helper_modules(w))
    fn = mod.kernel
    cfg.stats.compile(fn, [v.type for v in args], [c for _, c in w.consts], len(w.streams), worker, read_only=True)
    counters = [i for i, v in enumerate(args) if v.type == COUNTER]
    scalars = [i for i, v in enumerate(args) if scalar(v)]
    return IslandCall(fn, island.outputs, [c for _, c in w.consts], counters, w.sites, len(w.streams), scalars)


def build_fused(op, cfg, worker=False):
    sites = Sites()
    serial_src = _fused_module(op, False, sites)
    mod = _module(serial_src, op)
    cfg.stats.sources.append(serial_src)
    cfg.stats.fused += 1
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    cfg.stats.compile(mod.kernel, types, [], worker=worker)
    parallel = None
    if cfg.parallel:
        par_src = _fused_module(op, True, Sites())  # the same sites again
        par = _module(par_src, op)
        cfg.stats.sources.append(par_src)
        cfg.stats.compile(par.kernel, types, [], worker=worker)
        parallel = par.kernel
    return FusedCall(mod.kernel, parallel, len(op.operands), [r.type for r in op.results],
                     _fallback(op, cfg), cfg.par_min, sites)


def _fused_module(op, parallel: bool, sites) -> str:
    from .source import HEADER
    return HEADER.format(source=source_text(_source_file(op))) + "\n\n" + fused_source(op, "kernel", parallel, sites) + "\n"


def _module(source: str, op, shared=()):
    """``module_for(source, shared)``; a SyntaxError is the job's nesting depth or our bug (``syntax_error``)."""
    try:
        return module_for(source, shared)
    except SyntaxError as e:
        raise syntax_error(e, op, "numba") from None


def _fallback(op, cfg):
    """The fused group run op by op with the interpreter's kernels."""
    from dslc.backends.interp.kernels import Constant, kernel_entry
    body = op.regions[0]
    steps = []
    for o in body.ops[:-1]:
        k = kernel_entry(o.name)[0](o, cfg)
        steps.append((o, k))
    outputs = body.ops[-1].operands

    def run(*values):
        env = dict(zip(body.args, values))
        for o, k in steps:
            env[o.result] = k.value if isinstance(k, Constant) else k(*[env[v] for v in o.operands])
        outs = [env[v] for v in outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


def _region(island) -> str:
    """How a warning and the summary name an island: its first op, line and size."""
    return f"{island.ops[0].name} at {_where(island.ops[0])} ({len(island.ops)} ops)"


def _where(op) -> str:
    return f"{os.path.basename(op.loc.file)}:{op.loc.line}" if op.loc and op.loc.line else "an unknown line"


def _source_file(op) -> str:
    return op.loc.file if op.loc and op.loc.line else ""


__all__ = ["NumbaEmitter", "build_fused", "build_island", "scalar", "tensor"]
