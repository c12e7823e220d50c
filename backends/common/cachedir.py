"""The directory compiled code is cached in, and whether it is the user's alone.

``cache_root()`` is ``$DSLC_CACHE_DIR``, else ``$XDG_CACHE_HOME/dslc``, else
``~/.cache/dslc``; each backend keeps its files in a folder of its own there (numba's
kernels, XLA's executables). Cached code runs, so a backend uses the folder only if
``not_private`` finds nothing wrong with it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from dslc.ir import settings


def cache_root() -> str:
    root = settings.directory("DSLC_CACHE_DIR")  # (a path that cannot be one: the user's error)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "dslc")
    return root


def not_private(path) -> str:
    """Why the directory ``path`` is not this user's alone, or "": it must be owned by the
    user and writable by no one else, and no directory above it (as named, and after
    symlinks) may let another user replace it."""
    me = os.geteuid()
    st = os.stat(path)
    if st.st_uid != me:
        return f"is owned by user {st.st_uid}, not by you ({me})"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    named, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    for above in dict.fromkeys([*named.parents, *real.parents]):
        st = os.stat(above)
        if st.st_uid not in (me, 0):
            return f"is inside {above}, which user {st.st_uid} owns"
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            return f"is inside {above}, which anyone may write to (mode {stat.S_IMODE(st.st_mode):o})"
    return ""
