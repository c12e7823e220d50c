"""The xla backend: dense tensor regions as XLA executables through JAX, the rest interpreted.

Runs of a region's ops that XLA can express (``regions``: tensor dataflow of known
shapes and dtypes, forward and gradient ops, optimizer updates) become one ``jax.jit``
function each, compiled ahead for the IR's types (``emitter``); the job layer, queues,
readers, Python ops, control flow and every op without an xla kernel run on the
interpreter in the same workspace. The answers are the interpreter's: the tests run both
and compare. JAX is an optional extra (``pip install 'dslc[xla]'``); docs/xla.md.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field

from dslc.backends.common.cachedir import cache_root, not_private
from dslc.backends.common.race import summary as races
from dslc.backends.interp.codegen import compile_region
from dslc.backends.common.stats import CompileStats
from dslc.backends.interp.executor import Executor
from dslc.ir import Module
from dslc.ir.diagnostics import DSLError
from dslc.runtime.streams import session_seed


class Stats(CompileStats):
    """What compiling one module did (``dslc compile`` prints it)."""

    def __init__(self):
        super().__init__()
        self.runs: list = []
        self.calls: list = []  # each run's RunCall (their races' verdicts)

    def interpreted(self, op, why) -> None:
        self.interp[(why, op.name)] += 1

    def compile(self, jitted, specs):
        self.compiled += 1
        return jitted.lower(*specs).compile()


@dataclass
class Config:
    log: object = None
    stats: Stats = field(default_factory=Stats)
    seed: int = 0  # as the interpreter's: random ops run its kernels
    min_work: int | None = None
    profile: object = None  # an OpProfile: each XLA call, and each op the interpreter runs, timed into it


class XlaProgram:
    """A module compiled for the xla backend; ``run(ws)`` runs it."""

    def __init__(self, module: Module, executor: Executor, stats: Stats, min_work):
        self.module, self.executor, self.stats, self.min_work = module, executor, stats, min_work

    def run(self, ws, token=None) -> None:
        self.executor.run(ws, token)

    def summary(self) -> dict:
        import jax
        s = self.stats
        why = Counter()
        for (reason, name), n in s.interp.items():
            why[f"{name}: {reason}" if reason != "cold" else
                f"{name}: under the work threshold ({self.min_work} elements)"] += n
        return {
            "ops": len(self.module.walk()) - 1,
            "device": str(jax.devices()[0]),
            "regions compiled": [_described(r) for r in s.runs],
            "ops compiled": sum(len(o.walk()) for r in s.runs for o in r.ops),
            "functions compiled": s.compiled,
            "compile seconds": round(s.seconds, 3),
            "ops interpreted, and why": dict(why.most_common()),
            "regions timed against the interpreter": races(s.calls, "DSLC_XLA_TRIAL_RUNS"),
        }


def _described(run) -> str:
    return f"{run.where()}: {sum(len(o.walk()) for o in run.ops)} ops, {run.work} elements"


_configured = []


def _configure_jax():
    """JAX's persistent compilation cache in ``<DSLC_CACHE_DIR>/xla`` (once per process),
    when that directory is the user's alone (a cached executable runs as it is)."""
    if _configured:
        return
    import jax
    _configured.append(True)
    path = os.path.join(cache_root(), "xla")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        why = not_private(path)
    except OSError as e:
        why = f"cannot be used ({e.strerror or e})"
    if why:
        print(f"dslc: the XLA cache directory {path} {why}: compiled regions are not cached", file=sys.stderr)
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


class XlaBackend:
    name = "xla"

    def __init__(self, log=None, seed=None, min_work=None, profile=None, **_options):
        if not available():
            raise DSLError("the xla backend needs JAX, which is not installed",
                           hint="pip install 'dslc[xla]' (or jax[cuda12] for a GPU), or choose another backend")
        self.log = log or sys.stderr
        self.seed = session_seed(seed)
        self.min_work = min_work
        self.profile = profile
        _configure_jax()

    def compile(self, module: Module) -> XlaProgram:
        from .emitter import XlaEmitter, min_work_default
        cfg = Config(self.log, Stats(), self.seed, self.min_work, self.profile)
        executor = Executor(module, cfg, lambda r: compile_region(r, cfg, XlaEmitter))
        return XlaProgram(module, executor, cfg.stats, self.min_work if self.min_work is not None else
                          min_work_default())

    def run(self, module: Module, ws) -> None:
        self.compile(module).run(ws)
