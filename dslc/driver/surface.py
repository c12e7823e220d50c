"""The Caffe2 surface dslc provides, as a page: every ``caffe2.python`` module of
``dslc.compat.CAFFE2_PYTHON`` (and ``caffe2.proto``) with the public names it holds.

    python -m dslc.driver.surface > docs/caffe2-surface.md     (a test checks the page is current)
    dslc exec --list                                            (the same text)
"""
from __future__ import annotations

import __future__
import importlib
import pkgutil
import sys
import types

from dslc.compat import CAFFE2_PYTHON

HEADER = """# The Caffe2 modules dslc provides

<!-- generated from dslc/compat.py's CAFFE2_PYTHON by `python -m dslc.driver.surface`: do not edit -->

Under `dslc exec` (or after `dslc.compat.install()`), `caffe2.python.X` is dslc's module `X` for
each module below, and `caffe2.proto` is `dslc.proto`. Importing any other `caffe2` module, or a
name a module below does not hold, stops the script with an error naming it. The same list
prints with `dslc exec --list`.

"""


def _public(module: types.ModuleType) -> list[str]:
    """The names a script may import from ``module``: ``__all__``, else what it defines or
    re-exports from dslc (not the modules and helpers it imports for itself)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, (types.ModuleType, __future__._Feature)):
            continue
        home = getattr(value, "__module__", None)
        if home is None or home.startswith(("dslc", "caffe2")) or not callable(value):
            out.append(name)
    return sorted(out)


def _modules() -> list[tuple[str, types.ModuleType]]:
    """(caffe2 name, module) for every module of the surface, submodules of packages included."""
    out = []
    for short in sorted(CAFFE2_PYTHON) + ["proto"]:
        module = importlib.import_module(f"dslc.{short}")
        shown = "caffe2.proto" if short == "proto" else f"caffe2.python.{short}"
        out.append((shown, module))
        if hasattr(module, "__path__"):
            for info in sorted(pkgutil.walk_packages(module.__path__, module.__name__ + "."), key=lambda i: i.name):
                out.append((shown + info.name[len(module.__name__):], importlib.import_module(info.name)))
    return out


def render() -> str:
    """The page: a table of contents line, then each module with its names."""
    parts = [HEADER]
    modules = _modules()
    parts.append(f"{len(modules)} modules:\n\n" + "\n".join(f"- `{name}`" for name, _ in modules) + "\n")
    for name, module in modules:
        names = _public(module)
        parts.append(f"\n## {name}\n\n" + (", ".join(f"`{n}`" for n in names) if names else "(no public names)") + "\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
