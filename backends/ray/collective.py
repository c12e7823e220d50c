"""Collectives between the nodes of a Ray cluster (the transport of runtime/collectives.py).

Each shard sends its payload straight to the node actors of the other shards of its
group, which keep it in their ``Mailbox`` until their own call of the same round
takes it:

    rank r:  for every other rank q: node_of(q).collective_put(key, r, q, payload)
             wait in this node's mailbox for every other rank's payload of ``key``
             combine all n, in rank order

``key`` is (run, group, the call's count in that group): the k-th call of a group on
one shard meets the k-th on every other. One message per peer and no round trip: a
payload of more than Ray's inline limit goes through the object store once (shared
memory on one machine, Ray's transfer between machines) and is read in place. Every
shard combines the same payloads in the same order, so every shard gets the same bits.

The driver tells each node which node holds every rank of its groups (``peers``). A
shard waiting for the others stops when its run is cancelled (another node failed:
the driver cancels the rest) and gives up after ``DSLC_COLLECTIVE_TIMEOUT_S`` seconds,
naming the ranks that never sent.
"""
from __future__ import annotations

import threading

from dslc.backends.runtime.cancel import current_token, wait_for
from dslc.backends.runtime.collectives import CollectiveError, missing_hint, not_met, timeout_s


class Mailbox:
    """Payloads other shards sent to this node, until the round they belong to takes them."""

    def __init__(self):
        self._cv = threading.Condition()
        self._got: dict = {}  # (run, group, seq, to rank) -> {from rank: payload}

    def put(self, key, sender: int, payload) -> None:
        with self._cv:
            self._got.setdefault(key, {})[sender] = payload
            self._cv.notify_all()

    def take(self, key, senders: list, n: int):
        """The payloads of ``senders`` for ``key``, waited for (cancel-aware, timed out)."""
        token, limit = current_token(), timeout_s()
        with self._cv:
            box = self._got.setdefault(key, {})
            if not wait_for(self._cv, lambda: all(s in box for s in senders), limit, token):
                self._got.pop(key, None)
                raise not_met(key[1], [s for s in senders if s not in box], n, limit)
            return self._got.pop(key)

    def drop_before(self, run: int) -> None:
        """Forget what runs before ``run`` left (rounds a failed run never took); a later
        run's payloads may already be here (its other shards started first)."""
        with self._cv:
            for key in [k for k in self._got if k[0] < run]:
                del self._got[key]

    def __len__(self):
        with self._cv:
            return len(self._got)


class PeerTransport:
    """One node's side of its run's collectives: ``peers`` is {group: {rank: node actor}}."""

    def __init__(self, peers: dict, mailbox: Mailbox, run):
        self.peers, self.mailbox, self.run = peers, mailbox, run
        self._next: dict = {}
        self._lock = threading.Lock()

    def exchange(self, group: str, rank: int, n: int, payload) -> list:
        import ray

        ranks = self.peers.get(group, {})
        if sorted(ranks) != list(range(n)):
            raise CollectiveError(f"collective group {group!r} has {n} shards, but the job runs shard(s) "
                                  f"{sorted(ranks)} on its nodes", hint=missing_hint(n))
        with self._lock:
            seq = self._next.get((group, rank), 0)
            self._next[(group, rank)] = seq + 1
        # (one copy into the object store, whatever the number of peers)
        sent = ray.put(payload) if n > 2 and payload is not None else payload
        for q in range(n):
            if q != rank:
                ranks[q].collective_put.remote((self.run, group, seq, q), rank, sent)
        got = self.mailbox.take((self.run, group, seq, rank), [q for q in range(n) if q != rank], n)
        got[rank] = payload
        return [got[q] for q in range(n)]
