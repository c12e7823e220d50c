"""Where generated kernels live: content-addressed source files and compiled code.

Each generated module is written once, to a file named by the hash of its text (and of
the numba version), and run from the text dslc holds; its functions' machine code is kept
by ``compiled.KernelCache`` (one file per function and signature, no pickle anywhere),
so the second run of a job loads the code instead of compiling again. dslc's own kernels
(``jit``) use the same cache. The directory is ``$DSLC_CACHE_DIR/numba``, else
``$XDG_CACHE_HOME/dslc/numba``, else ``~/.cache/dslc/numba`` (made private to the user).

Code in the cache runs, so the directory must be the user's alone: one that another user
owns, that others may write to, or that sits in a directory another user owns or anyone
may write to (without the sticky bit) is refused, with one warning, and kernels compile
in a private temporary directory for the process instead.

Texts equal up to the names of their values share one file, one module and one compile:
the hash is of the text with each generated name (``base_k``: the emitter names a value
after its blob) renamed by order of first use (``canonical``). Two shards of one
data-parallel job differ only there (``SgdOptimizer_0_lr`` / ``SgdOptimizer_1_lr``), so
the second runs the first's module (the names in its text are the first shard's).

A source file is trusted only if it holds the text its name was made from, up to those
names (``canonical``): an edited, empty or truncated one (a crash mid-write on another machine, a hand edit) is
written again, with a warning, before anything uses it. Files are written whole: to a
temporary file, synced, then renamed over the name.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path

from dslc.backends.common.cachedir import cache_root, not_private
from dslc.runtime.files import write_whole

_lock = threading.Lock()
_modules: dict[str, object] = {}
_dirs_lock = threading.Lock()
_dirs: dict[str, Path] = {}  # the configured directory -> the one used (itself, or a private one)


class KernelCacheWarning(UserWarning):
    """A cached kernel file did not hold the text its name promises (it was written again),
    or the cache directory was not private (a private one was used instead)."""


_given: list = []  # the directory a compile worker was told to use (use_directory)


def use_directory(path: Path) -> None:
    """Keep this process's kernels in ``path`` (checked as a configured one is): the compile
    worker uses the directory its parent does, even a private one."""
    _given[:] = [_checked(path)]


def cache_dir() -> Path:
    """The directory kernels are kept in (checked once per process and configured path)."""
    if _given:
        return _given[0]
    root = cache_root()
    got = _dirs.get(root)
    if got is None or not got.is_dir():
        with _dirs_lock:
            got = _dirs[root] = _checked(Path(root) / "numba")
    return got


def _checked(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        why = not_private(path)
    except OSError as e:
        why = f"cannot be used ({e.strerror or e})"
    if not why:
        return path
    # (one line, located at the directory: the user's job has no line to do with it)
    warnings.warn_explicit(f"the kernel cache directory {path} {why}: it is not used, kernels compile in "
                           "a private directory for this process (make it yours with chown and chmod 700, "
                           "or set DSLC_CACHE_DIR)", KernelCacheWarning, str(path), 0)
    return _private_dir()


@functools.cache
def _private_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="dslc-kernels-"))  # (0700, new, ours)
    atexit.register(_remove, path, os.getpid())
    return path


def _remove(path: Path, pid: int) -> None:
    if os.getpid() == pid:  # (not from a forked child that exits through atexit)
        shutil.rmtree(path, ignore_errors=True)


def attach(dispatcher, identity: str = ""):
    """Give a numba dispatcher dslc's kernel cache (``compiled``), not numba's pickles."""
    from .compiled import KernelCache
    dispatcher._cache = KernelCache(dispatcher, cache_dir, identity)
    return dispatcher


def jit(**options):
    """``numba.njit(**options)`` whose compiled code is kept in dslc's kernel cache."""
    def wrap(fn):
        import numba
        return attach(numba.njit(**options)(fn))
    return wrap


# an identifier ending in _<digits>, not an attribute: the emitter's names of values (and of
# nothing else it writes: helpers, constants _K<n>, numpy's and numba's names end otherwise)
_NAMED = re.compile(r"(?<![\w.])[A-Za-z_]\w*?_\d+\b")


def canonical(source: str) -> str:
    """``source`` with each such name replaced by its order of first use (a NUL and a
    number, which no text holds): two texts equal here are the same program up to a
    consistent renaming of those names (the hash is taken of this, never run)."""
    order: dict[str, str] = {}
    return _NAMED.sub(lambda m: order.setdefault(m.group(), f"\0{len(order)}"), source)


def _holds(path: Path, source: str) -> bool:
    """Whether the file holds ``source``, up to the names of its values."""
    try:
        held = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return held == source or canonical(held) == canonical(source)


def module_for(source: str, shared=()):
    """Import the module whose text is ``source`` (writing its file the first time).

    ``shared``: modules (each made by this function) of functions ``source`` defines too, to
    the letter (a generated module's kernel helpers, source.helper_module): the module's
    names for them are pointed at the shared ones before anything calls them, so a helper
    that many modules include compiles once per process and signature (and its machine code
    is cached once), not once per module. The text still holds every function it runs."""
    import numba

    key = hashlib.sha256((numba.__version__ + "\n" + canonical(source)).encode()).hexdigest()[:24]
    with _lock:
        got = _modules.get(key)
        if got is not None:
            return got
        path = cache_dir() / f"k_{key}.py"
        # compiled first: a text Python refuses (SyntaxError, for emitter._module) is never written
        code = compile(source, str(path), "exec")
        if not path.exists():
            write_whole(path, source.encode())
        elif not _holds(path, source):
            warnings.warn(f"the cached kernel {path} does not hold the text it was written from "
                          "(edited or cut short); writing it again", KernelCacheWarning, stacklevel=2)
            write_whole(path, source.encode())
        # run the text we hold, under the file's name (for tracebacks and numba's messages):
        # what runs is ours even if the file changes after the check
        name = f"dslc_numba_{key}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        sys.modules[name] = mod
        exec(code, mod.__dict__)
        mod.__dslc_source__ = source  # (what the compile worker is given: hot.py)
        for v in list(vars(mod).values()):
            if isinstance(v, numba.core.dispatcher.Dispatcher) and v.py_func.__module__ == name:
                attach(v, key)
        for other in shared:
            for fname, v in vars(other).items():
                if isinstance(v, numba.core.dispatcher.Dispatcher) and v.py_func.__module__ == other.__name__ \
                        and isinstance(vars(mod).get(fname), numba.core.dispatcher.Dispatcher):
                    setattr(mod, fname, v)
        _modules[key] = mod
        return mod
