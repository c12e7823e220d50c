"""Compiling what turns out to be hot, off the path to the first result.

By default (``DSLC_NUMBA_COMPILE=hot``) the numba backend compiles nothing before a job
runs, and does not even import numba: each island, fused group and compiled helper kernel
(sparse updates, bag sums, convolution windows) starts on the interpreter's code, which
times itself. One that has spent as long on the interpreter as switching would cost is
queued (``FIRST`` = 1 s before numba is loaded in the process: importing it and setting
up its CPU target take about 1.3 s of CPU; ``NEXT`` = 0.2 s after, about what loading one
function costs; ``DSLC_NUMBA_HOT_MS`` sets one figure for both). Paying for the switch only
once the interpreter has spent as much keeps a run within about twice the interpreter's
time on that region whatever the job's length (the rule for renting skis), and a long
job is compiled after a second. A thread of this process takes the queue in order. For each, it asks the kernel
cache for the compiled function; on a miss, a worker process (``worker``) compiles it into
the cache, so numba's typing and LLVM run on another core without this process's GIL, and
the thread loads the result from the cache (the same trusted, pickle-free files as
always). The region's call then switches to the compiled function between two calls:
the generated code reads the callee from a global, which the thread replaces.

A job that ends before anything is hot ran exactly the interpreter's code (a small MLP, a
short DLRM: numba's import and compile would have cost more than they save); a long one
runs compiled from the moment each kernel is ready. A region that runs once, however long
(one call of a loop over the whole job), stays on the interpreter in this mode:
``DSLC_NUMBA_COMPILE=now`` compiles every island before the run starts, as the tests do.

The worker outlives a job that ends first: it finishes what it was given, so the next
run finds those kernels in the cache (for at most DSLC_NUMBA_WORKER_GRACE seconds: worker.py).
On a terminal, stderr says once what is being compiled, and once how long it took.
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
import warnings

from .cache import cache_dir

QUEUED, DONE, FAILED = 1, 2, 3


class CompileTimeout(RuntimeError):
    """The compile worker did not compile a function within the limit (it was stopped)."""

    def __init__(self, limit: float):
        super().__init__(f"numba did not compile it within {limit:g} s")
        self.limit = limit


class CompileLimitWarning(UserWarning):
    """A region compiled before the run took numba longer than DSLC_NUMBA_COMPILE_LIMIT
    seconds: it runs on the interpreter."""


def over_limit(label: str, limit: float, loc=None) -> None:
    """Say (a CompileLimitWarning, at the user's line ``loc`` when known) that the region
    ``label`` runs interpreted."""
    text = (f"numba did not compile the region from {label} within DSLC_NUMBA_COMPILE_LIMIT={limit:g} s: "
            "it runs on the interpreter (its answers are the same; set DSLC_NUMBA_COMPILE_LIMIT higher, "
            "or 0 for no limit, to wait for it)")
    if loc is not None and loc.line:
        warnings.warn_explicit(text, CompileLimitWarning, loc.file, loc.line)
    else:
        warnings.warn(text, CompileLimitWarning, stacklevel=2)
FIRST, NEXT = 1.0, 0.2  # CPU seconds interpreted before a switch (lazy.CLOCK): numba not loaded yet, loaded


class Pool:
    """Hots whose compiled code is one set of functions (the helper kernels of one module:
    every Conv calls the same compiled loops, whatever its sizes): switching costs once for
    all of them (numba's import, the loops' load from the cache), so their interpreted
    seconds count together against the limit. A convolution net's dozens of Convs, each
    a few ms, otherwise never reach it one by one within a deploy model's first hundred runs."""

    __slots__ = ("total",)

    def __init__(self):
        self.total = 0.0


_pools: dict[str, Pool] = {}


def pool(name: str) -> Pool:
    """The process's Pool called ``name``."""
    return _pools.setdefault(name, Pool())


class Hot:
    """Something compilable that runs on the interpreter until it (or its ``pool``) has
    spent ``limit`` seconds there. The generated code calls ``spent(seconds)`` after each
    interpreted run and calls the global ``name`` of ``ns`` (the region's namespace, set
    once the region is compiled) once the callee ``build(background)`` made is there."""

    __slots__ = ("label", "build", "limit", "total", "state", "ns", "name", "lock", "switcher", "seconds", "trial",
                 "pool", "calls", "loc")

    def __init__(self, label: str, build, limit: float | None, switcher, trial=None, pool: Pool | None = None):
        """``trial``: a trial.Trial the compiled callee races the interpreter's code in.
        ``pool``: the Pool its interpreted seconds count in; a pooled Hot still runs on
        the interpreter as many times as its trial times (its side of the race)."""
        self.label, self.build, self.limit, self.switcher, self.trial = label, build, limit, switcher, trial
        self.pool = pool
        self.loc = None  # the user's line of the region (for a warning about it)
        self.calls = 0
        self.total = 0.0
        self.state = 0
        self.ns = self.name = None
        self.lock = threading.Lock()
        self.seconds = 0.0  # what its compile (or load) took

    def spent(self, seconds: float) -> None:
        if self.trial is not None:
            self.trial.interpreted(seconds)
        if self.state:
            return
        self.total += seconds
        self.calls += 1
        spent = self.total
        if self.pool is not None:
            self.pool.total += seconds
            spent = self.pool.total if self.calls >= (self.trial.runs if self.trial is not None else 1) else 0.0
        if spent >= (self.limit if self.limit is not None else NEXT if "numba" in sys.modules else FIRST):
            self.state = QUEUED
            if self.trial is not None:
                self.trial.queued()
            self.switcher.submit(self)

    def ensure(self, background: bool = False) -> bool:
        """Compile (or load) and install now, unless done; whether it is compiled.
        ``background``: a compile the cache lacks goes to the worker process."""
        with self.lock:
            if self.state not in (DONE, FAILED):
                t = time.perf_counter()
                try:
                    callee = self.build(background)
                except Exception as e:  # noqa: BLE001  (the interpreter's code goes on giving its answers)
                    self.state = FAILED
                    self.switcher.failed(self, e)
                else:
                    self.install(callee)
                    self.state = DONE
                self.seconds = time.perf_counter() - t
        return self.state == DONE

    def now(self) -> None:
        """Compile (or load) and install here, before the run (DSLC_NUMBA_COMPILE=now): a
        failure is raised, as the direct compile's is; one over the compile limit is said
        (``over_limit``) and leaves the region on the interpreter."""
        with self.lock:
            t = time.perf_counter()
            try:
                callee = self.build(False)
            except CompileTimeout as e:
                self.state = FAILED
                over_limit(self.label, e.limit, self.loc)
            else:
                self.install(callee)
                self.state = DONE
            self.seconds = time.perf_counter() - t

    def install(self, callee) -> None:
        """Make ``callee`` the region's, through its trial when it races the interpreter."""
        if self.ns is None:
            return
        if self.trial is not None:
            self.trial.start(self.ns, self.name, callee)
        else:
            self.ns[self.name] = callee


class Switcher:
    """The thread that compiles (through the worker) and installs queued Hots, in order."""

    def __init__(self, log=None):
        self.log = log
        self.queue: queue.Queue = queue.Queue()
        self.thread = None
        self.lock = threading.Lock()
        self.batch: list = []   # what was queued since the queue was last empty
        self.started = None
        self.told = False
        self.closing = False
        self.said: set = set()

    def submit(self, hot: Hot) -> None:
        with self.lock:
            if self.closing:
                return
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="dslc-numba-compile", daemon=True)
                self.thread.start()
            if not self.batch:
                self.started = time.perf_counter()
            self.batch.append(hot)
        self.queue.put(hot)

    def _loop(self) -> None:
        while True:
            hot = self.queue.get()
            if self.closing:
                return
            if not self.told:
                self.say(f"dslc: numba is compiling {self._what()} in the background; "
                         "the interpreter runs it until then")
            hot.ensure(background=True)
            with self.lock:
                if self.queue.empty():
                    done, self.batch = self.batch, []
                    if not self.told:
                        self.told = True
                        ok = sum(h.state == DONE for h in done)
                        self.say(f"dslc: numba compiled {ok} of {len(done)} hot region(s) in "
                                 f"{time.perf_counter() - self.started:.1f} s; they run compiled from now on")

    def _what(self) -> str:
        with self.lock:
            labels = [h.label for h in self.batch]
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        return f"{len(labels)} hot region(s) ({shown})"

    def failed(self, hot: Hot, e: Exception) -> None:
        self.say(f"dslc: numba could not compile {hot.label} ({type(e).__name__}: {e}); "
                 "it stays on the interpreter")

    def say_once(self, key: str, line: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self.say(line)

    def say(self, line: str) -> None:
        """One line on stderr, only when stderr is a terminal (a log or a pipe gets none)."""
        out = self.log or sys.stderr
        try:
            if out.isatty():
                out.write(line + "\n")
                out.flush()
        except (AttributeError, ValueError, OSError):
            pass

    def close(self) -> None:
        """At exit: start nothing new; let a load under way finish (it holds its Hot's lock:
        numba's linker must not be running while the process tears down)."""
        with self.lock:
            self.closing = True
            pending = list(self.batch)
        for hot in pending:
            if hot.lock.acquire(timeout=30):
                hot.lock.release()


_switcher: Switcher | None = None
_switcher_lock = threading.Lock()


def switcher(log=None) -> Switcher:
    """The process's one Switcher."""
    global _switcher
    with _switcher_lock:
        if _switcher is None:
            _switcher = Switcher(log)
            atexit.register(_switcher.close)
        return _switcher


# ----------------------------------------------------------------------------- the worker process

class Worker:
    """A process that compiles functions into the kernel cache (``worker.py``), one request
    at a time: the generated module's text, the function's name and its signature as data
    (``compiled.encode_type``), as one JSON line; it answers one JSON line."""

    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()
        self.ids = 0

    def compile(self, source: str, name: str, sig_data: list, timeout: float | None = None) -> str | None:
        """Have the worker compile ``name`` of ``source`` for ``sig_data``; None when done,
        else why not (the caller then compiles it itself). Past ``timeout`` seconds the
        worker is stopped (the next request starts another) and CompileTimeout raised."""
        with self.lock:
            try:
                proc = self._proc()
                self.ids += 1
                proc.stdin.write(json.dumps({"id": self.ids, "source": source, "name": name,
                                             "sig": sig_data}) + "\n")
                proc.stdin.flush()
                # (one answer a request: nothing is buffered ahead of it)
                if timeout is not None and not select.select([proc.stdout], [], [], timeout)[0]:
                    self.proc = None
                    proc.kill()
                    proc.wait()
                    raise CompileTimeout(timeout)
                line = proc.stdout.readline()
            except (OSError, ValueError) as e:
                self.proc = None
                return f"the compile worker stopped ({e})"
            if not line:
                self.proc = None
                return "the compile worker stopped"
            try:
                answer = json.loads(line)
            except ValueError:
                return "the compile worker answered nonsense"
            return None if answer.get("ok") else str(answer.get("error", "failed"))

    def _proc(self):
        if self.proc is None or self.proc.poll() is not None:
            # the kernel directory this process uses (a private one, when the configured one
            # was refused), passed on: the worker checks it again
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dslc.backends.numba.worker", str(cache_dir()), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                start_new_session=True,  # (a Ctrl-C at the terminal stops the job, not its last compiles)
                cwd=str(cache_dir()))  # (-m puts the cwd first on sys.path: no checkout's dslc there)
        return self.proc


_worker = Worker()


def compile_through_worker(fn, sig, timeout: float | None = None) -> bool:
    """Fill the kernel cache with ``fn`` (a dispatcher of a generated module) for ``sig``
    through the worker, unless the cache holds it; whether the worker compiled it. Nothing
    happens for a function the cache cannot keep (the caller's own compile does it).
    ``timeout``: seconds the worker may take (then CompileTimeout)."""
    from .compiled import Uncachable, encode_type
    cache = getattr(fn, "_cache", None)
    if cache is None or not hasattr(cache, "has") or cache.has(sig, fn.targetctx):
        return False
    try:
        data = [encode_type(t) for t in sig]
    except Uncachable:
        return False
    source = getattr(sys.modules.get(fn.py_func.__module__), "__dslc_source__", None)
    if source is None:
        return False
    return _worker.compile(source, fn.py_func.__name__, data, timeout) is None
