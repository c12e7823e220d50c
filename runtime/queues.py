"""Bounded blocking queues of records (CreateBlobsQueue and the ops that use it).

A record is a tuple of ``num_blobs`` values. The contract, as Caffe2's BlobsQueue:

* ``put`` waits while the queue is full and open. A record goes in whenever there
  is room, even into a closed queue; ``put`` fails (returns False) only when the
  queue is closed *and* full.
* ``get`` waits while the queue is empty and open. A closed queue still hands out
  what it holds (it drains); once closed and empty, ``get`` returns None.
* ``close`` wakes every waiter.

Waits end with ``Cancelled`` when the thread's run is cancelled (see ``cancel``).
"""
from __future__ import annotations

import threading
from collections import deque

from .cancel import wait_for

TIMED_OUT = object()  # what ``get`` returns when its timeout passed
_STUCK_HINT = "make a task write to it or close it (CloseBlobsQueue), or give the dequeue a timeout"


class BlobsQueue:
    """A FIFO of at most ``capacity`` records."""

    handle_kind = "queue"  # the IR handle type of a blob holding one

    def __init__(self, capacity: int, num_blobs: int, field_names=(), name: str = "queue"):
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.num_blobs = int(num_blobs)
        self.field_names = list(field_names)
        self.name = name
        self.closed = False
        self._items: deque = deque()
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)

    def put(self, record: tuple) -> bool:
        with self._not_full:
            items, cap = self._items, self.capacity
            wait_for(self._not_full, lambda: len(items) < cap or self.closed,
                     what=f"queue {self.name!r}", hint=_STUCK_HINT)
            if len(items) >= cap:
                return False  # closed and full
            items.append(record)
            self._not_empty.notify()
        return True

    def get(self, timeout: float | None = None):
        """The oldest record; None once closed and drained; TIMED_OUT after ``timeout`` s."""
        with self._not_empty:
            items = self._items
            if not wait_for(self._not_empty, lambda: items or self.closed, timeout,
                            what=f"queue {self.name!r}", hint=_STUCK_HINT):
                return TIMED_OUT
            if not items:
                return None
            record = items.popleft()
            self._not_full.notify()
        return record

    def close(self) -> None:
        with self._not_empty:
            self.closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"BlobsQueue({self.name!r}, {len(self._items)}/{self.capacity}, {state})"
