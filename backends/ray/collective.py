"""Collectives between the nodes of a Ray cluster (the transport of runtime/collectives.py).

Each shard sends its payload straight to the node actors of the other shards of its
group, which keep it in their ``Mailbox`` until their own call of the same round
takes it:

    rank r:  for every other rank q: node_of(q).collective_put(key, r, q, payload)
             wait in this node's mailbox for every other rank's payload of ``key``
             combine all n, in rank order

``key`` is (run, group, the call's count in that group): the k-th call of a group on
one shard meets the k-th on every other. One message per peer and no round trip. To a
peer on the same machine the message only says where the payload lies in this node's
shared memory (shm.py: one memcpy, read in place); to one on another machine it carries
the payload, through Ray's object store and transfer. Every
shard combines the same payloads in the same order, so every shard gets the same bits.

The driver tells each node which node holds every rank of its groups (``peers``). A
shard waiting for the others stops when its run is cancelled (another node failed:
the driver cancels the rest) and gives up after ``DSLC_COLLECTIVE_TIMEOUT_S`` seconds,
naming the ranks that never sent.
"""
from __future__ import annotations

import threading

from dslc.runtime.cancel import current_token, wait_for
from dslc.runtime.collectives import CollectiveError, missing_hint, not_met, timeout_s

from . import shm


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
    """One node's side of its run's collectives: ``peers`` is {group: {rank: (node actor,
    Ray node id, ...)}}; ranks on this machine get the payload through shared memory (shm.py)."""

    def __init__(self, peers: dict, mailbox: Mailbox, run, here: str | None = None,
                 outbox: "shm.Outbox | None" = None, inbox: "shm.Inbox | None" = None, put=None):
        self.peers, self.mailbox, self.run = peers, mailbox, run
        self.here, self.outbox, self.inbox = here, outbox, inbox
        self.put = put  # how a payload for several far peers enters the object store (ray.put)
        self._next: dict = {}
        self._lock = threading.Lock()

    def exchange(self, group: str, rank: int, n: int, payload) -> list:
        ranks = self.peers.get(group, {})
        if sorted(ranks) != list(range(n)):
            raise CollectiveError(f"collective group {group!r} has {n} shards, but the job runs shard(s) "
                                  f"{sorted(ranks)} on its nodes", hint=missing_hint(n))
        with self._lock:
            seq = self._next.get((group, rank), 0)
            self._next[(group, rank)] = seq + 1
        others = [q for q in range(n) if q != rank]
        near = [q for q in others if self.outbox is not None and ranks[q][1] == self.here]
        shared = self.outbox.pack(group, seq, payload) if near else None
        far = [q for q in others if shared is None or q not in near]
        # (one copy into the object store, whatever the number of peers far away)
        by_value = payload
        if len(far) > 1 and payload is not None:
            if self.put is None:
                import ray
                self.put = ray.put
            by_value = self.put(payload)
        for q in others:
            ranks[q][0].collective_put.remote((self.run, group, seq, q), rank,
                                              by_value if q in far else shared)
        got = self.mailbox.take((self.run, group, seq, rank), others, n)
        got[rank] = payload
        return [self.inbox.unpack(got[q]) if isinstance(got[q], shm.ShmPayload) else got[q] for q in range(n)]
