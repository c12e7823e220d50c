"""Progress lines for long runs, on a terminal only.

Progress is off until a driver turns it on; the CLI does so for ``dslc run`` when both
stdout and stderr are terminals and ``--quiet`` is not given. Library code, tests and
pipes stay silent.

    with progress.showing(sys.stderr):           # the driver
        session.run(job)

    epochs = progress.counter("epoch", total=n)  # anything worth counting (e.g. a JobRunner)
    for ...:
        ...
        epochs.tick()

``counter()`` returns a counter that does nothing when progress is off, so callers need
no checks of their own. Counters with one label add up: 64 instances of a 4-iteration
loop count to 256 together. One line shows the counter that moved last; nothing is
drawn in the first ``DELAY`` seconds (short runs print nothing), and the line is
cleared when ``showing`` ends.
"""
from __future__ import annotations

import contextlib
import threading
import time

from dslc.ir.escape import printable
from dslc.runtime import hooks

DELAY = 0.5      # seconds before the first line is drawn
INTERVAL = 0.1   # seconds between redraws at most


class _Null:
    """The counter handed out while progress is off."""

    __slots__ = ()

    def tick(self, n: int = 1) -> None:
        pass

    def done(self) -> None:
        pass


NULL = _Null()


class Counter:
    """Counts towards ``total`` (None: unknown) on the active display."""

    __slots__ = ("display", "label", "count", "total")

    def __init__(self, display, label: str):
        self.display, self.label = display, label
        self.count, self.total = 0, 0

    def tick(self, n: int = 1) -> None:
        self.display.tick(self, n)

    def done(self) -> None:
        self.display.draw(force=True)


class _Display:
    def __init__(self, stream, delay: float, interval: float):
        self.stream, self.delay, self.interval = stream, delay, interval
        self.lock = threading.Lock()
        self.counters: dict[str, Counter] = {}
        self.start = time.monotonic()
        self.last_draw = None
        self.latest: Counter | None = None
        self.drawn = False

    def counter(self, label: str, total: int | None) -> Counter:
        with self.lock:
            c = self.counters.get(label)
            if c is None:
                c = self.counters[label] = Counter(self, label)
            c.total = None if total is None or c.total is None else c.total + int(total)
            return c

    def tick(self, c: Counter, n: int) -> None:
        with self.lock:
            c.count += n
            self.latest = c
        self.draw()

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if now - self.start < self.delay:
            return
        if not force and self.last_draw is not None and now - self.last_draw < self.interval:
            return
        with self.lock:
            c = self.latest
            if c is None:
                return
            self.last_draw = now
            self.drawn = True
            self.stream.write("\r" + line(c.label, c.count, c.total) + "\x1b[K")
            self.stream.flush()

    def clear(self) -> None:
        with self.lock:
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()


def line(label: str, count: int, total: int | None) -> str:
    """``label: 37/100 (37%)``, or ``label: 37`` when the total is unknown."""
    label = printable(label)  # (a loop's file name is the input's text)
    if not total:
        return f"{label}: {count}"
    return f"{label}: {count}/{total} ({100 * count // total}%)"


_active: _Display | None = None


def active() -> bool:
    """Whether a display is on (code on hot paths checks this before making counters)."""
    return _active is not None


def counter(label: str, total: int | None = None):
    """A counter on the active display, or one that does nothing."""
    display = _active
    return NULL if display is None else display.counter(label, total)


@contextlib.contextmanager
def showing(stream, delay: float | None = None, interval: float | None = None):
    """Show progress on ``stream`` (a terminal) while the block runs; clear it afterwards."""
    global _active
    previous = _active
    _active = _Display(stream, DELAY if delay is None else delay,
                       INTERVAL if interval is None else interval)
    # the backends count their long loops through the runtime's hook, never importing this module
    previous_hook = hooks.install_progress(_active.counter)
    try:
        yield _active
    finally:
        _active.clear()
        _active = previous
        hooks.install_progress(previous_hook)


def wanted(quiet: bool, *streams) -> bool:
    """Progress is for people: only when not quiet and every stream is a terminal."""
    if quiet:
        return False
    try:
        return all(s.isatty() for s in streams)
    except (AttributeError, ValueError):
        return False
