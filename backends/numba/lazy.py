"""Splitting regions into islands only where they turn out hot (``DSLC_NUMBA_COMPILE=hot``).

A "hot" compile writes every region exactly as the interpreter does, with two timers,
and imports none of the numba backend's island machinery (nor numba):

- a region's function as a whole: once its calls have spent ``split_after`` CPU seconds, the
  region is written again by the ``NumbaEmitter`` (islands, fused groups and helper
  kernels, each compiled once hot itself: hot.py), and its later calls run that;
- each loop at the top of a region (a training loop inside one task): once its iterations
  have spent as long, the rest of the loop runs in a function the ``NumbaEmitter`` writes
  for that loop alone, entered with the next iteration's index and the carried values
  (later runs of the region call it for the whole loop):

      _pg = rt.progress(L3, v4)
      if o5.fn is not None:                   # split before: the whole loop, split
          v7, = o5.fn(_cells, _states, rt, ws, 0, _pg, v7, v2)
      else:
          for v6 in rt.arange(rt.trip(v4)):
              ... the body, the interpreter's way ...
              if o5.spent(c8() - _ht):        # hot: the rest of the loop, split
                  v7, = o5.fn(_cells, _states, rt, ws, v6 + 1, _pg, v7, v2)
                  break

The second writing starts from the first one's names (variables, blob cells, per-instance
states), so it runs on the cells and states the region was bound with: a random stream, a
CollectTensor's reservoir or a timer goes on where the interpreted calls left it. States
only it has (the compiled islands' random generators, drawn from the workspace's streams)
are made for the workspace it runs in.

A job that ends first (a small MLP, a short DLRM) ran the interpreter's code with two clock
reads per region call and per top-level loop iteration; nothing of the numba backend beyond
this module is imported and no region is split.
"""
from __future__ import annotations

import threading

import numpy as np

from dslc.backends.common.race import CLOCKS
from dslc.backends.interp.codegen import Emitter, _compiled
from dslc.backends.interp.executor import Instance

SPLIT = 1.0  # CPU seconds a region (or a top-level loop) runs interpreted before it is split
# (as long as an island then runs before numba is loaded, hot.FIRST: a split costs ~60 ms of
# writing and pays only once its islands turn hot, so a job that ends within twice that
# ran the interpreter's code alone; at 0.5 s a 200-iteration DLRM run paid for a split it
# never used)

# Hotness is counted in CPU time of the thread that runs the code, not wall time: what a
# compile saves is CPU time, and what the switch costs (importing numba, loading kernels:
# hot.py) is CPU time too, so the decision does not depend on how loaded the machine is. With
# a wall clock, a 200-iteration DLRM run on a machine shared 10 ways loaded numba halfway
# through its timed iterations (a second of import on the path), where on a quiet machine it
# ended on the interpreter. Time a region waits (a sleep, a reader's I/O) is not time a
# kernel would save either. (A system call, ~1 us: read twice per timed call.) The same
# reads time the interpreter's side of a compiled region's race, so this is the clock the
# race module chooses for numba's races (backends/common/race.py: the thread's CPU time).
CLOCK = CLOCKS["compiled"]


def split_after(cfg) -> float:
    """Seconds before a split: SPLIT, or less when the backend was given a hot time."""
    return SPLIT if cfg.hot_seconds is None else min(SPLIT, cfg.hot_seconds)


class LazyEmitter(Emitter):
    """The interpreter's writer, timing each region and each top-level loop (see above)."""

    backend = "numba"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.top = None  # the region being written

    def region(self, r, indent, targets, loop_targets):
        if self.top is None:
            self.top = r
        super().region(r, indent, targets, loop_targets)

    def op_for(self, op, indent, loop_targets):
        if indent != 2:
            return super().op_for(op, indent, loop_targets)
        body = op.regions[0]
        carried = [self.var(a) for a in body.args[1:]]
        self.assign(indent, carried, [self.var(v) for v in op.operands[1:]], op)
        n, i = self.var(op.operands[0]), self.var(body.args[0])
        self.emit(indent, f"_pg = rt.progress({self.bind('L', op.loc)}, {n})", op)
        self._timed_loop(op, indent, carried, f"for {i} in rt.arange(rt.trip({n})):", f"{i} + 1", "_pg")

    def op_loop(self, op, indent, loop_targets):
        if indent != 2:
            return super().op_loop(op, indent, loop_targets)
        carried = [self.var(a) for a in op.regions[0].args]
        self.assign(indent, carried, [self.var(v) for v in op.operands], op)
        self._timed_loop(op, indent, carried, "while True:", "0", "None")

    def _timed_loop(self, op, indent, carried, head, resume, progress):
        loop = Loop(self, op, split_after(self.cfg))
        self.cfg.lazies.append(loop)
        o, clock = self.bind("o", loop), self.bind("c", CLOCK)
        free = [n for n in dict.fromkeys(self.var(v) for v in outside(op)) if n not in carried]
        loop.params = carried + free
        lhs = ", ".join(carried) + ", = " if carried else ""

        def call(start):
            return f"{lhs}{o}.fn({', '.join(['_cells', '_states', 'rt', 'ws', start, progress] + loop.params)})"

        self.emit(indent, f"if {o}.fn is not None:", op)
        self.emit(indent + 1, call("0"), op)
        self.emit(indent, "else:", op)
        self.emit(indent + 1, head, op)
        if progress != "None":
            self.emit(indent + 2, f"if {progress} is not None: {progress}()", op)
        self.emit(indent + 2, "if _cx.flag: rt.cancelled()", op)
        self.emit(indent + 2, f"_ht = {clock}()", op)
        self.region(op.regions[0], indent + 2, carried, carried)
        self.emit(indent + 2, f"if {o}.spent({clock}() - _ht):", op)
        self.emit(indent + 3, call(resume), op)
        self.emit(indent + 3, "break", op)
        self.assign(indent, [self.var(r) for r in op.results], carried, op)

    def finish(self):
        code = super().finish()
        if not code.empty:
            lazy = LazyRegion(self, code.fn, split_after(self.cfg))
            self.cfg.lazies.append(lazy)
            code.fn = lazy
        return code


def outside(op) -> list:
    """The values ``op`` (and what it nests) reads that are defined before it, in order."""
    inside, out = set(), []
    for o in op.walk():
        inside.update(o.results)
        for r in o.regions:
            inside.update(r.args)
    for o in op.walk():
        out.extend(v for v in o.operands if v not in inside)
    return list(dict.fromkeys(out))


class _Split:
    """What a region and a loop share: the interpreted time, the split once it is enough."""

    def __init__(self, emitter: LazyEmitter, limit: float):
        self.written = emitter  # (its names: the split starts from them)
        self.cfg = emitter.cfg
        self.limit = limit
        self.total = 0.0
        self.fn = None
        self.failed = False
        self.lock = threading.Lock()
        self.wrote = None  # what the split added to the program's records (Written), once split

    def split(self) -> bool:
        """Write the numba backend's code now, unless done; whether there is some."""
        with self.lock:
            if self.fn is None and not self.failed:
                try:
                    before = Written.now(self.cfg)
                    self.fn = self.build()
                    self.wrote = Written.now(self.cfg).since(before)
                    self.superseding()
                except Exception as e:  # noqa: BLE001  (the interpreter's code goes on giving its answers)
                    self.failed = True
                    from .hot import switcher
                    switcher().say(f"dslc: numba could not split {self.label()} ({type(e).__name__}: {e}); "
                                   "it stays on the interpreter")
        return self.fn is not None

    def superseding(self) -> None:
        """(A region's split replaces its loops' own: see LazyRegion.)"""

    def seeded(self):
        """A NumbaEmitter that starts from the first writing's names, cells and states."""
        from . import local_counters
        from .emitter import NumbaEmitter
        if self.cfg.local_counters is None:
            self.cfg.local_counters = local_counters(self.cfg.module)
        w, e = self.written, NumbaEmitter(self.cfg)
        e.vars, e.n, e.env = dict(w.vars), w.n, dict(w.env)
        e.blobs, e.makers, e.state_of = dict(w.blobs), list(w.makers), dict(w.state_of)
        return e

    def with_states(self, fn, e):
        """``fn`` given the states only the second writing has, made for the workspace it runs in."""
        extra = e.makers[len(self.written.makers):]
        if not extra:
            return fn
        cfg, made = self.cfg, {}

        def call(_cells, _states, rt, ws, *args):
            got = made.get(id(_states))
            if got is None or got[0] is not _states:
                if len(made) > 64:  # (a region bound anew per run: keep a few)
                    made.clear()
                inst = Instance(ws, rt.task, cfg)
                got = made[id(_states)] = (_states, list(_states) + [m(inst) for m in extra])
            return fn(_cells, got[1], rt, ws, *args)
        return call


class Written:
    """What a writing added to the program's records: the islands, interpreted ops and
    races of its stats, and its Hots."""

    __slots__ = ("islands", "interp", "trials", "hots")

    def __init__(self, islands, interp, trials, hots):
        self.islands, self.interp, self.trials, self.hots = islands, interp, trials, hots

    @classmethod
    def now(cls, cfg) -> "Written":
        s = cfg.stats
        return cls(list(s.islands), s.interp.copy(), list(s.trials), list(cfg.hots))

    def since(self, before: "Written") -> "Written":
        return Written(self.islands[len(before.islands):], self.interp - before.interp,
                       self.trials[len(before.trials):], self.hots[len(before.hots):])

    def forget(self, cfg) -> None:
        s = cfg.stats
        for records, gone in ((s.islands, self.islands), (s.trials, self.trials), (cfg.hots, self.hots)):
            ids = {id(x) for x in gone}
            records[:] = [x for x in records if id(x) not in ids]  # (in place: the program holds them)
        s.interp.subtract(self.interp)
        for key in [k for k, n in s.interp.items() if n <= 0]:
            del s.interp[key]


class LazyRegion(_Split):
    """A region's function: the interpreter's until it has run ``limit`` seconds, then the
    numba backend's."""

    whole = True  # (a region: NumbaProgram.split splits these)

    def __init__(self, emitter, interpreted, limit):
        super().__init__(emitter, limit)
        self.interpreted = interpreted

    def superseding(self) -> None:
        """Its loops split on their own before (lazy.Loop) run no more once the region's
        split code runs: what their splits added to the program's records goes, so the
        summary counts the islands, interpreted ops, races and Hots of those loops once."""
        for loop in self.cfg.lazies:
            if isinstance(loop, Loop) and loop.written is self.written and loop.wrote is not None:
                loop.wrote.forget(self.cfg)
                loop.wrote = None

    def label(self) -> str:
        ops = self.written.top.ops if self.written.top is not None else []
        return f"the region from {ops[0].name} at {ops[0].loc}" if ops else "a region"

    def __call__(self, _cells, _states, rt, ws):
        fn = self.fn
        if fn is None:
            if self.total < self.limit or not self.split():
                t = CLOCK()
                self.interpreted(_cells, _states, rt, ws)
                self.total += CLOCK() - t
                return
            fn = self.fn
        fn(_cells, _states, rt, ws)

    def build(self):
        e = self.seeded()
        e.region(self.written.top, 2, [], None)
        code = e.finish()
        if code.names != list(self.written.blobs):
            raise RuntimeError("the split region reads other blobs than it was bound to (dslc's bug)")
        return self.with_states(code.fn, e)


class Loop(_Split):
    """A top-level loop of a lazily written region (see the module's docstring)."""

    whole = False

    def __init__(self, emitter, op, limit):
        super().__init__(emitter, limit)
        self.op = op
        self.params: list = []  # the carried values' names, then the other values it reads

    def label(self) -> str:
        return f"the loop at {self.op.loc}"

    def spent(self, seconds: float) -> bool:
        """Add an iteration's time; whether the rest of the loop now runs split."""
        if self.failed:
            return False
        self.total += seconds
        return self.total >= self.limit and self.split()

    def build(self):
        op, e = self.op, self.seeded()
        body = op.regions[0]
        if op.name == "for":
            carried = [e.var(a) for a in body.args[1:]]
            e.emit(2, f"for {e.var(body.args[0])} in map(np.int64, range(_start, rt.trip({e.var(op.operands[0])}))):",
                   op)
            e.emit(3, "if _pg is not None: _pg()", op)
        else:
            carried = [e.var(a) for a in body.args]
            e.emit(2, "while True:", op)
        e.emit(3, "if _cx.flag: rt.cancelled()", op)
        e.region(body, 3, carried, carried)
        e.emit(2, f"return ({', '.join(carried)},)" if carried else "return None", op)
        ns = {"np": np, **e.env}
        fn, part = _compiled(ns, "rest_of_loop", ", " + ", ".join(["_start", "_pg"] + self.params), e.body, [], [],
                             e.blobs, len(e.makers), "numba")
        part.rechecks = e.rechecks
        for h in e.hots:
            h.ns = ns
        return self.with_states(fn, e)
