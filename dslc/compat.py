"""Running a Caffe2 script as it is: its ``caffe2`` imports resolve to dslc.

    dslc exec train.py --epochs 3          # the script, its own command line, on dslc
    import dslc.compat; dslc.compat.install()   # the same inside a notebook

Once installed (for this process only), ``import caffe2.python.X`` gives ``dslc.X``,
``from caffe2.proto import caffe2_pb2`` gives ``dslc.proto.caffe2_pb2``, and
``caffe2.python`` itself is the ``dslc`` package: the same module objects, so a blob fed
through one name is seen through the other. A name dslc lacks fails as a missing
module would, naming the dslc module it looked for.

A real Caffe2 installed next to dslc is never shadowed unless asked: ``install()``
refuses while ``caffe2`` is importable from elsewhere, unless ``force=True``
(``dslc exec --shadow``).

Under ``dslc exec`` the script's multiprocessing children see the same names, whatever
the start method. ``fork`` children are copies; ``spawn`` and ``forkserver`` children
start a fresh Python that unpickles the parent's preparation data and then runs the
script again as ``__mp_main__``: that data carries an ``_InChildren`` whose unpickling
installs the aliases (and this same hook, for their own children) first.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from dslc.ir.diagnostics import DSLError

_PREFIXES = (("caffe2.python", "dslc"), ("caffe2.proto", "dslc.proto"))


class CompatError(DSLError):
    """The caffe2 names cannot be given to dslc here (a real Caffe2 is installed)."""


def target(name: str) -> str | None:
    """The dslc module a caffe2 module name stands for ("" for the ``caffe2`` package itself)."""
    if name == "caffe2":
        return ""
    for prefix, to in _PREFIXES:
        if name == prefix or name.startswith(prefix + "."):
            return to + name[len(prefix):]
    return None


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``caffe2...`` modules as their dslc modules."""

    def find_spec(self, fullname, path=None, target_=None):
        to = target(fullname)
        if to is None:
            return None
        if to and importlib.util.find_spec(to) is None:
            return None  # (then Python reports caffe2's module as missing)
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec.loader_state = {"to": to, "own": None}
        return spec

    def create_module(self, spec):
        to = spec.loader_state["to"]
        if not to:  # the caffe2 package: a namespace holding only the aliased parts
            module = types.ModuleType("caffe2", "caffe2's package, aliased to dslc")
            module.__path__ = []
            return module
        module = importlib.import_module(to)
        spec.loader_state["own"] = module.__spec__
        return module

    def exec_module(self, module):
        own = module.__spec__.loader_state["own"] if isinstance(module.__spec__.loader_state, dict) else None
        if own is not None:
            module.__spec__ = own  # (the import system gave the dslc module the alias's spec)


_installed: _Aliases | None = None


def real_caffe2_installed() -> bool:
    """Whether a ``caffe2`` other than these aliases is importable."""
    finders = [f for f in sys.meta_path if not isinstance(f, _Aliases)]
    for finder in finders:
        find = getattr(finder, "find_spec", None)
        if find is not None and find("caffe2", None) is not None:
            return True
    return False


def install(force: bool = False) -> None:
    """Make ``caffe2`` imports resolve to dslc in this process (idempotent)."""
    global _installed
    if _installed is not None:
        return
    if not force and ("caffe2" in sys.modules or real_caffe2_installed()):
        raise CompatError("a real Caffe2 is installed next to dslc: its imports will not be taken over",
                          hint="run it with its own Python, or ask for dslc anyway: dslc exec --shadow "
                               "(dslc.compat.install(force=True))")
    for name in [n for n in sys.modules if n == "caffe2" or n.startswith("caffe2.")]:
        del sys.modules[name]  # (forced: what the real one imported so far goes)
    _installed = _Aliases()
    sys.meta_path.insert(0, _installed)


def uninstall() -> None:
    """Undo ``install`` (the caffe2 names are forgotten; dslc's modules stay)."""
    global _installed
    if _installed is not None:
        sys.meta_path.remove(_installed)
        _installed = None
    for name in [n for n in sys.modules if n == "caffe2" or n.startswith("caffe2.")]:
        del sys.modules[name]


def run_script(path: str, args, force: bool = False) -> int:
    """Run the Caffe2 script ``path`` with ``args`` as its command line; its exit status."""
    import os
    import runpy
    install(force)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    restore = _aliases_in_children(force)
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except Exception as e:
        if isinstance(e, DSLError):
            raise  # (dslc's own located error: one line, exit 2)
        _print_script_traceback(e, path)  # the script's exception, as `python script.py` shows it
        return 1
    finally:
        restore()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def _print_script_traceback(e: BaseException, path: str) -> None:
    import traceback
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next  # (runpy's and dslc's frames above the script's are not the user's)
    traceback.print_exception(type(e), e, tb or e.__traceback__, file=sys.stderr)


class _InChildren:
    """Travels in the preparation data of a ``spawn`` or ``forkserver`` child, which
    unpickles it before it imports the script again: there it installs the aliases."""

    def __init__(self, force: bool):
        self.force = force

    def __reduce__(self):
        return _install_in_child, (self.force,)


def _install_in_child(force: bool) -> None:
    install(force)
    _aliases_in_children(force)  # (and in the children it starts in turn)


def _aliases_in_children(force: bool):
    """Make the ``spawn`` and ``forkserver`` children of this process install the aliases;
    returns what undoes it."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def with_aliases(name):
        data = original(name)
        if name == "ignore":
            # the forkserver's own start (multiprocessing asks under this name): a server that
            # imported the script would do so without the aliases; every child it forks gets
            # the whole data below and imports the script itself
            data.pop("init_main_from_path", None)
            data.pop("main_path", None)
            return data
        data["dslc_compat"] = _InChildren(force)  # (prepare() reads only the keys it knows)
        return data

    spawn.get_preparation_data = with_aliases

    def restore():
        spawn.get_preparation_data = original
    return restore
