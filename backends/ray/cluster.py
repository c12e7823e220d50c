"""Starting, reaching and stopping Ray clusters for dslc runs and tests.

``LocalCluster`` starts a cluster on this machine for one run, listening on loopback
only, and stops it by the PIDs it started (never ``ray stop``, never a match on
process names: other Ray clusters on the machine are not ours). ``raylets=2``
starts a second raylet, each offering its own custom resources, which stands in
for a second machine. ``connect`` joins an existing cluster (``ray://HOST:PORT``
or ``auto``).

Ray quirks this handles (measured with Ray 2.x): token auth is on by default
(``RAY_AUTH_MODE=disabled`` for a private local cluster), usage stats are sent
unless ``RAY_USAGE_STATS_ENABLED=0``, and ``ray.init(address="local")`` is needed to
start a fresh cluster even when a stale ``/tmp/ray/ray_current_cluster`` file names
one that is gone.
"""
from __future__ import annotations

import os
import signal
import time

LOOPBACK = "127.0.0.1"
QUIET_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
             "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_DEDUP_LOGS": "0"}


class ClusterError(Exception):
    """The cluster cannot be started or reached (the driver reports it in one line)."""


def quiet_env(home: str | None = None) -> dict:
    """Set the environment a private local cluster needs; returns the previous values."""
    changes = dict(QUIET_ENV, **({"HOME": home} if home else {}))
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    return saved


def restore_env(saved: dict) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def descendants(pids) -> set[int]:
    """``pids`` and every process below them (read from /proc)."""
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(_children(p))
    return seen


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids, grace_s: float = 2.0) -> None:
    """SIGTERM ``pids``, wait up to ``grace_s``, SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in pids if _alive(p)]
        for p in live:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            live = [p for p in live if _alive(p)]
            time.sleep(0.02)
        if not live:
            return


def short_temp_dir() -> str:
    """A new temp dir for a cluster, short enough for Ray's socket paths (107 bytes at most)."""
    import tempfile

    base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="dslc-ray-", dir=base if len(base) <= 32 else "/tmp")


class LocalCluster:
    """A Ray cluster on this machine, for one run or one test session."""

    def __init__(self, temp_dir: str, num_cpus: int = 2, resources: dict | None = None,
                 second_raylet: dict | None = None, home: str | None = None,
                 object_store_bytes: int = 512 << 20):
        """``resources``: custom resources of the head raylet; ``second_raylet``: those of a
        second raylet (None: just one)."""
        self.temp_dir = temp_dir
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.second_raylet = second_raylet
        self.home = home
        self.object_store_bytes = object_store_bytes
        self._second = None
        self._saved_env = None
        self._pids: set[int] = set()
        self.start_seconds = 0.0

    def start(self) -> "LocalCluster":
        import ray

        t0 = time.perf_counter()
        os.makedirs(self.temp_dir, exist_ok=True)
        self._saved_env = quiet_env(self.home)
        try:
            ray.init(address="local", num_cpus=self.num_cpus, resources=self.resources,
                     object_store_memory=self.object_store_bytes, include_dashboard=False,
                     _node_ip_address=LOOPBACK, _temp_dir=self.temp_dir, logging_level="ERROR")
            if self.second_raylet is not None:
                self._second = self._start_raylet(self.second_raylet)
        except BaseException:
            self.stop()
            raise
        self._pids = self._started_pids()
        self.start_seconds = time.perf_counter() - t0
        return self

    def _start_raylet(self, resources: dict):
        """A second raylet joining the head's GCS, with no CPUs of its own and ``resources``."""
        import ray
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        head = ray._private.worker._global_node
        params = RayParams(gcs_address=head.gcs_address, node_ip_address=LOOPBACK, num_cpus=0, num_gpus=0,
                           resources=dict(resources), temp_dir=self.temp_dir, include_log_monitor=False,
                           node_manager_port=0, min_worker_port=0, max_worker_port=0,
                           object_store_memory=self.object_store_bytes)
        params.dashboard_agent_listen_port = None
        node = Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
        deadline = time.monotonic() + 120
        while not any(n["Alive"] and set(resources) <= set(n["Resources"]) for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise ClusterError("the second raylet did not join the cluster in 120 s")
            time.sleep(0.1)
        return node

    def _started_pids(self) -> set[int]:
        """The daemons this cluster started (its workers are found below them at stop)."""
        import ray

        nodes = [ray._private.worker._global_node, self._second]
        pids = set()
        for node in nodes:
            for infos in getattr(node, "all_processes", {}).values():
                pids.update(i.process.pid for i in infos)
        pids.discard(os.getpid())
        return pids

    def stop(self) -> None:
        """Disconnect and stop every process this cluster started, by PID."""
        import ray

        tree = descendants(self._pids) if self._pids else set()
        try:
            if self._second is not None:
                self._second.kill_all_processes(check_alive=False, allow_graceful=True)
            ray.shutdown()
        finally:
            self._second = None
            kill_pids(tree)
            self._pids = set()
            if self._saved_env is not None:
                restore_env(self._saved_env)
                self._saved_env = None

    def remove_temp_dir(self) -> None:
        import shutil
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def connect(address: str) -> None:
    """Join the existing cluster at ``address`` (``ray://HOST:PORT``, ``HOST:PORT`` or ``auto``)."""
    import ray

    if address != "auto":
        _check_reachable(address)
    saved = quiet_env()
    try:
        ray.init(address=address, logging_level="ERROR")
    except Exception as e:
        raise ClusterError(f"cannot reach the Ray cluster at {address!r}: "
                           f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    finally:
        restore_env(saved)


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail at once for an address nothing listens on (Ray itself retries for a minute)."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"bad cluster address {address!r}: expected ray://HOST:PORT, HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(f"cannot reach the Ray cluster at {address!r}: {e.strerror or e}") from None
