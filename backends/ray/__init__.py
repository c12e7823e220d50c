"""The distributed backend: each Node of a job in its own process of a Ray cluster.

Not a backend that runs a module itself, so not among ``dslc.backends.names()``: it is the
registry's cluster backend ``"ray"`` (``dslc.backends.cluster("ray")`` is ``RayCluster``
below), what the driver's ``dslc.distributed.RaySession`` needs of a cluster system.
``worker.NodeWorker`` is the Ray actor that holds one node's root workspace and runs that
node's part of a module on a registry backend (interp or numba), ``split`` says which part
of a module is whose, ``queues`` carries queues between nodes, and ``cluster`` starts,
joins and stops clusters. Importing this package needs no Ray; using it does
(``pip install 'dslc[ray]'``).
"""
from __future__ import annotations

from .cluster import ClusterError, LocalCluster, connect, short_temp_dir
from .split import node_blobs


class RayCluster:
    """What a multi-node session uses of Ray, found through the registry (the driver imports
    no backend by name)."""

    name = "ray"
    ClusterError = ClusterError          # joining a cluster failed (``connect``)
    connect = staticmethod(connect)      # join a running cluster: "auto", "HOST:PORT", "ray://HOST:PORT"
    node_blobs = staticmethod(node_blobs)  # module -> {node: the blobs it reads, writes, holds}

    @staticmethod
    def local_cluster(temp_dir: str | None = None, num_cpus: int = 2) -> LocalCluster:
        """A private local cluster, not yet started (``start()``, ``stop()``,
        ``remove_temp_dir()``, ``temp_dir``), under ``temp_dir`` or a fresh short one."""
        return LocalCluster(temp_dir or short_temp_dir(), num_cpus=num_cpus)

    @staticmethod
    def node_worker():
        """The Ray actor class of one node (imported when a session starts a node: it brings
        in the interpreter)."""
        from .worker import NodeWorker
        return NodeWorker
