"""Cancellation that blocking runtime operations can see.

A backend runs each thread of a job under a cancel token (an object with ``flag``,
``lock`` and a ``waiters`` list of callables that ``cancel()`` calls). It makes the
token current on its thread with ``swap_token``; a blocking operation (a queue read
or write) waits through ``wait_for``, which returns when its condition holds and
raises ``Cancelled`` as soon as the token is cancelled, so a failing sibling never
leaves a thread blocked forever.
"""
from __future__ import annotations

import threading
import time


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


def wait_for(cond: threading.Condition, ready, timeout: float | None = None, token=None) -> bool:
    """Wait on ``cond`` (its lock held by the caller) until ``ready()``.

    Returns False if ``timeout`` seconds passed first. Raises ``Cancelled`` when the
    thread's token is cancelled meanwhile: the token's waiter notifies ``cond``, so
    the wait ends at once rather than at the next timeout.
    """
    if ready():
        return True
    token = token if token is not None else current_token()
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
