"""Keeping a compiled region only where it beats the interpreter's code for it.

numba's code is not always the faster one: a compiled loop over a small image can lose
to numpy's one pass over it, and a region's numba form may copy what the interpreter
reads in place. So each compiled region (island, fused group, compiled helper kernel)
races the interpreter's code for it during its first runs, ``runs`` timed runs each
(DSLC_NUMBA_TRIAL_RUNS, default 3; 0 keeps every compiled region untimed), and the
faster is kept for the rest of the process: decided once, never revisited, so the
job's later runs pay nothing for it.

- Compiled when hot (hot.py): the interpreter's runs are the last ``runs`` ones timed
  before the region was queued (its compile had not started, so it did not slow them);
  the compiled function runs next, timed, and then the verdict is given.
- Compiled before the run (DSLC_NUMBA_COMPILE=now): the compiled function runs first,
  then the interpreter's code, ``runs`` times each, then the verdict.

A compiled run's first call is not counted (it may still set numba up). The medians are
compared: the compiled function is kept unless slower. Either way the answers are the
interpreter's (the suite checks numba's against interp's on every program), so the
choice changes time, never results. Each verdict is in the program's summary and, with
``--profile``, in the profile's report.
"""
from __future__ import annotations

import statistics
import threading
import time

COLD, WAIT, COMPILED, INTERP, DECIDED = range(5)


class Trial:
    """One region's race: its interpreted and compiled runs' seconds, then the verdict.

    ``start(ns, name, callee)`` makes ``ns[name]`` (the global the generated code calls,
    None or the interpreter's kernel until then) a timed wrapper of ``callee``; the
    generated code reports each interpreted run through ``interpreted(seconds)``.
    """

    __slots__ = ("label", "runs", "interp", "compiled", "phase", "kept", "ns", "name", "callee", "fallback",
                 "lock", "report", "clock")

    def __init__(self, label: str, runs: int, report=None, clock=time.perf_counter):
        """``report(trial)``: called once with the decided trial (the profile's notes)."""
        self.label, self.runs, self.report, self.clock = label, runs, report, clock
        self.interp: list = []
        self.compiled: list = []
        self.phase = COLD
        self.kept = None  # "compiled" or "interpreter", once decided
        self.ns = self.name = self.callee = self.fallback = None
        self.lock = threading.Lock()

    # --- the interpreter's runs
    def interpreted(self, seconds: float) -> None:
        phase = self.phase
        if phase == COLD:
            self.interp.append(seconds)
            del self.interp[:-self.runs]  # (the last runs before the switch: the warmest)
        elif phase == INTERP:
            self.interp.append(seconds)
            if len(self.interp) >= self.runs:
                self.decide()

    def queued(self) -> None:
        """Its compile starts (on another core, maybe this one): interpreted runs stop counting."""
        if self.phase == COLD:
            self.phase = WAIT

    # --- the compiled runs
    def start(self, ns: dict, name: str, callee) -> None:
        self.ns, self.name, self.callee = ns, name, callee
        self.fallback = ns.get(name)  # (None: the generated code's interpreter branch)
        self.phase = COMPILED
        ns[name] = self._timed()

    def _timed(self):
        callee, samples, clock = self.callee, self.compiled, self.clock

        def timed(*args):
            t = clock()
            try:
                return callee(*args)
            finally:
                samples.append(clock() - t)
                if len(samples) > self.runs and self.phase == COMPILED:
                    self._compiled_done()
        return timed

    def _compiled_done(self) -> None:
        with self.lock:
            if self.phase != COMPILED:
                return
            if not self.interp:  # compiled before the run: now the interpreter's turn
                self.phase = INTERP
                self.ns[self.name] = self.fallback
                return
        self.decide()

    # --- the verdict
    def decide(self) -> None:
        with self.lock:
            if self.phase == DECIDED:
                return
            self.phase = DECIDED
            keep = self.compiled_seconds() <= self.interp_seconds()
            self.kept = "compiled" if keep else "interpreter"
            self.ns[self.name] = self.callee if keep else self.fallback
        if self.report is not None:
            self.report(self)

    def compiled_seconds(self) -> float:
        return statistics.median(self.compiled[1:] or self.compiled)

    def interp_seconds(self) -> float:
        return statistics.median(self.interp)

    def describe(self) -> str:
        """One line for the summary: the two medians and what was kept."""
        return (f"{self.label}: compiled {self.compiled_seconds() * 1e3:.3f} ms, interpreted "
                f"{self.interp_seconds() * 1e3:.3f} ms per run: "
                + ("kept compiled" if self.kept == "compiled" else "fell back to the interpreter"))
