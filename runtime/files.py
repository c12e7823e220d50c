"""Files written whole: a reader sees the old file or the new one, never a part."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_whole(path: Path, data: bytes, sync: bool = True) -> None:
    """Write ``data`` to a private temporary file beside ``path`` and rename it over
    ``path``; with ``sync``, so that it survives a power cut (a compiled file need not:
    its checksum tells a cut one, which compiles again)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: another process may be writing the same file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(str(path.parent))


def fsync_dir(d: str) -> None:
    """Make a rename in directory ``d`` durable (the entry lives in the directory); a
    directory that cannot be opened or synced is left as it is."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
