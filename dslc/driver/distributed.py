"""RaySession: a job's Nodes as processes of a Ray cluster.

``RaySession(address=None, backend="interp")`` is a Session like LocalSession: the
driver (this process) traces, lowers and optimizes each runnable once (once more with a
dim unknown when a blob is fed other sizes, as LocalSession does: variants.py); every Node
the job uses is one Ray actor (backends/ray/worker.py) holding that node's root
workspace, which compiles its part of the IR with ``backend`` where it runs. A run
sends each node a small message (the IR text only the first time), the nodes run
their tasks concurrently, and the task outputs come back to the driver.

``address``: None uses the Ray this process is already connected to, or starts a
private local cluster for the session (stopped at ``close()``); ``"local"`` always
starts one; ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` join a running one.

A Node named like a custom resource of the cluster runs on the machine offering
it; Ray places the others. Blobs are per node (docs/distributed.md): a queue used
by a node that did not create it is reached through its home node; any other blob
read by a node that neither writes nor holds it is an error before anything runs.
"""
from __future__ import annotations

import sys
import time

from dslc import backends as _backends
from dslc.runtime.streams import session_seed
from dslc.runtime.values import type_of_value
from dslc.ir import print_module, pyrefs
from dslc.ir.diagnostics import DSLError, ExecutionError, NodeLostError
from dslc.ir.gcpause import paused
from dslc.lower import lower_group
from dslc.driver import jobfile, runner
from dslc.driver.session import CompiledRunnable, LocalSession, Session, _load_types, _still_valid, pipeline
from dslc.driver.variants import MAX_VARIANTS, generalized
from dslc.trace.blobref import BlobReference
from dslc.trace.tracing import user_location

STOP_TIMEOUT_S = 30.0  # how long the other nodes get to stop once one failed
# the cluster starter, the splitter by node and the node worker, from the backend registry
_cluster = _backends.cluster("ray")


class ClusterUnavailable(DSLError):
    """Ray is not installed, or the cluster cannot be started or reached."""


class RaySession(Session):
    """Runs each Node of a job in its own process of a Ray cluster."""

    def __init__(self, address: str | None = None, backend: str = "interp", source: str = "",
                 passes=None, num_cpus: int | None = None, temp_dir: str | None = None,
                 node_setup=None, **options):
        """``options`` go to the backend on every node; ``node_setup()``, if given, is called
        once in each node's process when it starts."""
        super().__init__()
        self.node_setup = node_setup
        ray = _import_ray()
        _backends.get(backend)  # an unknown backend fails here, not inside every node
        # one seed for every node: random ops seeded by nothing draw the values a local run
        # of this process would (each node's own process would draw a seed of its own)
        options["seed"] = session_seed(options.get("seed"))
        self.backend_name, self.options = backend, options
        self.source = source
        self.passes = pipeline(passes)
        self.own_cluster = None
        self._actors: dict = {}
        self._sent: dict = {}     # node -> keys of the programs it holds
        self._stale: dict = {}    # node -> keys of programs it holds for evicted variants (dropped next run)
        self._types: dict = {}    # node -> blob -> type of what its root holds
        self._compiled: dict = {}  # id(group) -> its compiled variants, the last one used last
        self.compiles = 0  # lowerings this session made (as LocalSession.compiles)
        self._runs = 0
        self._node_ids: dict = {}  # node -> the Ray node id its actor runs on
        self._started: dict = {}   # node -> the number of its actor among those started
        self._starts = 0
        self._connect(ray, address, num_cpus, temp_dir)
        try:
            self._resources = set(ray.cluster_resources())
            self._pickle_job_by_value()
        except BaseException:
            self.close()  # a cluster this session started never outlives it
            raise

    def _connect(self, ray, address, num_cpus, temp_dir) -> None:
        if address in (None, "auto") and ray.is_initialized():
            return  # this process already runs on a cluster (a test's, or the caller's own)
        if address in (None, "local"):
            self.own_cluster = _cluster.local_cluster(temp_dir, num_cpus=num_cpus or 2)
            try:
                self.own_cluster.start()
            except Exception as e:
                raise ClusterUnavailable(f"cannot start a local Ray cluster: {e}".splitlines()[0],
                                         hint=f"see Ray's logs in {self.own_cluster.temp_dir}") from None
            return
        try:
            _cluster.connect(address)
        except _cluster.ClusterError as e:
            raise ClusterUnavailable(str(e), hint="check the address (ray://HOST:PORT, HOST:PORT or auto) "
                                                  "and that the cluster is up") from None

    # --- nodes
    def nodes(self) -> list[str]:
        return list(self._actors)

    def actor(self, node: str):
        """The actor of ``node``, started on first use."""
        a = self._actors.get(node)
        if a is None:
            a = self._actors[node] = self._start_actor(node)
            self._starts += 1
            self._started[node] = self._starts  # (which process: a restarted node is another one)
            self._node_ids.pop(node, None)      # (and may run on another machine)
            self._sent[node], self._types[node] = set(), {}
        return a

    def _start_actor(self, node: str):
        import ray

        opts = dict(num_cpus=0, max_concurrency=64, max_restarts=0)
        if node in self._resources:  # a Node named like a machine's custom resource runs there
            opts["resources"] = {node: 0.001}
        return ray.remote(_cluster.node_worker()).options(**opts).remote(node, self.options, runner.current_as,
                                                              self.node_setup)

    def node_info(self, node: str) -> dict:
        """``{"pid", "node_id", "programs"}`` of the process running ``node`` (programs: how many
        compiled programs it holds)."""
        import ray
        return ray.get(self.actor(node).info.remote())

    def restart_node(self, node: str) -> None:
        """Replace the actor of ``node`` by a fresh one (an empty root workspace)."""
        import ray
        old = self._actors.pop(node, None)
        if old is not None:
            ray.kill(old, no_restart=True)
        self.actor(node)

    def reset(self) -> None:
        """Empty every node's workspace and forget what was compiled (the processes stay)."""
        import ray
        refs = {n: a.reset.remote() for n, a in self._actors.items()}
        for node, ref in refs.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._actors.pop(node)  # a node lost earlier: a new one starts when next used
        self._sent = {n: set() for n in self._actors}
        self._stale.clear()
        self._types = {n: {} for n in self._actors}
        self._compiled.clear()

    # --- blobs, by node
    def fetch_blob(self, name, node: str = "local"):
        import ray
        v = ray.get(self.actor(node).fetch.remote(str(name)))
        if v is None:
            raise DSLError(f"node {node!r} has no blob {str(name)!r}", user_location(),
                           "check the blob name and the node that writes it")
        return v

    def feed_blob(self, name, value, node: str = "local") -> bool:
        import ray

        import numpy as np
        value = np.asarray(value) if not hasattr(value, "handle_kind") else value
        ray.get(self.actor(node).feed.remote(str(name), value))
        self._types.setdefault(node, {})[str(name)] = type_of_value(value)
        return True

    # --- compiling
    def compile(self, runnable, workspace_type=None) -> CompiledRunnable:
        """Lower and optimize ``runnable`` against what the nodes hold now; reused while it
        fits, as LocalSession's are: a blob fed since with other dims lowers it once more with
        those dims unknown, a compile every later size reuses (variants.py), at most
        ``MAX_VARIANTS`` kept per runnable."""
        group = self.as_group(runnable, workspace_type)
        existing: dict = {}
        for types in self._types.values():
            existing.update(types)
        kept = [v for v in self._compiled.get(id(group), ()) if v.group is group]
        self._compiled[id(group)] = kept
        for got in reversed(kept):  # (the last one used first)
            if _still_valid(got.deps, existing):
                kept.remove(got)
                kept.append(got)
                return got
        before = kept[-1] if kept else None
        widens, widened, wide = before is None or before.widens, [], existing
        if before is not None and widens:
            wide, widened = generalized(existing, before.deps)
        try:
            got = self._lower(group, wide)
        except DSLError:
            if not widened:
                raise
            got = self._lower(group, existing)  # (an op whose rule needs a known dim: as LocalSession)
            widens = False
        got.widens = widens
        kept.append(got)
        if len(kept) > MAX_VARIANTS:
            self._evict(kept.pop(0))
        return got

    def _evict(self, variant) -> None:
        """Forget an evicted variant here and, with the next run each node is sent, there:
        a node keeps the programs it was sent, so without this it would keep every variant's
        (LocalSession's go with their CompiledRunnable)."""
        for node, sent in self._sent.items():
            gone = {entry for entry in sent if entry[0] == variant.key}
            if gone:
                sent.difference_update(gone)
                self._stale.setdefault(node, set()).update(gone)

    def _lower(self, group, existing: dict) -> CompiledRunnable:
        """``group`` lowered against blobs of the types ``existing`` gives, optimized, as IR
        text for the nodes (each compiles it with the backend the first time it runs it)."""
        self.compiles += 1
        with paused():
            module = lower_group(group, self.source, existing)
            deps = _load_types(module)
            LocalSession.optimize(self, module)
            got = CompiledRunnable(group, module, None, deps, group.tasks())
            got.text = print_module(module)
            got.blobs = _cluster.node_blobs(module)
            # every Python op function travels by value: a node may not import the job file
            got.pyobjs = {v: pyrefs.resolve(v) for op in module.walk() for v in op.attrs.values()
                          if isinstance(v, pyrefs.PyRef)}
            got.key = (id(group), time.monotonic_ns())
        return got

    verify_each = False
    print_after = None
    ir_out = None
    pass_manager = None

    # --- running
    def _run(self, group) -> None:

        compiled = self.compile(group)
        remote = self._remote_queues(compiled)
        peers = self._peers(compiled)
        refs = {}
        self._runs += 1
        sent = (compiled.key, self.backend_name)
        for node, nb in compiled.blobs.items():
            actor = self.actor(node)
            first = sent not in self._sent[node]
            # (one argument: Ray serializes each argument on its own, ~30 us apiece)
            refs[actor.run_request.remote((
                self._runs, self.backend_name, compiled.key, compiled.text if first else None,
                compiled.pyobjs if first else None, nb.outputs, remote.get(node, {}),
                {g: peers[g] for g in nb.shards}, tuple(self._stale.pop(node, ()))))] = node
        results = self._gather(refs)
        if peers:  # (every node is done: their shared memory segments may lose their names)
            for node, nb in compiled.blobs.items():
                if nb.shards:
                    self.actor(node).release_shared.remote()
        self.last_seconds = {node: r["seconds"] for node, r in results.items()}  # per node, for benches
        for node in results:
            self._sent[node].add(sent)
            self._types[node] = results[node]["types"]
        self._set_outputs(compiled, results)

    def _gather(self, refs: dict) -> dict:
        """Wait for every node; on the first failure stop the others and raise it, located."""
        import ray

        results, failure, pending = {}, None, list(refs)
        deadline = None
        while pending:
            done, pending = ray.wait(pending, num_returns=1,
                                     timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            if not done:
                break  # the stopping nodes did not answer in time: report the failure anyway
            ref = done[0]
            node = refs[ref]
            try:
                results[node] = ray.get(ref)
            except Exception as e:
                err = _node_error(node, e)
                if err is None:
                    continue  # cancelled because another node failed
                if failure is None:
                    failure = err
                    deadline = time.monotonic() + STOP_TIMEOUT_S
                    for other in set(refs.values()) - {node}:
                        if other in self._actors:
                            self._actors[other].cancel.remote(self._runs)
        if failure is not None:
            if isinstance(failure, NodeLostError):
                self._forget(failure.node)
            raise failure
        return results

    def _peers(self, compiled) -> dict:
        """{collective group: {shard: (the actor of the node running it, its machine, which
        actor that is)}}; a shard run by two nodes is an error here, before anything runs
        (one run by none, when the first collective of its group runs)."""
        peers: dict = {}
        for node, nb in compiled.blobs.items():
            for group, shards in nb.shards.items():
                for shard in shards:
                    other = peers.setdefault(group, {}).get(shard)
                    if other is not None:
                        raise ExecutionError(f"shard {shard} of collective group {group!r} runs on node {other[0]!r} "
                                             f"and on node {node!r}", None,
                                             "give each node its own shard_id (rendezvous) or shard")
                    peers[group][shard] = (node, self.actor(node))
        return {g: {k: (a, self._node_id(node), self._started[node]) for k, (node, a) in ranks.items()}
                for g, ranks in peers.items()}

    def _node_id(self, node: str) -> str:
        """The Ray node (machine) running ``node``'s actor, asked once per actor."""
        got = self._node_ids.get(node)
        if got is None:
            got = self._node_ids[node] = self.node_info(node)["node_id"]
        return got

    def _forget(self, node: str) -> None:
        self._actors.pop(node, None)
        self._sent.pop(node, None)
        self._stale.pop(node, None)
        self._types.pop(node, None)

    def _remote_queues(self, compiled) -> dict:
        """node -> {queue blob -> the actor holding it} for queues a node uses but others hold;
        a plain blob read across nodes is an error here, before anything runs."""
        out: dict = {}
        for node, nb in compiled.blobs.items():
            for name, t in nb.loads.items():
                if name in nb.stores or name in self._types.get(node, {}):
                    continue
                homes = [n for n, other in compiled.blobs.items() if n != node and name in other.stores]
                homes += [n for n, types in self._types.items() if n != node and name in types]
                if not homes:
                    continue  # read before written: the node reports it, located, when it runs
                if getattr(t, "kind", None) == "queue" or _held_queue(self._types, homes[0], name):
                    out.setdefault(node, {})[name] = self.actor(homes[0])
                    continue
                raise ExecutionError(
                    f"blob {name!r} is read on node {node!r} but written on node {homes[0]!r}; on a "
                    f"cluster every node has its own workspace", None,
                    "compute it on the node that reads it, pass it through a queue, or run the reading "
                    "task on the writing node")
        return out

    def _set_outputs(self, compiled, results) -> None:
        import ray

        def fetch(name):
            name = str(name)
            for node, r in results.items():  # the task's own node first (see below)
                v = r["outputs"].get(name)
                if v is not None:
                    return v
            for node, types in self._types.items():  # e.g. a step-less fetcher on another node
                if name in types:
                    return ray.get(self._actors[node].fetch.remote(name))
            raise DSLError(f"output {name!r} was never written", user_location(), "check that its task writes it")

        for task in compiled.tasks:
            own = results.get(task.node, {}).get("outputs", {})
            refs = [BlobReference(n) for n in task.output_names()]
            task.output_list().set_values(refs, lambda n, own=own: own[str(n)] if own.get(str(n)) is not None
                                          else fetch(n))

    # --- closing
    def _do_close(self) -> None:
        import ray

        for a in self._actors.values():
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        self._actors.clear()
        if self.own_cluster is not None:
            self.own_cluster.stop()
            self.own_cluster.remove_temp_dir()
            self.own_cluster = None

    def __exit__(self, etype, *args):
        self.close()  # the cluster's processes never outlive the session, even on failure
        return False

    def _pickle_job_by_value(self) -> None:
        """A job file's functions (Python ops) travel by value: no node can import the job file."""
        mod = sys.modules.get(jobfile.MODULE)
        if mod is not None:
            from ray import cloudpickle
            cloudpickle.register_pickle_by_value(mod)


def _held_queue(types: dict, node: str, name: str) -> bool:
    t = types.get(node, {}).get(name)
    return getattr(t, "kind", None) == "queue"


def _node_error(node: str, e: Exception):
    """The error to report for ``node``'s failure ``e`` (None: it was only cancelled)."""
    import ray.exceptions as rex

    from dslc.runtime.cancel import Cancelled
    if isinstance(e, (rex.ActorDiedError, rex.ActorUnavailableError)) or type(e).__name__ == "RayActorError":
        return NodeLostError(node)
    cause = getattr(e, "cause", None) or e
    if isinstance(cause, Cancelled):
        return None
    if isinstance(cause, DSLError):
        err = ExecutionError(f"on node {node!r}: {cause.message}", cause.loc, cause.hint)
        err.task, err.node = getattr(cause, "task", None), node
        return err
    return ExecutionError(f"on node {node!r}: {type(cause).__name__}: {cause}", None, task=None)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable("Ray is not installed", user_location(),
                                 "pip install 'dslc[ray]' (or pip install -e '.[ray]' in a checkout)") from None
    return ray


__all__ = ["ClusterUnavailable", "RaySession"]
