"""A watchdog for a local Ray cluster: it stops the cluster when its driver dies.

``LocalCluster`` stops the processes it started by PID, but a driver that is killed
(SIGKILL, the OOM killer) runs no cleanup, and Ray's own reaper leaves agents up for
tens of seconds, one of them listening on the network. So the driver starts this
process, in a session of its own, with a pipe: the watchdog learns the cluster's
processes (and every worker below them, read again each second) and waits on the pipe.
End of file without the word "stopped" means the driver is gone: the watchdog kills
the cluster's processes (those it saw, and any whose command line names the cluster's
temp dir) and removes the temp dir, then exits. While it waits it also keeps the temp
dir private (``cluster.privatize``, each second: Ray's agents make directories 0777).

Run as ``python -m dslc.backends.ray.watchdog TEMP_DIR PID...`` with the pipe on stdin.
"""
from __future__ import annotations

import os
import select
import shutil
import sys

from .cluster import descendants, kill_pids, privatize, shm_dir

POLL_S = 1.0


def watch(temp_dir: str, pids: set[int], fd: int = 0) -> bool:
    """Wait for the driver's word on ``fd``; kill ``pids`` (and their children) and remove
    ``temp_dir`` unless it said the cluster is stopped. Returns whether it cleaned up."""
    known = descendants(pids)
    said = b""
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready:
            chunk = os.read(fd, 64)
            if not chunk:
                break
            said += chunk
            continue
        known |= descendants(known)  # workers start and stop while the cluster runs
        privatize(temp_dir)
    if said.strip() == b"stopped":
        return False
    kill_pids(descendants(known) | naming(temp_dir))
    shutil.rmtree(temp_dir, ignore_errors=True)
    shutil.rmtree(shm_dir(temp_dir), ignore_errors=True)  # (collective segments the nodes left)
    return True


def naming(temp_dir: str) -> set[int]:
    """The processes whose command line names ``temp_dir``: every Ray process of the
    cluster does (its sockets and logs are there), including those whose parent died
    before the watchdog saw them. The directory's name is random and the cluster's own,
    so this matches no other cluster's processes."""
    mine, found = os.getpid(), set()
    key = os.path.abspath(temp_dir).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if key in f.read():
                    found.add(int(entry))
        except OSError:
            pass
    return found


def main(argv: list[str]) -> int:
    temp_dir, pids = argv[0], {int(p) for p in argv[1:]}
    watch(temp_dir, pids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
