"""Where in the user's code a DSL call was made.

Every record (op, block, task) carries the location of the innermost stack frame
outside dslc's own packages (``dslc`` and those mapped into it: ``dslc.ir``, ``dslc.runtime``,
``dslc.backends``), so errors
name the line the user wrote, not a line inside the library.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

import dslc
from dslc.ir.diagnostics import UNKNOWN_LOC, Location


def _package_dirs() -> tuple[str, ...]:
    """The directories of dslc's packages; ``ir/``, ``runtime/`` and ``backends/`` live outside
    ``dslc/`` in a checkout."""
    dirs = []
    for name in ("dslc", *(f"dslc.{m}" for m in dslc._MAPPED)):
        spec = importlib.util.find_spec(name)  # does not import dslc.backends itself
        for d in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.join(os.path.abspath(d), ""))
    dirs.append(os.path.join(os.path.dirname(os.path.abspath(dslc.__file__)), ""))
    return tuple(dict.fromkeys(dirs))


_OWN = _package_dirs()
# contextlib: dslc's @contextmanager blocks put its frames between the user's and ours.
_SKIP = _OWN + (os.path.abspath(contextlib.__file__),)
# Frames above the CLI are the launcher (the console script, runpy), never the user's code.
_CLI = os.path.join(os.path.dirname(os.path.abspath(dslc.__file__)), "cli.py")
_display: dict[tuple[str, str], str] = {}


def is_own_file(filename: str) -> bool:
    """Whether ``filename`` is part of dslc (its front end, IR or backends)."""
    return os.path.abspath(filename).startswith(_OWN)


def display_path(filename: str) -> str:
    """How a file is named in messages: relative to the working directory when it is
    below it, else absolute; pseudo-files such as ``<stdin>`` stay as they are."""
    if filename.startswith("<"):
        return filename
    key = (os.getcwd(), filename)  # a relative name depends on the directory it is relative to
    shown = _display.get(key)
    if shown is None:
        path = os.path.abspath(filename)
        try:
            rel = os.path.relpath(path)
            shown = rel if not rel.startswith("..") else path
        except ValueError:  # another drive (Windows)
            shown = path
        _display[key] = shown
    return shown


# What a frame's file is to user_location: the user's code, dslc's own (skipped), or the
# CLI launcher (the search stops). Cached per file name: the check is a prefix test on
# every frame of every recorded op.
_USER, _SKIPPED, _LAUNCHER = 0, 1, 2
_frame_kinds: dict[str, int] = {}


def _frame_kind(filename: str) -> int:
    kind = _frame_kinds.get(filename)
    if kind is None:
        if filename == _CLI:
            kind = _LAUNCHER
        elif filename.startswith(_SKIP):  # code objects of imported modules carry absolute paths
            kind = _SKIPPED
        else:
            kind = _USER
        _frame_kinds[filename] = kind
    return kind


class _CallSites:
    """The Location of each call site seen, for one working directory (``cwd``).

    Keyed by (id of the code object, instruction offset): a frame's line number is
    found by scanning its code's line table, which costs more the longer the user's
    function is. The entry holds the code object, so its id stays unique while cached.
    user_location looks entries up itself (it runs for every op); ``add`` does the rest.
    """

    LIMIT = 10_000  # entries; past it the cache starts over (it only saves work, and holds code objects)

    def __init__(self):
        self.cwd = None
        self.by_site: dict[tuple[int, int], tuple] = {}

    def add(self, frame) -> Location:
        """The Location of ``frame``'s call site, cached (first emptying a stale cache)."""
        cwd = os.getcwd()
        if cwd != self.cwd or len(self.by_site) > self.LIMIT:
            self.by_site.clear()
            self.cwd = cwd
        code = frame.f_code
        loc = Location(display_path(code.co_filename), frame.f_lineno)
        self.by_site[id(code), frame.f_lasti] = (code, loc)
        return loc


_sites = _CallSites()


def call_site(loc: Location) -> tuple[str, str]:
    """The absolute file and the function of the call recorded as ``loc`` (its display file
    and "" when the call is no longer cached)."""
    for code, seen in list(_sites.by_site.values()):
        if seen is loc:
            return code.co_filename, code.co_name
    return loc.file, ""


def user_location(depth: int = 1) -> Location:
    """The file and line of the innermost caller outside dslc (``depth`` frames up
    from the caller of this function is where the search starts); ``UNKNOWN_LOC``
    when dslc was called by its own CLI rather than from the user's code."""
    f = sys._getframe(depth)
    while f is not None:
        filename = f.f_code.co_filename
        kind = _frame_kinds.get(filename)  # _frame_kind(), inlined: this loop runs for every op
        if kind is None:
            kind = _frame_kind(filename)
        if kind == _USER:
            if os.getcwd() == _sites.cwd:  # checked every time: a job may chdir, display paths depend on it
                entry = _sites.by_site.get((id(f.f_code), f.f_lasti))
                if entry is not None:
                    return entry[1]
            return _sites.add(f)
        if kind == _LAUNCHER:
            break
        f = f.f_back
    return UNKNOWN_LOC
