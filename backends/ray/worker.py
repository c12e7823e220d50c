"""The process behind one Node of a job: its root workspace and its part of the IR.

A ``NodeWorker`` is the body of a Ray actor (``ray.remote`` is applied by the driver,
with the actor's placement). It receives its node's module as IR text once per
compiled runnable, parses it, compiles it with the chosen backend where it runs,
and keeps the program; later runs send only the key. The actor is threaded: while
``run`` executes, other nodes call ``queue_take``/``queue_give`` to use the queues
it holds, and the driver calls ``cancel`` to stop a run when another node failed.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from dslc import backends
from dslc.backends.interp.executor import CancelToken
from dslc.runtime.values import type_of_value
from dslc.runtime.workspace import Workspace
from dslc.ir import pyrefs

from . import shm, split
from .cluster import JOB_UMASK
from .collective import Mailbox, PeerTransport
from .queues import RemoteQueue, give, take

WAIT_FOR_QUEUE_S = 120.0  # how long a peer waits for a queue its home has not created yet


class NodeWorker:
    """One node's root workspace, its compiled programs, and the queues peers reach."""

    def __init__(self, node: str, options: dict, around_run=None, setup=None):
        # peers' queue reads are served on other threads of this process: let them have the
        # GIL within 0.5 ms of asking, not Python's default 5 ms, or every remote read waits
        sys.setswitchinterval(0.0005)
        umask = os.environ.get(JOB_UMASK)
        if umask:  # a cluster dslc started runs under umask 077: the job's own files get the user's
            os.umask(int(umask, 8))
        if setup is not None:
            setup()  # the caller's per-process configuration (e.g. a backend's thresholds)
        self.node = node
        self.options = options
        self.backends: dict = {}
        self.root = Workspace()
        self.programs: dict = {}
        self.around_run = around_run  # e.g. makes the root the front end's current workspace
        self._tokens: dict = {}       # run id -> the cancel token of that run
        self._cancelled: set = set()  # run ids cancelled before they started here
        self._created = threading.Condition()
        self.served = [0, 0]
        self.mailbox = Mailbox()  # what other shards sent this node's collectives
        self._shared = None       # shared memory with nodes of this machine, once used
        self._peers_seen = None   # {group: {shard: which actor}} of the last run with collectives
        self._node_id = None      # (asked of Ray once)

    def reset(self) -> None:
        """Forget every blob and program (a fresh node, without a new process)."""
        self.root = Workspace()
        self.programs.clear()
        self._close_outbox()
        self._shared = None

    # --- identity
    def info(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "programs": len(self.programs)}

    # --- running
    def run_request(self, request: tuple) -> dict:
        """``run`` with its arguments in one tuple (what the driver sends)."""
        return self.run(*request)

    def run(self, run_id, backend, key, text, pyobjs, outputs, remote_queues, peers=None, drop=()) -> dict:
        """Run the program ``key`` (compiled by ``backend`` from ``text`` the first time) on the root.

        ``pyobjs``: the reference in ``text`` -> the object, for its Python ops; ``outputs``: the
        blobs to return (None for one nothing wrote); ``remote_queues``: blob -> the
        actor holding that queue; ``peers``: {collective group: {shard: (the node actor holding
        it, its machine, which actor)}} (backends/ray/collective.py); ``drop``: the (key, backend)
        of programs of variants the driver evicted (forgotten here too). Returns ``{"outputs",
        "types", "seconds"}``.
        """
        t0 = time.perf_counter()
        for old in drop:
            self.programs.pop(tuple(old), None)
        program = self.programs.get((key, backend))
        if program is None:
            program = self.programs[(key, backend)] = self._compile(backend, text, pyobjs or {})
        for name, home in (remote_queues or {}).items():
            self.root.create_blob(name).v = RemoteQueue(name, home)
        for name in outputs:
            self.root.create_blob(name)
        self._tokens[run_id] = token = CancelToken()
        if run_id in self._cancelled:  # another node failed before this run began
            token.cancel()
        if peers:  # (the run's collectives meet the other shards through its tokens)
            self.mailbox.drop_before(run_id)
            self._meet(peers)
            token.collective = PeerTransport(peers, self.mailbox, run_id, self._machine(), *self._shm())
        try:
            if self.around_run is not None:
                with self.around_run(self.root):
                    program.run(self.root, token=token)
            else:
                program.run(self.root, token=token)
        finally:
            self._tokens.pop(run_id, None)
            self._cancelled.discard(run_id)
            with self._created:
                self._created.notify_all()
        return {"outputs": {n: self._value(n) for n in outputs}, "types": self.types(),
                "seconds": time.perf_counter() - t0}

    def _compile(self, backend: str, text: str, pyobjs: dict):
        from dslc.ir import parse

        module = split.node_part(parse(text), self.node)
        # Python op functions travel by value: give each a reference of this process
        fresh = {ref: pyrefs.register(obj, ref.name) for ref, obj in pyobjs.items()}
        for op in module.walk():
            for k, v in list(op.attrs.items()):
                if isinstance(v, pyrefs.PyRef) and v in fresh:
                    op.attrs[k] = fresh[v]
        if backend not in self.backends:
            self.backends[backend] = backends.get(backend)(**self.options)
        return self.backends[backend].compile(module)

    def running(self) -> int:
        """How many runs are under way in this process (0 once a cancelled run has stopped)."""
        return len(self._tokens)

    def cancel(self, run_id) -> None:
        """Stop run ``run_id`` (blocked queue waits end with Cancelled), also if it has not begun."""
        self._cancelled.add(run_id)
        token = self._tokens.get(run_id)
        if token is not None:
            token.cancel()

    # --- the root workspace
    def types(self) -> dict:
        return {n: type_of_value(c.v) for n, c in list(self.root.blobs.items())
                if c.v is not None and not isinstance(c.v, RemoteQueue)}

    def _value(self, name):
        cell = self.root.lookup(name)
        v = None if cell is None else cell.v
        return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v

    def fetch(self, name):
        return self._value(name)

    def feed(self, name, value) -> bool:
        self.root.create_blob(name).v = value
        return True

    def has(self, name) -> bool:
        cell = self.root.lookup(name)
        return cell is not None and cell.v is not None

    # --- collectives: other shards' payloads for this node's rounds
    def _shm(self) -> tuple:
        """(outbox, inbox) of shared memory with this machine's other nodes (None, None
        where it cannot be used safely)."""
        if self._shared is None:
            self._shared = (shm.Outbox(), shm.Inbox()) if shm.available() else (None, None)
        return self._shared

    def _close_outbox(self, keep_segments: bool = False) -> None:
        """Unlink this node's segments; unless ``keep_segments``, forget them (new ones next)."""
        outbox = self._shared[0] if self._shared is not None else None
        if outbox is not None and keep_segments:
            outbox.release()
        elif outbox is not None:
            outbox.close()

    def _machine(self) -> str:
        """The Ray node id of this process (the machine, to tell which peers share memory)."""
        if self._node_id is None:
            self._node_id = self.info()["node_id"]
        return self._node_id

    def collective_put(self, key, sender: int, payload) -> None:
        self.mailbox.put(key, sender, payload)

    def _meet(self, peers: dict) -> None:
        """A peer that is another process than last run (a restarted node) never mapped this
        node's segments, whose names may be gone: start new ones."""
        seen = {g: {r: p[2] for r, p in ranks.items()} for g, ranks in peers.items()}
        if seen != self._peers_seen:
            self._close_outbox()
        self._peers_seen = seen

    def release_shared(self) -> None:
        """Every node's run is over: peers mapped this node's segments, their names can go."""
        self._close_outbox(keep_segments=True)

    def collective_pending(self) -> int:
        """Rounds holding payloads no call of this node has taken yet (0 after a clean run)."""
        return len(self.mailbox)

    # --- queues held here, used by other nodes
    def _queue(self, name):
        deadline = time.monotonic() + WAIT_FOR_QUEUE_S
        with self._created:
            while True:
                cell = self.root.lookup(name)
                if cell is not None and hasattr(cell.v, "get") and not isinstance(cell.v, RemoteQueue):
                    return cell.v
                if time.monotonic() > deadline:
                    raise LookupError(f"node {self.node!r} holds no queue {name!r}")
                self._created.wait(0.01)

    def queue_take(self, name, most: int, wait_s: float):
        """Up to ``most`` records (each handed out once); None once closed and drained."""
        got = take(self._queue(name), most, wait_s)
        self.served[0] += 1
        self.served[1] += len(got or ())
        return got

    def queue_served(self) -> tuple:
        """(remote reads answered, records they carried): for benchmarks and docs."""
        return tuple(self.served)

    def queue_give(self, name, records) -> int:
        return give(self._queue(name), records)

    def queue_close(self, name) -> None:
        self._queue(name).close()

    def queue_num_blobs(self, name) -> int:
        return self._queue(name).num_blobs

    def queue_len(self, name) -> int:
        return len(self._queue(name))
