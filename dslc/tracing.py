"""Where in the user's code a DSL call was made."""
from __future__ import annotations

import contextlib
import os
import sys

import dslc
from dslc.ir.diagnostics import UNKNOWN_LOC, Location

_OWN = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
             for m in (dslc, sys.modules["dslc.ir"], sys.modules.get("dslc.backends") or dslc))
_SKIP = _OWN + (os.path.abspath(contextlib.__file__),)
_display: dict[str, str] = {}


def _shown(filename: str) -> str:
    shown = _display.get(filename)
    if shown is None:
        path = os.path.abspath(filename)
        try:
            rel = os.path.relpath(path)
            shown = rel if not rel.startswith("..") else path
        except ValueError:
            shown = path
        if filename.startswith("<"):
            shown = filename
        _display[filename] = shown
    return shown


def user_location(depth: int = 1) -> Location:
    """The file and line of the innermost caller outside dslc."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP) and fn != _SKIP[-1]:
            return Location(_shown(fn), f.f_lineno)
        f = f.f_back
    return UNKNOWN_LOC
