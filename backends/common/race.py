"""A compiled region's race against the interpreter's code for it: the samples and the verdict.

A compiling backend's code is not always the faster one (a numba loop over a small image
can lose to numpy's one pass over it; XLA's CPU convolutions to the interpreter's im2col
and OpenBLAS GEMM). So a compiled region runs ``runs`` timed times each way in its first
runs, and the faster is kept for the rest of the process. What differs between backends
is how the runs are scheduled (numba: backends/numba/trial.py; xla: the RunCall of
backends/xla/emitter.py); what they share is here:

- the samples: ``compiled`` (the first, which may still set the compiled code up, is not
  counted unless it is the only one) and ``interp``;
- the verdict: the medians compared once; the compiled code is kept unless slower;
- the clock both sides are timed on (below: chosen here from where the compiled code runs,
  never by a caller);
- the line for the compile summary and the profile's report, and the summary's list.

The answers are the interpreter's either way (the suite checks each backend against it),
so the verdict changes time, never results.
"""
from __future__ import annotations

from time import process_time, thread_time

INTERPRETER = "interpreter"

# The clock a race reads, by its compiled engine; both sides of one race read the same one.
# Always CPU time, never wall time: on a loaded machine a wall clock counts the time a run
# waits for a core, so a backend lost races it wins on a quiet one (the xla race kept the
# interpreter on MobileNetV2 under load at 1.5-1.7x its race-off time). Which CPU time
# depends on where the compiled code runs:
# - numba's runs on the calling thread: that thread's CPU time. The process's would also
#   count this process's other threads: the thread that loads the next hot region's kernels
#   while this one's compiled runs are timed, the OpenBLAS workers still spinning for
#   ~0.1 s after an interpreted GEMM (~6-12 ms of each following 20 ms, measured), and the
#   other tasks of a job running in threads.
# - XLA's runs on threads of its runtime's own pool, never the caller's (with its async
#   dispatch off and Eigen held to one thread alike): the caller's CPU time for a 150 ms
#   XLA call is ~0.4 ms, so a race on it would keep XLA always. So the process's CPU time,
#   on both sides (which also counts the interpreter's OpenBLAS workers), accepting the
#   other threads' share above as noise.
CLOCKS = {"compiled": thread_time, "xla": process_time}


class Race:
    """One region's race. ``engine`` names the compiled side ("compiled", "xla"): ``kept`` is
    it or "interpreter" once decided (None before); ``report(race)`` is called once then.
    ``clock`` (CLOCKS[engine]) is what the backend times both sides' runs with."""

    __slots__ = ("label", "runs", "engine", "interp", "compiled", "kept", "report", "clock")

    def __init__(self, label: str, runs: int, engine: str = "compiled", report=None):
        self.label, self.runs, self.engine, self.report = label, runs, engine, report
        self.clock = CLOCKS[engine]
        self.interp: list = []
        self.compiled: list = []
        self.kept = None

    def compiled_done(self) -> bool:
        """Whether the compiled side has its runs (the uncounted first one and ``runs`` more)."""
        return len(self.compiled) > self.runs

    def interp_done(self) -> bool:
        return len(self.interp) >= self.runs

    def judge(self) -> str:
        """Decide now from the samples so far: ``kept``, returned (then ``tell()``)."""
        keep = self.compiled_seconds() <= self.interp_seconds()
        self.kept = self.engine if keep else INTERPRETER
        return self.kept

    def tell(self) -> None:
        """The decided race to ``report`` (outside the caller's locks: a profile's note)."""
        if self.report is not None:
            self.report(self)

    def compiled_seconds(self) -> float:
        return median(self.compiled[1:] or self.compiled)

    def interp_seconds(self) -> float:
        return median(self.interp)

    def describe(self) -> str:
        """One line for the summary and the profile: the two medians and what was kept."""
        return (f"{self.label}: {self.engine} {self.compiled_seconds() * 1e3:.3f} ms, interpreted "
                f"{self.interp_seconds() * 1e3:.3f} ms per run: "
                + (f"kept {self.engine}" if self.kept == self.engine else "fell back to the interpreter"))


def median(xs) -> float:
    """statistics.median's (the mean of the middle two of an even count), without importing
    statistics (fractions, decimal: milliseconds of a first run for one function)."""
    s = sorted(xs)
    if not s:
        raise ValueError("the median of no samples")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def noting(profile):
    """``report`` for races whose verdicts go into ``profile``'s notes (None: no profile)."""
    note = getattr(profile, "note", None)
    if note is None:
        return None
    return lambda race: note(race.describe())


def summary(races, setting: str) -> list[str]:
    """The summary's lines: the races decided (those that fell back first), then how many
    are still pending; ``setting`` names the environment variable that sets the runs."""
    races = [r for r in races if r.runs]
    done = [r for r in races if r.kept is not None]
    lines = [r.describe() for r in sorted(done, key=lambda r: r.kept != INTERPRETER)]
    if len(done) < len(races):
        runs = races[0].runs
        lines.append(f"{len(races) - len(done)} region(s) not decided yet: each runs {runs} times compiled and "
                     f"{runs} times interpreted, timed, in its first runs, and the faster is kept "
                     f"({setting}=0: always compiled)")
    return lines
