"""The local Ray clusters dslc starts (issue 23): every socket listens on 127.0.0.1, a
driver without the cluster's token is refused, and a driver killed outright leaves no
process and no temp dir behind."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from test_distributed_cli import WAITING_JOB, _tree

INTRUDER = textwrap.dedent("""
    import sys
    import ray
    ray.init(address=sys.argv[1], logging_level="ERROR")

    @ray.remote
    def write(path):
        with open(path, "w") as f:
            f.write("ran")

    ray.get(write.remote(sys.argv[2]), timeout=60)
    print("RAN")
""")


def _intrude(tmp_path, address, **env_changes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(env_changes)
    marker = tmp_path / f"ran-{len(env_changes)}-{env_changes.get('RAY_AUTH_MODE', '')}"
    script = tmp_path / "intruder.py"
    script.write_text(INTRUDER)
    done = subprocess.run([sys.executable, str(script), address, str(marker)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return done, marker


@pytest.mark.parametrize("auth", [{}, {"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_MODE": "token",
                                                                      "RAY_AUTH_TOKEN": "0" * 64}])
def test_a_driver_without_the_clusters_token_is_refused(ray_cluster, tmp_path, auth):  # noqa: F811
    import ray
    address = ray._private.worker._global_node.gcs_address
    done, marker = _intrude(tmp_path, address, **auth)
    assert done.returncode != 0 and "RAN" not in done.stdout, done.stdout + done.stderr
    assert not marker.exists()


def test_the_token_lets_a_driver_in(ray_cluster, tmp_path):  # noqa: F811
    # the control: the same script with the cluster's token runs its task
    import ray
    address = ray._private.worker._global_node.gcs_address
    done, marker = _intrude(tmp_path, address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=ray_cluster.token,
                            HOME=os.environ.get("HOME", ""))
    assert done.returncode == 0 and "RAN" in done.stdout, done.stderr
    assert marker.read_text() == "ran", done.stdout + done.stderr[-2000:]


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow_cluster
def test_a_killed_driver_leaves_no_process_and_no_temp_dir(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(WAITING_JOB)
    marker = tmp_path / "running"
    env = dict(os.environ, DSLC_TEST_MARKER=str(marker), HOME=str(tmp_path))
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    before = set(glob.glob("/tmp/dslc-ray-*"))
    proc = subprocess.Popen([dslc, "run", str(job), "--cluster", "ray"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=60)
        time.sleep(0.2)
        started = _tree(proc.pid)
        temp_dirs = set(glob.glob("/tmp/dslc-ray-*")) - before
        assert len(temp_dirs) == 1 and int(marker.read_text()) in started
        proc.send_signal(signal.SIGKILL)  # no cleanup of its own runs
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (any(_alive(p) for p in started) or
                                               any(os.path.exists(d) for d in temp_dirs)):
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [p for p in started if _alive(p)] == []
    assert not any(os.path.exists(d) for d in temp_dirs)


def _listening(pids) -> list[tuple[int, str, int]]:
    """(pid, local address, port) of every TCP socket ``pids`` listen on, from /proc."""
    import ipaddress

    table = {}
    for name, v6 in (("tcp", False), ("tcp6", True)):
        with open(f"/proc/net/{name}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != "0A":  # LISTEN
                    continue
                addr, port = cols[1].split(":")
                raw = bytes.fromhex(addr)
                # /proc prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = ipaddress.ip_address(raw)
                ip = getattr(ip, "ipv4_mapped", None) or ip  # (::ffff:127.0.0.1 is 127.0.0.1)
                table[cols[9]] = (str(ip), int(port, 16))
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in table:
                out.append((pid,) + table[target[8:-1]])
    return out


def test_every_socket_of_the_cluster_listens_on_loopback_only(ray_cluster):  # noqa: F811
    from dslc.backends.ray.cluster import descendants
    pids = descendants(ray_cluster._pids) | {os.getpid()}  # the daemons, workers and this driver
    sockets = _listening(pids)
    print("\n".join(f"pid {p}: {a}:{port}" for p, a, port in sorted(sockets)))  # (the CI log lists them)
    assert len({p for p, _, _ in sockets}) >= 3, sockets  # GCS, raylet, a worker at least
    assert all(a in ("127.0.0.1", "::1") for _, a, _ in sockets), sockets
