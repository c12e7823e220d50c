"""The numba backend's region compiler: the interpreter's, with islands compiled.

Each region is compiled as the interpreter compiles it, except that worthwhile runs
of numeric ops (``islands.partition``) become one call to a numba function, and
standalone fused groups call a fused kernel. If an island input is unset at run
time (a blob nothing wrote yet), the same ops run on the interpreter instead.
"""
from __future__ import annotations

import time

import numpy as np

from dslc.backends.interp.codegen import Emitter, syntax_error
from dslc.backends.interp.kernels_nn import op_stream

from . import islands
from .cache import module_for
from .calls import FusedCall, IslandCall
from .failures import Sites
from dslc.ir.escape import source_text
from dslc.ir.types import COUNTER, NUMPY_DTYPES

from .kernels import scalar, tensor
from .source import Writer, fused_source


class NumbaEmitter(Emitter):
    backend = "numba"
    interpreting = False  # set while writing an island's interpreter fallback

    def kernel_entry(self, name: str):
        from . import conv, sparse  # compiled loops the interpreted ops call
        k = sparse.KERNELS.get(name) or conv.KERNELS.get(name)
        return (k, False) if k is not None else super().kernel_entry(name)

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
        call, args, streams = self.cfg.stats.timed(lambda: build_island(island, self.cfg))
        self.cfg.stats.islands.append((island, call))
        gens = []  # the random ops' generators: per instance, as the interpreter binds them
        for op in streams:
            self.makers.append(op_stream(op, self.cfg))
            gens.append(f"s{len(self.makers) - 1}")
        cond = " or ".join(f"{self.var(v)} is None" for v in args if v not in island.unread) or "False"
        self.emit(indent, f"if {cond}:", island.ops[0])
        self.interpreting = True
        start = len(self.body)
        for op in island.ops:  # the interpreter's way, for unset inputs
            super().op(op, indent + 1, loop_targets)
        if len(self.body) == start:  # (its ops bound constants only: no statement)
            self.emit(indent + 1, "pass", island.ops[0])
        self.interpreting = False
        self.emit(indent, "else:", island.ops[0])
        outs = [self.var(v) for v in island.outputs]
        lhs = (", ".join(outs) + (" = " if len(outs) == 1 else ", = ")) if outs else ""
        passed = [self.var(v) if v not in island.unread else
                  f"({self.var(v)} if {self.var(v)} is not None else {self.bind('p', stand_in(v))})" for v in args]
        self.emit_timed(indent + 1, f"{lhs}{self.bind('n', call)}({', '.join(passed + gens)})", island.ops[0],
                        f"numba region ({len(island.ops)} ops)")

    def op_fused(self, op, indent, loop_targets):
        if self.interpreting or not islands.compilable(op) or islands.work(op) < self.cfg.min_work:
            self.cfg.stats.interpreted(op, "cold" if islands.compilable(op) else None)
            return super().op_fused(op, indent, loop_targets)
        call = self.cfg.stats.timed(lambda: build_fused(op, self.cfg))
        cells = []
        for res in op.results:  # a store of the result in this region may lend its buffer
            stores = [u for u, _ in res.uses if u.name == "store" and u.parent is op.parent]
            cells.append(self.cell(stores[0].attrs["blob"]) if stores else "None")
        outs = [self.var(r) for r in op.results]
        lhs = ", ".join(outs) + (" = " if len(outs) == 1 else ", = ")
        args = [self.var(v) for v in op.operands] + cells
        self.emit_timed(indent, f"{lhs}{self.bind('n', call)}({', '.join(args)})", op, "numba fused")


def stand_in(v):
    """A value of ``v``'s numba type that nothing reads (see Island.unread)."""
    t = tensor(v)
    dt = np.bool_ if t.dtype == "bool" else NUMPY_DTYPES[t.dtype]
    return dt(0) if t.shape == () else np.zeros((0,) * len(t.shape), dt)


def build_island(island, cfg):
    """Generate, write, import and compile the island's function."""
    w = Writer(_source_file(island.ops[0]), cfg.namer())
    params = w.island(island)
    source = w.module("kernel", params)
    mod = _module(source, island.ops[0])
    cfg.stats.sources.append(source)
    args = [v for v in island.inputs if v in w.names and w.names[v] in params]
    fn = mod.kernel
    cfg.stats.compile(fn, [v.type for v in args], [c for _, c in w.consts], len(w.streams))
    counters = [i for i, v in enumerate(args) if v.type == COUNTER]
    scalars = [i for i, v in enumerate(args) if scalar(v)]
    call = IslandCall(fn, island.outputs, [c for _, c in w.consts], counters, w.sites, len(w.streams), scalars)
    return call, args, [op for _, op in w.streams]


def build_fused(op, cfg):
    sites = Sites()
    serial_src = _fused_module(op, False, sites)
    mod = _module(serial_src, op)
    cfg.stats.sources.append(serial_src)
    cfg.stats.fused += 1
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    cfg.stats.compile(mod.kernel, types, [])
    parallel = None
    if cfg.parallel:
        par_src = _fused_module(op, True, Sites())  # the same sites again
        par = _module(par_src, op)
        cfg.stats.sources.append(par_src)
        cfg.stats.compile(par.kernel, types, [])
        parallel = par.kernel
    return FusedCall(mod.kernel, parallel, len(op.operands), [r.type for r in op.results],
                     _fallback(op, cfg), cfg.par_min, sites)


def _fused_module(op, parallel: bool, sites) -> str:
    from .source import HEADER
    return HEADER.format(source=source_text(_source_file(op))) + "\n\n" + fused_source(op, "kernel", parallel, sites) + "\n"


def _module(source: str, op):
    """``module_for(source)``; a SyntaxError is the job's nesting depth or our bug (``syntax_error``)."""
    try:
        return module_for(source)
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


def _source_file(op) -> str:
    return op.loc.file if op.loc and op.loc.line else ""


__all__ = ["NumbaEmitter", "build_fused", "build_island", "scalar", "tensor", "time"]
