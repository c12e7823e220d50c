"""Queues whose producer and consumer tasks run on different nodes.

A queue lives where it was created (its *home*: the node whose task ran
CreateBlobsQueue). Every other node that uses it holds a ``RemoteQueue`` under the
same blob name: a proxy with the runtime queue's contract (``put``/``get``/``close``)
that reaches the home node's actor.

Reads take records in batches (one actor call returns up to ``BATCH`` records, which
Ray ships as one object, through shared memory when large), so a consumer pays
one round trip per batch, not per record. The next batch is asked for while the
current one is consumed. The home queue hands each record out once, so two
consumers never see the same record, and each sees its records in queue order (a
consumer that stops before the queue is drained drops what it had taken ahead). Writes go one record per call: a put must be visible (and a full
queue must push back) at once. bench/distributed.py measures this against Ray's
own ``ray.util.queue.Queue``; docs/distributed.md has the figures.
"""
from __future__ import annotations

import time
from collections import deque

from dslc.runtime.cancel import Cancelled, current_token
from dslc.runtime.queues import TIMED_OUT

BATCH = 256  # records per remote read
POLL_S = 0.05  # how often a blocked remote read looks at its cancel token
LINGER_S = 0.002  # how long a remote read waits for more records once it has one


def take(queue, most: int, wait_s: float):
    """At home: up to ``most`` records, waiting at most ``wait_s`` for the first.

    [] when none came in time; None once the queue is closed and drained.
    """
    first = queue.get(wait_s)
    if first is TIMED_OUT:
        return []
    if first is None:
        return None
    got = [first]
    # wait a little for more: a round trip costs ~1 ms, so a fuller batch pays for itself
    deadline = time.monotonic() + LINGER_S
    while len(got) < most:
        rec = queue.get(max(0.0, deadline - time.monotonic()))
        if rec is TIMED_OUT or rec is None:
            break
        got.append(rec)
    return got


def give(queue, records) -> int:
    """At home: put ``records`` in order; how many went in (fewer once closed and full)."""
    n = 0
    for rec in records:
        if not queue.put(tuple(rec)):
            break
        n += 1
    return n


def wait_ref(ref):
    """The value of ``ref``, waited for in short slices so a cancelled run stops at once."""
    import ray

    token = current_token()
    while True:
        ready, _ = ray.wait([ref], timeout=POLL_S)
        if ready:
            return ray.get(ref)
        if token is not None and token.flag:
            ray.cancel(ref)
            raise Cancelled()


class RemoteQueue:
    """A queue held by another node's actor, seen through its blob name."""

    handle_kind = "queue"

    def __init__(self, name: str, home, num_blobs: int | None = None):
        self.name = name
        self.home = home
        self._num_blobs = num_blobs
        self._buffer: deque = deque()
        self._drained = False
        self._pending = None  # the batch asked for ahead of need
        self.closed = False

    @property
    def num_blobs(self) -> int:
        if self._num_blobs is None:
            self._num_blobs = int(self._call("queue_num_blobs"))
        return self._num_blobs

    def _call(self, method: str, *args):
        """Call the home actor and wait for the answer."""
        return self._wait(getattr(self.home, method).remote(self.name, *args))

    def _wait(self, ref):
        return wait_ref(ref)

    def get(self, timeout: float | None = None):
        if not self._buffer and not self._drained:
            self._refill(timeout)
        if self._buffer:
            return self._buffer.popleft()
        return None if self._drained else TIMED_OUT

    def _take(self, wait_s: float):
        import ray  # noqa: F401  (the home is an actor handle)
        return self.home.queue_take.remote(self.name, BATCH, wait_s)

    def _refill(self, timeout) -> None:
        """Fill the buffer from the home queue. The next batch is asked for as soon as one
        arrives (while this node works through it), so a reader that keeps up waits for the
        network once, not once per batch."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ref = self._pending
            self._pending = None
            if ref is None:
                left = POLL_S * 4 if deadline is None else max(0.0, min(deadline - time.monotonic(), POLL_S * 4))
                ref = self._take(left)
            got = self._wait(ref)
            if got is None:
                self._drained = True
                return
            if got:
                self._buffer.extend(tuple(r) for r in got)
                self._pending = self._take(POLL_S * 4)
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def put(self, record) -> bool:
        return self._call("queue_give", [record]) == 1

    def close(self) -> None:
        self.closed = True
        self._call("queue_close")

    def __len__(self):
        return len(self._buffer) + int(self._call("queue_len"))

    def __reduce__(self):  # a proxy travels as its name and home, never with its buffer
        return (RemoteQueue, (self.name, self.home, self._num_blobs))

    def __repr__(self):
        return f"RemoteQueue({self.name!r})"
