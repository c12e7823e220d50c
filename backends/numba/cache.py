"""Where generated kernels live: content-addressed source files numba can cache.

numba's on-disk cache needs a real source file whose modification time and size
never change, so each generated module is written once, to a file named by the
hash of its text (and of the numba version), and imported from there. The second
run of a job finds the same files and numba loads the compiled code instead of
compiling again. The directory is ``$DSLC_CACHE_DIR``, else ``$XDG_CACHE_HOME/dslc``,
else ``~/.cache/dslc`` (made private to the user).

A file is trusted only if it holds exactly the text its name was made from: an edited,
empty or truncated one (a crash mid-write on another machine, a hand edit) is written
again, with a warning, before anything imports it. Files are written whole: to a
temporary file, synced, then renamed over the name.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path

from dslc.ir import settings

_lock = threading.Lock()
_modules: dict[str, object] = {}


def cache_dir() -> Path:
    root = settings.directory("DSLC_CACHE_DIR")  # (a path that cannot be one: the user's error)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "dslc")
    path = Path(root) / "numba"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


class KernelCacheWarning(UserWarning):
    """A cached kernel file did not hold the text its name promises; it was written again."""


def _write(path: Path, source: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: another process may be writing the same file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # the rename itself survives a power cut once the directory is synced
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _holds(path: Path, source: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == source
    except (OSError, UnicodeDecodeError):
        return False


def module_for(source: str):
    """Import the module whose text is ``source`` (writing its file the first time)."""
    import numba

    key = hashlib.sha256((numba.__version__ + "\n" + source).encode()).hexdigest()[:24]
    with _lock:
        got = _modules.get(key)
        if got is not None:
            return got
        path = cache_dir() / f"k_{key}.py"
        # compiled first: a text Python refuses (SyntaxError, for emitter._module) is never written
        code = compile(source, str(path), "exec")
        if not path.exists():
            _write(path, source)
        elif not _holds(path, source):
            warnings.warn(f"the cached kernel {path} does not hold the text it was written from "
                          "(edited or cut short); writing it again", KernelCacheWarning, stacklevel=2)
            _write(path, source)  # (a new mtime: numba compiles it afresh)
        # run the text we hold, under the file's name (numba's cache keys on the file): what
        # runs is ours even if the file changes after the check
        name = f"dslc_numba_{key}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        sys.modules[name] = mod
        exec(code, mod.__dict__)
        _modules[key] = mod
        return mod
