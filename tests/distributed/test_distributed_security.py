"""The local Ray clusters dslc starts (issue 23): every socket listens on 127.0.0.1, a
driver without the cluster's token is refused, and a driver killed outright leaves no
process and no temp dir behind; the temp dir is the user's alone, all the way down, also
as another user of the machine tries it (issue 38)."""
from __future__ import annotations

import glob
import os
import pwd
import signal
import stat
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


def test_rays_own_dir_is_one_level_below_the_top_wherever_the_top_is(tmp_path):
    """Ray's directory is derived from the cluster's top dir, never kept beside it: a top
    dir set after construction takes Ray's with it (else Ray would run outside the 0700
    directory that keeps it private)."""
    from dslc.backends.ray.cluster import LocalCluster
    cluster = LocalCluster(str(tmp_path / "a"))
    assert cluster.ray_dir == str(tmp_path / "a" / "r")
    cluster.temp_dir = str(tmp_path / "b")
    assert cluster.ray_dir == str(tmp_path / "b" / "r")


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
        # (the cluster's processes notice their driver is gone on their own; on a loaded
        # machine, e.g. CI with a second pytest worker busy, that has taken over 30 s)
        deadline = time.monotonic() + 90
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


def _modes(top: str) -> list[tuple[str, int, int]]:
    """(path below ``top``, mode, owner) of ``top`` and everything below it but symlinks."""
    out = []
    for root, dirs, files in os.walk(top):
        for entry in [root] + [os.path.join(root, n) for n in dirs + files]:
            try:
                st = os.lstat(entry)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                out.append((os.path.relpath(entry, top), st.st_mode, st.st_uid))
    return sorted(set(out))


OTHER_USER = """
for p in "$@"; do
    ls "$p" >/dev/null 2>&1 && echo "listed $p"
    [ -f "$p" ] && cat "$p" >/dev/null 2>&1 && echo "read $p"
    touch "$p/planted" 2>/dev/null && echo "created a file in $p"
done
echo done
"""


def test_the_clusters_temp_dir_is_private_all_the_way_down(ray_cluster, shared_ray_session):  # noqa: F811
    """Ray makes its directories 0777 and its logs 0644: another local user could read the
    logs and create files beside the raylet's and the object store's sockets. dslc's
    temp dir is 0700 from the start, and everything below it is private within a second
    (the watchdog's pass). The job's own files keep the user's umask."""
    import ray
    top = ray_cluster.temp_dir
    assert stat.S_IMODE(os.stat(top).st_mode) == 0o700  # (at once: nothing below is reachable)
    pid = shared_ray_session.node_info("umask_probe")["pid"]  # (a node actor: a worker of the cluster)
    umask = next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("Umask"))
    mine = os.umask(0o022)
    os.umask(mine)
    assert int(umask, 8) == mine  # (the job's files: the user's umask, not the cluster's 077)
    deadline = time.monotonic() + 10
    while any(mode & 0o077 for _, mode, _ in _modes(top)) and time.monotonic() < deadline:
        time.sleep(0.2)
    entries = _modes(top)
    print(f"\n{top} (another user may do nothing below a 0700 directory):")  # (the CI log lists them)
    print("\n".join(f"{stat.filemode(mode)} {pwd.getpwuid(uid).pw_name:>8} {path}" for path, mode, uid in entries))
    assert len(entries) > 20 and [e for e in entries if e[1] & 0o077 or e[2] != os.geteuid()] == []
    session = ray._private.worker._global_node.get_session_dir_path()
    sockets = os.path.join(session, "sockets")
    assert {"raylet", "plasma_store"} <= set(os.listdir(sockets))
    if os.geteuid() != 0:
        return  # (the modes above are the test; trying as another user needs root to become one)
    nobody = pwd.getpwnam("nobody") if "nobody" in {p.pw_name for p in pwd.getpwall()} else None
    uid = nobody.pw_uid if nobody else 65534
    logs = os.path.join(session, "logs")
    tried = [top, session, sockets, logs, os.path.join(logs, "raylet.out"), os.path.join(logs, "gcs_server.out")]
    done = subprocess.run(["/bin/sh", "-c", OTHER_USER, "sh", *tried], user=uid, group=uid, extra_groups=[],
                          cwd="/", capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "done", done.stdout  # (nothing listed, read or created)
    assert not any(os.path.exists(os.path.join(p, "planted")) for p in tried)
