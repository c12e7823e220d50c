"""The temporary files a one-file checkpoint is written to, and the removal of those a
killed save left behind.

A save writes ``<path>.tmp-<pid>-<8 hex digits>`` and renames it over ``<path>`` when it
is complete, so a file of that name is always an unfinished save, never a checkpoint.
A writer killed mid-save (SIGKILL, power loss) leaves it forever, up to a checkpoint's
size each time; these functions remove such files:

* ``remove_stale(path)``, before a new save of ``path``: the partial files of that
  checkpoint whose writing process is gone (a live one may be saving it right now);
* ``remove_stale_in(directory, match)``, when a ``JobRunner`` that owns the directory
  starts: the partial files of its checkpoints written by any other process.

Complete checkpoints are never touched: only names ending in the temporary suffix are.
"""
from __future__ import annotations

import os
import re
import secrets

_SUFFIX = re.compile(r"\.tmp-(\d+)-[0-9a-f]{8}\Z")


def temp_name(path: str) -> str:
    """The temporary file this process writes ``path`` to before renaming it into place."""
    return f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def split(name: str):
    """(checkpoint name, writer pid) of a partial file's name, or None for any other name."""
    m = _SUFFIX.search(name)
    return (name[:m.start()], int(m.group(1))) if m else None


def remove_stale(path: str) -> list[str]:
    """Remove the partial files of the checkpoint ``path`` whose writer is no longer
    running; returns the paths removed."""
    directory, base = os.path.split(os.path.abspath(path))
    return _remove(directory, lambda stem, pid: stem == base and not _alive(pid))


def remove_stale_in(directory: str, match) -> list[str]:
    """Remove the partial files in ``directory`` of the checkpoints whose file name
    ``match(name)`` accepts, unless this process writes them; returns the paths removed."""
    me = os.getpid()
    return _remove(directory, lambda stem, pid: pid != me and match(stem))


def _remove(directory: str, stale) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:  # no directory yet: nothing to clean (the save reports the real problem)
        return []
    removed = []
    for name in names:
        parts = split(name)
        if parts is None or not stale(*parts):
            continue
        full = os.path.join(directory, name)
        try:
            os.remove(full)
            removed.append(full)
        except OSError:  # gone already (another cleaner), or not ours to remove
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        return True
    return True
