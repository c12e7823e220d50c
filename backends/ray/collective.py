"""Collectives between the nodes of a Ray cluster (the transport of runtime/collectives.py).

A session whose job has collective ops across shards starts one small ``Hub`` actor. A
node's shard meets the others there by reference, not by value:

    rank r:  ref_r = ray.put(payload)                  # once into the object store
             hub.exchange(key, r, n, [ref_r])  ->  [ref_0, ..., ref_{n-1}]
             ray.get(every other rank's ref)           # shared memory on one machine,
                                                        # Ray's transfer between machines
so the hub only matches calls (``key`` = the run, the group, the call's count) and never
touches the arrays; each shard combines the payloads itself, in rank order, so every
shard computes the same bits. The refs travel wrapped in a list, which keeps Ray from
resolving them, and the hub drops a round once every rank has taken it.

A waiting shard stops when its run is cancelled (another node failed), and the hub
gives up on a round after ``DSLC_COLLECTIVE_TIMEOUT_S`` seconds, naming the ranks that
never came.
"""
from __future__ import annotations

import threading
import time

from dslc.backends.runtime.collectives import CollectiveError, missing_hint, not_met, timeout_s

from .queues import wait_ref


class Hub:
    """The meeting point of one session's shards (the body of a threaded Ray actor)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._rounds: dict = {}  # key -> [[ref or None per rank], how many took it]
        self._dropped: set = set()  # runs given up (a node failed): their waiters stop

    def exchange(self, key, rank: int, n: int, boxed: list, wait_s: float):
        """Every rank's ref, in rank order, once all n came; else what went wrong (a str)."""
        run = key[0]
        with self._cv:
            entry = self._rounds.setdefault(key, [[None] * n, 0])
            refs = entry[0]
            if len(refs) != n:
                return f"collective group {key[1]!r}: rank {rank} counts {n} shards, another rank {len(refs)}"
            refs[rank] = boxed[0]
            self._cv.notify_all()
            deadline = time.monotonic() + wait_s
            while not all(r is not None for r in refs):
                left = deadline - time.monotonic()
                if run in self._dropped:
                    return f"collective group {key[1]!r}: the run was stopped"
                if left <= 0:
                    self._rounds.pop(key, None)
                    return not_met(key[1], [r for r, x in enumerate(refs) if x is None], n, wait_s).message
                self._cv.wait(min(left, 1.0))
            entry[1] += 1
            if entry[1] == n:
                del self._rounds[key]
            return list(refs)

    def drop(self, run) -> None:
        """Give up the rounds of ``run`` (one of its nodes failed)."""
        with self._cv:
            self._dropped.add(run)
            for key in [k for k in self._rounds if k[0] == run]:
                del self._rounds[key]
            self._cv.notify_all()

    def pending(self) -> int:
        """Rounds under way (0 between runs): for tests."""
        with self._cv:
            return len(self._rounds)


def start_hub():
    """A hub actor for a session (no CPU of its own: it only matches calls)."""
    import ray
    return ray.remote(Hub).options(num_cpus=0, max_concurrency=1024, max_restarts=0).remote()


class RayTransport:
    """A node's side of the hub, for one run: ``exchange`` as runtime/collectives wants it."""

    def __init__(self, hub, run):
        self.hub, self.run = hub, run
        self._next: dict = {}
        self._lock = threading.Lock()

    def exchange(self, group: str, rank: int, n: int, payload) -> list:
        import ray

        with self._lock:
            seq = self._next.get((group, rank), 0)
            self._next[(group, rank)] = seq + 1
        mine = ray.put(payload)
        refs = wait_ref(self.hub.exchange.remote((self.run, group, seq), rank, n, [mine], timeout_s()))
        if isinstance(refs, str):
            raise CollectiveError(refs, hint=missing_hint(n))
        others = ray.get([r for i, r in enumerate(refs) if i != rank])
        others.insert(rank, payload)
        return others
