"""The numba backend: hot loop nests and fused kernels compiled, the rest interpreted.

After the pass pipeline has promoted blobs, a loop nest is pure dataflow; the
numba backend compiles such islands (``islands``) into generated Python functions
(``source``) decorated with ``numba.njit``, cached on disk by content (``cache``),
and runs everything else with the interpreter's runtime in the same workspace. By
default regions are split into islands only once they turn out hot (``lazy``), and
islands compiled only once they do (``hot``).
The answers are the interpreter's: the test suite runs on both and compares.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter

import numpy as np

from dslc.ir.cores import usable_cpus
from dslc.backends.interp.codegen import compile_region
from dslc.backends.common.stats import CompileStats
from dslc.backends.interp.executor import Executor
from dslc.runtime.memory import keep_freed_memory
from dslc.runtime.streams import session_seed
from dslc.ir import Module, settings

from dslc.ir.analysis import volatile_blobs
from dslc.ir.types import COUNTER

# (the rest of the backend, and numba, are imported when a region is split into islands:
# a "hot" compile of a job that ends first imports nothing more, lazy.py)
from . import islands

PAR_MIN = 1 << 22  # elements before a fused kernel's parallel variant pays for its threads


class Stats(CompileStats):
    """What compiling one module did (``dslc compile`` prints it). (Plain classes here, not
    dataclasses: making a dataclass at import execs generated code, milliseconds of every
    first run on this backend.)"""

    def __init__(self):
        super().__init__()
        self.islands: list = []
        self.fused = 0
        self.sources: list = []
        self.cache_hits = 0
        # functions this process had compiled already (a variant of the module for other sizes
        # generates the same text: its kernels are reused, neither compiled nor loaded again)
        self.reused = 0
        self.trials: list = []  # each compiled region's race against the interpreter

    def interpreted(self, op, reason) -> None:
        if op.name in ("yield", "break_if"):
            return
        why = reason or _why(op)
        self.interp[(why, op.name)] += 1

    def compile(self, fn, types, consts, streams=0, worker=False, read_only=False) -> None:
        """Compile ``fn`` now for the IR's argument types, then ``streams`` random generators
        and the constants (numba loads it from its cache if it can; ``worker``: a function
        the cache lacks is compiled into it by the compile worker first, see hot.py).

        ``read_only``: the function never writes its array arguments (an island's inputs are
        SSA values), so they are typed read-only, and one compile takes every argument: numba
        passes a writeable array where a read-only one is declared, but not the reverse, and
        a run's arrays are either (a filled constant is read-only, the same blob written by a
        step is not): typed as writeable, a training step compiled again for each mix of them
        its first steps met (three compiles of the whole step, not one)."""
        from . import hot
        sig = tuple(_numba_type(t, read_only) for t in types) + (_generator_type(),) * streams + \
            tuple(_numba_type_of(c) for c in consts)
        if sig in fn.overloads:
            self.reused += 1
            if read_only:
                _accept_writeable(fn)
            return
        elsewhere = False  # (compiled by the worker: this process loads it from the cache)
        if worker:
            hot.compile_through_worker(fn, sig)
        else:
            hot.switcher().say_once("now", "dslc: numba is compiling the job's kernels before it runs "
                                    "(or loading them from the cache: DSLC_NUMBA_COMPILE=now)")
            limit = islands.compile_limit_default()
            if limit:  # (in the worker, which is stopped past the limit: CompileTimeout)
                elsewhere = hot.compile_through_worker(fn, sig, timeout=limit)
        before = sum(fn.stats.cache_hits.values())
        fn.compile(sig)
        hit = sum(fn.stats.cache_hits.values()) > before and not elsewhere
        self.cache_hits += hit
        self.compiled += not hit
        if read_only:
            _accept_writeable(fn)


def _accept_writeable(fn) -> None:
    """Let a call passing writeable arrays where ``fn``'s compile declares read-only ones use
    that compile, as numba itself does where it may not compile (the conversion is safe: the
    same machine code, only typing differs). Where it may, numba's dispatcher takes exact
    matches only and would compile the function again for each mix of writeable and
    read-only arguments; here the first call of each mix finds the compile, and the
    dispatcher's table then sends the mix to it directly."""
    if "_compile_for_args" in vars(fn):
        return
    compile_new = fn._compile_for_args

    def compile_for_args(*args, **kws):
        if not kws:
            actual = tuple(fn.typeof_pyval(a) for a in args)
            for declared, cres in list(fn.overloads.items()):
                if len(declared) == len(actual) and all(map(_takes, declared, actual)):
                    fn._insert([t._code for t in actual], cres.entry_point, cres.objectmode)
                    return cres.entry_point
        return compile_new(*args, **kws)

    fn._compile_for_args = compile_for_args


def _takes(declared, actual) -> bool:
    """Whether a parameter typed ``declared`` takes an ``actual`` argument as it is."""
    import numba
    return declared == actual or isinstance(actual, numba.types.Array) and actual.mutable and \
        declared == actual.copy(readonly=True)


def _why(op) -> str:
    from .kernels import EXPR
    if op.name in ("load", "store", "flag", "must"):
        return "workspace access"
    if op.name in ("parallel", "scope", "reporting", "concurrent"):
        return "threads and workspaces"
    if op.opdef.effects:
        return f"{op.opdef.effects[0].resource} effects"
    if op.name not in EXPR and not op.regions:
        return "no numba kernel"
    return "types numba cannot hold"


def _generator_type():
    import numba
    return numba.typeof(np.random.default_rng(0))


def _numba_type(t, read_only=False):
    import numba
    from numba import types as nt

    if t == COUNTER:
        return numba.types.Array(nt.int64, 1, "C")  # a thread-local counter's count (written back)
    base = {"bool": nt.boolean, "i8": nt.int8, "i16": nt.int16, "i32": nt.int32, "i64": nt.int64,
            "u8": nt.uint8, "u16": nt.uint16, "f16": nt.float16, "f32": nt.float32, "f64": nt.float64}[t.dtype]
    if t.shape == ():
        return base
    return numba.types.Array(base, len(t.shape), "C", readonly=read_only)


def _numba_type_of(value):
    import numba
    return numba.typeof(value)


class Config:
    """What the backend's writers and kernels read while compiling one module."""

    def __init__(self, log=None, stats: Stats | None = None, parallel: bool = False, par_min: int = PAR_MIN,
                 module: Module | None = None, seed: int = 0, min_work: float = 5000, nn_min_work: float = 100_000,
                 profile=None, when: str = "now", hot_seconds: float | None = None, trial_runs: int = 0):
        self.log = log
        self.stats = Stats() if stats is None else stats
        self.parallel = parallel
        self.par_min = par_min
        self.local_counters: frozenset | None = None  # (made when the first region is split into islands)
        self.module = module
        self.seed = seed  # as the interpreter's: random ops run its kernels
        self.min_work = min_work  # regions estimated to do less run on the interpreter
        self.nn_min_work = nn_min_work  # (the backend passes its own: DSLC_NUMBA_MIN_WORK...)
        self.profile = profile  # an OpProfile: op calls and compiled regions timed into it
        self.when = when  # or "hot": start on the interpreter, compile what turns out hot (hot.py)
        self.hot_seconds = hot_seconds  # (None: hot.py's rule)
        self.hots: list = []  # the Hots of a "hot" compile, in the order made
        self.trial_runs = trial_runs  # timed runs each way a compiled region races the interpreter; 0: none
        self.lazies: list = []  # its regions and loops not split yet (lazy.py)
        self._names = None

    def report_trial(self, trial) -> None:
        """A decided race (trial.py), noted in the profile's report when there is one."""
        from dslc.backends.common.race import noting
        report = noting(self.profile)
        if report is not None:
            report(trial)

    def namer(self):
        """Variable names for generated code: the text plan's (the job's own names), made once."""
        if self._names is None:
            from dslc.backends.common.names import Names
            from dslc.backends.common.source import SourceNames
            try:
                self._names = Names(self.module, SourceNames()).of
            except Exception:  # names are cosmetic: never let them stop a compile
                self._names = lambda v: None
        return self._names


class NumbaProgram:
    """A module compiled for the numba backend; ``run(ws)`` runs it."""

    def __init__(self, module: Module, executor: Executor, stats: Stats, min_work: float = 5000, hots=(),
                 lazies=()):
        self.module, self.executor, self.stats = module, executor, stats
        self.min_work = min_work  # (the threshold it was compiled with, for the summary)
        self.hots = hots  # what compiles when hot (hot.py; the config's list: splits add to it)
        self.lazies = lazies  # what a "hot" compile has not split yet (lazy.py)

    def split(self) -> None:
        """Split every region a "hot" compile left whole into islands now (lazy.py): their
        islands' Hots are then in ``hots``. (A region's split code holds its loops: a loop
        is split on its own only while a call of its region is under way.)"""
        for region in [lz for lz in self.lazies if lz.whole]:
            region.split()

    def compile_now(self) -> None:
        """Compile (or load from the cache) everything still waiting to turn hot, here."""
        self.split()
        for h in self.hots:
            h.ensure()

    def run(self, ws, token=None) -> None:
        self.executor.run(ws, token)

    def summary(self) -> dict:
        """What was compiled (``dslc compile``: everything that would be when hot is compiled first)."""
        self.compile_now()
        s = self.stats
        in_islands = sum(len(op.walk()) for island, _ in s.islands for op in island.ops)
        why = Counter()
        for (reason, name), n in s.interp.items():
            why[f"{name}: {reason}" if reason != "cold" else
                f"compilable, but under the work threshold ({self.min_work})"] += n
        summary = {
            "ops": len(self.module.walk()) - 1,  # as `dslc ir` prints them: the module op is not one
            "regions compiled": [f"from {island.ops[0].name} at {island.ops[0].loc}: {len(island.ops)} "
                                 f"top-level ops, {sum(len(op.walk()) for op in island.ops)} in all"
                                 for island, _ in s.islands],
            "ops compiled": in_islands,
            "kernels fused": s.fused,
            "functions compiled now": s.compiled,
            "functions from cache": s.cache_hits,
            **({"functions reused (compiled in this process before)": s.reused} if s.reused else {}),
            "compile seconds": round(s.seconds, 3),
            "ops interpreted, and why": dict(why.most_common()),
        }
        if s.trials:
            from dslc.backends.common.race import summary as races
            summary["regions timed against the interpreter"] = races(s.trials, "DSLC_NUMBA_TRIAL_RUNS")
        if any(reason == "cold" for reason, _ in s.interp):
            summary["note"] = (f"regions whose estimated work is under {self.min_work} op executions "
                               "run on the interpreter (compiling them would cost more than it saves); "
                               "set DSLC_NUMBA_MIN_WORK=0 to compile every compilable region")
        return summary

    def write_artifacts(self, directory: str) -> list[str]:
        """The generated source of every kernel, as ``kernels/kernel_<n>.py``."""
        self.compile_now()
        out = os.path.join(directory, "kernels")
        if self.stats.sources:  # (no kernel, no folder: an empty kernels/ said nothing)
            os.makedirs(out, exist_ok=True)
        paths = []
        for i, src in enumerate(self.stats.sources):
            path = os.path.join(out, f"kernel_{i}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            paths.append(path)
        return paths


def local_counters(module: Module) -> frozenset:
    """Counter handles only one thread uses: loaded from, or stored only to, private blobs."""
    volatile = volatile_blobs(module)
    out = set()
    for op in module.walk():
        if op.name == "load" and op.result.type == COUNTER and op.attrs["blob"] not in volatile:
            out.add(op.result)
        elif op.name == "CreateCounter":
            stores = [u for u, _ in op.result.uses if u.name == "store"]
            if all(u.attrs["blob"] not in volatile for u in stores) and \
                    all(u.name in ("store", *islands.COUNTER_OPS) for u, _ in op.result.uses):
                out.add(op.result)
    return frozenset(out)


class NumbaBackend:
    name = "numba"

    def __init__(self, log=None, parallel=None, seed=None, min_work=None, nn_min_work=None, profile=None,
                 when=None, trial_runs=None,
                 **_options):
        """``parallel``: use the prange variant of fused kernels on large arrays (default: only
        with more than two cores, where it beats the serial kernel). ``min_work``,
        ``nn_min_work``: compile regions estimated to do at least this much (default
        DSLC_NUMBA_MIN_WORK and DSLC_NUMBA_NN_MIN_WORK; 0 compiles every compilable region,
        before the run: ``when="now"``). ``when``: "hot" (default DSLC_NUMBA_COMPILE, else
        hot: run on the interpreter and compile in the background what turns out hot) or
        "now" (compile every region before the run starts). ``trial_runs``: timed runs each
        way in which a compiled region races the interpreter's code, the faster kept
        (trial.py; default DSLC_NUMBA_TRIAL_RUNS, else 3; 0: every compiled region kept)."""
        if parallel is None:
            parallel = usable_cpus() > 2 or settings.switch("DSLC_NUMBA_PARALLEL")
        self.log = log or sys.stderr
        self.parallel = parallel
        self.seed = session_seed(seed)
        self.min_work = islands.min_work_default() if min_work is None else min_work
        self.nn_min_work = islands.nn_min_work_default() if nn_min_work is None else nn_min_work
        self.profile = profile
        if when is None:  # (asked for every region compiled: that means before the run)
            when = "now" if self.min_work == 0 else islands.when_default()
        if when not in ("hot", "now"):
            raise ValueError(f"the numba backend's when= is 'hot' or 'now', not {when!r}")
        self.when = when
        self.trial_runs = islands.trial_runs_default() if trial_runs is None else trial_runs
        ms = islands.hot_ms_default()
        self.hot_seconds = None if ms is None else ms / 1000
        keep_freed_memory()

    def compile(self, module: Module) -> NumbaProgram:
        cfg = Config(self.log, Stats(), self.parallel, module=module, seed=self.seed, min_work=self.min_work,
                     nn_min_work=self.nn_min_work, profile=self.profile, when=self.when, hot_seconds=self.hot_seconds,
                     trial_runs=self.trial_runs)
        t = time.perf_counter()
        if self.when == "hot":  # the interpreter's code, split into islands where it turns out hot
            from .lazy import LazyEmitter
            executor = Executor(module, cfg, lambda r: compile_region(r, cfg, LazyEmitter))
            return NumbaProgram(module, executor, cfg.stats, cfg.min_work, cfg.hots, cfg.lazies)
        from . import hot
        from .emitter import NumbaEmitter
        cfg.local_counters = local_counters(module)
        executor = Executor(module, cfg, lambda r: compile_region(r, cfg, NumbaEmitter))
        if cfg.stats.compiled:
            hot.switcher().say_once("now done", f"dslc: numba compiled {cfg.stats.compiled} function(s) "
                                    f"({cfg.stats.cache_hits} more from the cache) in "
                                    f"{time.perf_counter() - t:.1f} s")
        return NumbaProgram(module, executor, cfg.stats, cfg.min_work, cfg.hots, cfg.lazies)

    def run(self, module: Module, ws) -> None:
        self.compile(module).run(ws)
