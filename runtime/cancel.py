"""Cancellation that blocking runtime operations can see.

A backend runs each thread of a job under a cancel token (an object with ``flag``,
``lock`` and a ``waiters`` list of callables that ``cancel()`` calls). It makes the
token current on its thread with ``swap_token``; a blocking operation (a queue read
or write) waits through ``wait_for``, which returns when its condition holds and
raises ``Cancelled`` as soon as the token is cancelled, so a failing sibling never
leaves a thread blocked forever.

A local run's root token also carries a ``Watch``: it counts the run's threads that
are running and those blocked without a timeout in ``wait_for``. When every thread
of the run has been blocked for ``STALL_SECONDS`` with nothing moving, no thread
can ever wake the others (a dequeue on a queue nothing writes or closes, say), so
the waiting thread raises a ``DSLError`` naming what it waits on instead of hanging.
Runs whose queues other processes can fill (a Ray node) carry no watch.
"""
from __future__ import annotations

import threading
import time

from dslc.ir.diagnostics import DSLError

# How long every thread of a run must be blocked, with no thread moving, before the
# run is declared stuck. Long enough that a thread that was just woken but not yet
# scheduled on a loaded machine is not mistaken for a stuck one.
STALL_SECONDS = 3.0


class Cancelled(Exception):
    """A sibling failed (or the run was stopped); this thread stops too."""


_local = threading.local()


def current_token():
    """The cancel token of the code running on this thread (None outside a run)."""
    return getattr(_local, "token", None)


def swap_token(token):
    """Make ``token`` current on this thread; returns the previous one (to restore)."""
    prev = getattr(_local, "token", None)
    _local.token = token
    return prev


class Watch:
    """The running and blocked threads of one run, to tell a stuck run from a slow one."""

    __slots__ = ("lock", "running", "blocked", "moved_at", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 1  # the thread that starts the run
        self.blocked = 0
        self.moved_at = time.monotonic()

    def add_running(self, n: int) -> None:
        """``n`` threads of the run start (n > 0) or stop running (n < 0)."""
        with self.lock:
            self.running += n
            self.moved_at = time.monotonic()

    def block(self, n: int) -> None:
        """A running thread starts (n=1) or stops (n=-1) waiting without a timeout."""
        with self.lock:
            self.blocked += n
            self.moved_at = time.monotonic()

    def stuck(self) -> bool:
        with self.lock:
            return (self.blocked >= self.running
                    and time.monotonic() - self.moved_at >= STALL_SECONDS)


def wait_for(cond: threading.Condition, ready, timeout: float | None = None, token=None,
             what: str = "", hint: str | None = None) -> bool:
    """Wait on ``cond`` (its lock held by the caller) until ``ready()``.

    Returns False if ``timeout`` seconds passed first. Raises ``Cancelled`` when the
    thread's token is cancelled meanwhile: the token's waiter notifies ``cond``, so
    the wait ends at once rather than at the next timeout. Raises ``DSLError`` when
    the run is stuck (see ``Watch``); ``what`` says what is awaited (``queue 'q'``), ``hint``
    what to do about it.
    """
    if ready():
        return True
    token = token if token is not None else current_token()
    watch = getattr(token, "watch", None) if timeout is None else None
    if watch is not None:
        return _watched_wait(cond, ready, token, watch, what, hint)
    deadline = None if timeout is None else time.monotonic() + timeout
    waker = None
    if token is not None:
        def waker():
            with cond:
                cond.notify_all()
        with token.lock:
            token.waiters.append(waker)
    try:
        # the flag is read after the waiter is registered: a cancel either sees the
        # waiter (and wakes us) or happened before, and then the flag is already set
        while not ready():
            if token is not None and token.flag:
                raise Cancelled()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            cond.wait(left)
        return True
    finally:
        if waker is not None:
            with token.lock:
                token.waiters.remove(waker)


def _watched_wait(cond, ready, token, watch: Watch, what: str, hint: str | None) -> bool:
    """``wait_for`` without a timeout, waking now and then to see whether the run is stuck."""
    watch.block(1)
    try:
        while True:
            if wait_for(cond, ready, STALL_SECONDS / 2, token):
                return True
            if watch.stuck():
                raise DSLError(f"waiting forever on {what}: every thread of the run is "
                               "waiting and none can wake the others", hint=hint)
    finally:
        watch.block(-1)
