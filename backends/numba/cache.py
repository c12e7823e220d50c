"""Where generated kernels live: content-addressed source files numba can cache.

numba's on-disk cache needs a real source file whose modification time and size
never change, so each generated module is written once, to a file named by the
hash of its text (and of the numba version), and imported from there. The second
run of a job finds the same files and numba loads the compiled code instead of
compiling again. The directory is ``$DSLC_CACHE_DIR``, else ``$XDG_CACHE_HOME/dslc``,
else ``~/.cache/dslc``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_modules: dict[str, object] = {}


def cache_dir() -> Path:
    root = os.environ.get("DSLC_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "dslc")
    path = Path(root) / "numba"
    path.mkdir(parents=True, exist_ok=True)
    return path


def module_for(source: str):
    """Import the module whose text is ``source`` (writing its file the first time)."""
    import numba

    key = hashlib.sha256((numba.__version__ + "\n" + source).encode()).hexdigest()[:24]
    with _lock:
        got = _modules.get(key)
        if got is not None:
            return got
        path = cache_dir() / f"k_{key}.py"
        if not path.exists():
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(source)
            os.replace(tmp, path)  # atomic: another process may be writing the same file
        name = f"dslc_numba_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[key] = mod
        return mod
