"""Collectives: the kernels of Allreduce, Broadcast and Allgather, within a process and
across the shards of a data-parallel job.

An op's inputs are its replicas on this shard (one per device); with ``shards > 1`` the
shard's result is then combined with the other shards' through a *transport*, whose one
primitive is

    exchange(group, rank, n, payload) -> [payload of rank 0, ..., payload of rank n - 1]

Everything is combined in rank order (replicas in input order, then shards in rank
order), so results never depend on which shard arrived first. The shards of a group meet
by counting: the k-th collective call of rank r in ``group`` meets the k-th call of every
other rank, so every shard must issue the group's collectives in the same order (the
same net on every shard does).

The transport is the run's: the ``collective`` its cancel tokens carry (a Ray node sets
it for its run: backends/ray/collective.py), else the process's ``LocalHub`` (shards are
threads of one process, e.g. Nodes of a job under LocalSession). A shard waiting for the
others stops when its run is cancelled; a local run where no other thread can ever
arrive is reported as stuck (runtime/cancel.py), a remote one after
``DSLC_COLLECTIVE_TIMEOUT_S`` seconds (default 300).
"""
from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from dslc.ir.diagnostics import DSLError

from .cancel import current_token, wait_for


def timeout_s() -> float:
    text = os.environ.get("DSLC_COLLECTIVE_TIMEOUT_S", "300")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise CollectiveError(f"DSLC_COLLECTIVE_TIMEOUT_S={text!r} is not a number of seconds",
                              hint="set it to how long a shard waits for the others, e.g. 300")
    return seconds


class CollectiveError(DSLError):
    """The shards of a collective did not meet (one is missing, or they disagree)."""


def not_met(group: str, missing: list, n: int, waited: float) -> CollectiveError:
    return CollectiveError(f"collective group {group!r}: shard(s) {missing} of {n} did not arrive within "
                           f"{waited:g} s", hint=missing_hint(n) + "; DSLC_COLLECTIVE_TIMEOUT_S sets the wait")


def missing_hint(n: int) -> str:
    return (f"run all {n} shards of the job together, each issuing the same collectives in the "
            "same order (build every shard's net with the same Parallelize call)")


class _Rounds:
    """The meetings of one run's shards: rounds under way and each rank's next call."""

    def __init__(self):
        self.open: dict = {}   # (group, seq) -> [[(payload,) or None per rank], how many took it]
        self.next: dict = {}   # (group, rank) -> the seq of its next call

    def forget(self, group: str) -> None:
        for table in (self.open, self.next):
            for key in [k for k in table if k[0] == group]:
                del table[key]


class LocalHub:
    """Shards that are threads of this process meet here; the shards of one local run
    (one stuck-run watch) count their calls apart from any other run's."""

    def __init__(self):
        self._cv = threading.Condition()
        self._by_run = weakref.WeakKeyDictionary()  # a run's watch -> its _Rounds
        self._unwatched = _Rounds()

    def exchange(self, group: str, rank: int, n: int, payload) -> list:
        token = current_token()
        watch = getattr(token, "watch", None)
        # a run that can tell when it is stuck waits for that; anything else for the timeout
        limit = None if watch is not None else timeout_s()
        with self._cv:
            rounds = self._unwatched if watch is None else self._by_run.setdefault(watch, _Rounds())
            seq = rounds.next.get((group, rank), 0)
            rounds.next[(group, rank)] = seq + 1
            key = (group, seq)
            entry = rounds.open.setdefault(key, [[None] * n, 0])
            got = entry[0]
            if len(got) != n:
                raise CollectiveError(f"collective group {group!r}: rank {rank} counts {n} shards, "
                                      f"another rank {len(got)}", hint=missing_hint(max(n, len(got))))
            got[rank] = (payload,)
            self._cv.notify_all()
            try:
                if not wait_for(self._cv, lambda: all(p is not None for p in got), limit, token,
                                what=f"collective group {group!r} (rank {rank} of {n}, call {seq})",
                                hint=missing_hint(n)):
                    raise not_met(group, [r for r, p in enumerate(got) if p is None], n, limit)
            except BaseException:
                rounds.forget(group)  # the others get a fresh start on the next run
                raise
            entry[1] += 1
            if entry[1] == n:
                del rounds.open[key]
            return [p[0] for p in got]


_LOCAL = LocalHub()


def transport():
    """The transport of the code running on this thread: its run's (``collective`` of the
    run's cancel token, set by a Ray node for its run), else this process's LocalHub."""
    return getattr(current_token(), "collective", None) or _LOCAL


def _exchange(group, shards, shard, payload) -> list:
    if not 0 <= shard < shards:
        raise CollectiveError(f"collective group {group!r}: shard {shard} of {shards} is out of range",
                              hint="give each shard an id in 0 .. num_shards - 1")
    return transport().exchange(group, shard, shards, payload)


def _sum(parts):
    """A new array: parts[0] + parts[1] + ..., added in that order."""
    total = np.add(parts[0], parts[1]) if len(parts) > 1 else np.array(parts[0], copy=True)
    for x in parts[2:]:
        total += x
    return total


def allreduce(*xs, reduce="sum", group="", shards=1, shard=0, tensors=1):
    """Every output = the sum (or mean) of its tensor's inputs, and of every shard's: the
    inputs are replicas x ``tensors`` blobs, replica by replica."""
    k = tensors
    replicas = len(xs) // k
    if shards > 1:  # (all k tensors in one exchange; a lone replica's blobs are only read)
        mine = list(xs) if replicas == 1 else [_sum(xs[j::k]) for j in range(k)]
        every = _exchange(group, shards, shard, mine)
        totals = [_sum([theirs[j] for theirs in every]) for j in range(k)]
    else:
        totals = [_sum(xs[j::k]) for j in range(k)]
    count = replicas * shards
    if reduce == "mean":
        totals = [(t / count).astype(xs[j].dtype, copy=False) for j, t in enumerate(totals)]
    # (each replica's blob its own array)
    out = totals + [t.copy() for _ in range(replicas - 1) for t in totals]
    return out[0] if len(out) == 1 else tuple(out)


def broadcast(*xs, root=0, group="", shards=1, shard=0):
    """Every output = the root shard's first input (one copy per replica)."""
    first = xs[0]
    if shards > 1:
        first = _exchange(group, shards, shard, first if shard == root else None)[root]
    out = [np.array(first, copy=True) for _ in xs]
    return out[0] if len(out) == 1 else tuple(out)


def allgather(x, group="", shards=1, shard=0):
    """Every shard's ``x`` concatenated along the first axis, in rank order."""
    if shards == 1:
        return np.array(x, copy=True)
    parts = _exchange(group, shards, shard, x)
    widths = {np.shape(p)[1:] for p in parts}
    if len(widths) > 1:
        raise CollectiveError(f"Allgather of group {group!r}: the shards' rows differ in shape "
                              f"({sorted(map(list, widths))})", hint="every shard gathers rows of one shape")
    return np.concatenate(parts, axis=0)


FUNCTIONS = {"Allreduce": allreduce, "Broadcast": broadcast, "Allgather": allgather}
