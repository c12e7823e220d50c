"""Starting, reaching and stopping Ray clusters for dslc runs and tests.

``LocalCluster`` starts a cluster on this machine for one run, listening on loopback
only, and stops it by the PIDs it started (never ``ray stop``, never a match on
process names: other Ray clusters on the machine are not ours). ``raylets=2``
starts a second raylet, each offering its own custom resources, which stands in
for a second machine. ``connect`` joins an existing cluster (``ray://HOST:PORT``
or ``auto``).

A cluster dslc starts has Ray's token authentication on, with a token made for it
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``, inherited by the processes it starts and
by nothing else): a process without the token cannot join it or run anything on it.
A watchdog process (``watchdog``) stops it and removes its temp dir if the driver dies
without stopping it.

Its temp dir (logs, sockets, session files) is the user's alone, all the way down. Ray
makes each directory it creates 0777 ("so others can use it") and its files with the
umask of the process writing them; dslc creates the temp dir 0700, makes the directories
the driver's Ray creates there 0700 instead (``_private_dirs``), starts the cluster's
processes under umask 077 (they inherit it: daemons, agents, workers; a node actor sets
the user's own umask back for the job's files, ``JOB_UMASK``), and takes group's and
others' permissions off whatever else appears (``privatize``, after the start and every
second from the watchdog). Nothing below the 0700 temp dir is reachable by another user
at any moment; the modes below it are private within a second. Joining an existing cluster uses the user's own Ray settings
(their token, in ``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``).

Ray quirks this handles (measured with Ray 2.x): usage stats are sent unless
``RAY_USAGE_STATS_ENABLED=0``, and ``ray.init(address="local")`` is needed to start a
fresh cluster even when a stale ``/tmp/ray/ray_current_cluster`` file names one that
is gone; and it turns a node IP of 127.0.0.1 into the machine's address, after
which its servers listen on every interface (``_loopback_kept`` stops that).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import time

LOOPBACK = "127.0.0.1"
JOB_UMASK = "DSLC_JOB_UMASK"  # the driver's umask (octal), for the files the job's nodes write
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_DEDUP_LOGS": "0"}


class ClusterError(Exception):
    """The cluster cannot be started or reached (the driver reports it in one line)."""


def quiet_env(home: str | None = None, token: str | None = None) -> dict:
    """Set the environment a private local cluster needs (with ``token``: its auth token);
    returns the previous values."""
    changes = dict(QUIET_ENV, **({"HOME": home} if home else {}))
    if token is not None:
        changes.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_AUTH_TOKEN_PATH=None)
    saved = {k: os.environ.get(k) for k in changes}
    _set_env(changes)
    return saved


def shm_dir(temp_dir: str) -> str:
    """The cluster's directory of collective segments in /dev/shm (see backends/ray/shm.py)."""
    return os.path.join("/dev/shm", "dslc-" + os.path.basename(os.path.normpath(temp_dir)))


def _set_shm_dir(path: str) -> dict:
    saved = {"DSLC_SHM_DIR": os.environ.get("DSLC_SHM_DIR")}
    _set_env({"DSLC_SHM_DIR": path})
    return saved


def restore_env(saved: dict) -> None:
    _set_env(saved)


def _set_env(values: dict) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if any(k.startswith("RAY_AUTH") for k in values):
        _reload_auth()


def _reload_auth() -> None:
    """Make a Ray already imported in this process see the auth settings just set (Ray
    reads them into its config once, at import)."""
    import sys

    raylet = sys.modules.get("ray._raylet")
    if raylet is None:
        return
    try:
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()
    except AttributeError:  # a Ray without token authentication
        pass


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


def short_temp_dir(prefix: str = "dslc-ray-") -> str:
    """A new temp dir for a cluster (0700), short enough for Ray's socket paths (107 bytes at most)."""
    import tempfile

    base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix=prefix, dir=base if len(base) <= 32 else "/tmp")


def privatize(path: str) -> int:
    """Take group's and others' permissions off ``path`` and everything below it that this
    user owns (never through a symlink); returns how many entries changed."""
    import stat

    me, changed = os.geteuid(), 0
    for root, dirs, files in os.walk(path):
        for entry in [root] + [os.path.join(root, n) for n in dirs + files]:
            try:
                st = os.lstat(entry)
                if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077 or st.st_uid != me:
                    continue
                os.chmod(entry, stat.S_IMODE(st.st_mode) & 0o700)  # (not a link: lstat said so)
                changed += 1
            except OSError:  # (gone meanwhile: a worker's log rotated, a socket closed)
                pass
    return changed


@contextlib.contextmanager
def _private_dirs(temp_dir: str):
    """Ray's ``try_make_directory_shared`` (chmod 0777) makes directories under
    ``temp_dir`` 0700 instead, in this process, while the context lasts."""
    try:
        from ray._common import utils
        shared = utils.try_make_directory_shared
    except (ImportError, AttributeError):  # another Ray: privatize() does the work
        yield
        return
    inside = os.path.abspath(temp_dir) + os.sep

    def private(path):
        if not (os.path.abspath(path) + os.sep).startswith(inside):
            return shared(path)
        try:
            os.chmod(path, 0o700)
        except PermissionError:  # (as Ray: a directory someone else made stays as it is)
            pass

    utils.try_make_directory_shared = private
    try:
        yield
    finally:
        utils.try_make_directory_shared = shared


@contextlib.contextmanager
def _loopback_kept():
    """Keep the node IP 127.0.0.1 that ``ray.init`` is given.

    Ray 2.60 replaces a loopback node IP by the machine's address
    (``services.resolve_ip_for_localhost``), and its servers then listen on every
    interface. Given 127.0.0.1 as it is, every component (GCS, raylet, object manager,
    agents, workers) binds to 127.0.0.1 only, as the second raylet (given its address
    directly) always did."""
    from ray._private import services

    original = getattr(services, "resolve_ip_for_localhost", None)
    if original is None:  # another Ray: nothing to keep
        yield
        return
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


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
        self._watchdog = None  # (process, the write end of its pipe)
        self._private = None   # the context that keeps Ray's directories private (_private_dirs)
        self.token = secrets.token_hex(32)  # this cluster's auth token
        self.start_seconds = 0.0

    @property
    def ray_dir(self) -> str:
        """The directory Ray is given: one level below ``temp_dir``, always. Ray's processes
        chmod the directory they are given to 0777 (try_make_directory_shared, in agents this
        process cannot patch), so the top one, which nobody but us touches, is what keeps
        everything below private."""
        return os.path.join(self.temp_dir, "r")

    def start(self) -> "LocalCluster":
        import ray

        t0 = time.perf_counter()
        os.makedirs(self.temp_dir, mode=0o700, exist_ok=True)
        os.chmod(self.temp_dir, 0o700)  # (however it was made: nothing below is reachable by others)
        os.makedirs(self.ray_dir, mode=0o700, exist_ok=True)
        user_umask = os.umask(0o077)  # the cluster's processes inherit it (this one's is set back below)
        self._saved_env = quiet_env(self.home, self.token)
        self._saved_env.update(_set_shm_dir(shm_dir(self.temp_dir)))
        self._saved_env[JOB_UMASK] = os.environ.get(JOB_UMASK)
        _set_env({JOB_UMASK: f"{user_umask:o}"})
        self._private = _private_dirs(self.temp_dir)
        self._private.__enter__()
        try:
            with _loopback_kept():
                ray.init(address="local", num_cpus=self.num_cpus, resources=self.resources,
                         object_store_memory=self.object_store_bytes, include_dashboard=False,
                         _node_ip_address=LOOPBACK, _temp_dir=self.ray_dir, logging_level="ERROR")
            if self.second_raylet is not None:
                self._second = self._start_raylet(self.second_raylet)
        except BaseException:
            self.stop()
            raise
        finally:
            os.umask(user_umask)
        self._pids = self._started_pids()
        privatize(self.temp_dir)  # (what the agents made 0777 meanwhile; the watchdog goes on)
        self._start_watchdog()
        self.start_seconds = time.perf_counter() - t0
        return self

    def _start_watchdog(self) -> None:
        """The process that stops this cluster if the driver dies first (see watchdog)."""
        import subprocess
        import sys

        read, write = os.pipe()
        proc = subprocess.Popen([sys.executable, "-m", "dslc.backends.ray.watchdog", self.temp_dir,
                                 *map(str, sorted(self._pids))], stdin=read, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        os.close(read)
        os.set_inheritable(write, False)  # (Ray's processes must not hold it open)
        self._watchdog = (proc, write)

    def _stop_watchdog(self) -> None:
        if self._watchdog is None:
            return
        proc, write = self._watchdog
        self._watchdog = None
        try:
            os.write(write, b"stopped")
        except OSError:
            pass
        os.close(write)
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()

    def _start_raylet(self, resources: dict):
        """A second raylet joining the head's GCS, with no CPUs of its own and ``resources``."""
        import ray
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        head = ray._private.worker._global_node
        params = RayParams(gcs_address=head.gcs_address, node_ip_address=LOOPBACK, num_cpus=0, num_gpus=0,
                           resources=dict(resources), temp_dir=self.ray_dir, include_log_monitor=False,
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
            self._stop_watchdog()
            shutil.rmtree(shm_dir(self.temp_dir), ignore_errors=True)
            if self._private is not None:
                self._private.__exit__(None, None, None)
                self._private = None
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
    saved = quiet_env()  # (auth as the user set it up: their token joins their cluster)
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
