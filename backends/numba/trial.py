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

The clock (the thread's CPU time, for both sides), the samples and the verdict (medians
of the compiled runs after the first against the interpreter's; the compiled function
kept unless slower) are backends/common/race.py's, as are the verdict's line in the
program's summary and, with ``--profile``, in the profile's report.
"""
from __future__ import annotations

import threading

from dslc.backends.common.race import Race

COLD, WAIT, COMPILED, INTERP, DECIDED = range(5)


class Trial(Race):
    """One region's race, scheduled: the interpreted and compiled runs timed, then the verdict.

    ``start(ns, name, callee)`` makes ``ns[name]`` (the global the generated code calls,
    None or the interpreter's kernel until then) a timed wrapper of ``callee``; the
    generated code reports each interpreted run through ``interpreted(seconds)``.
    """

    __slots__ = ("phase", "ns", "name", "callee", "fallback", "lock")

    def __init__(self, label: str, runs: int, report=None):
        """``report(trial)``: called once with the decided trial (the profile's notes)."""
        super().__init__(label, runs, "compiled", report)
        self.phase = COLD
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
            if self.interp_done():
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
                if self.phase == COMPILED and self.compiled_done():
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
            keep = self.judge() == "compiled"
            self.ns[self.name] = self.callee if keep else self.fallback
        self.tell()
