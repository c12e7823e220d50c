"""Running a Caffe2 script as it is: its ``caffe2`` imports resolve to dslc.

    dslc exec train.py --epochs 3          # the script, its own command line, on dslc
    import dslc.compat; dslc.compat.install()   # the same inside a notebook

Once installed (for this process only), ``import caffe2.python.X`` gives ``dslc.X`` for
each X of ``CAFFE2_PYTHON`` (the explicit list of the Caffe2 modules dslc provides), and
``from caffe2.proto import caffe2_pb2`` gives ``dslc.proto.caffe2_pb2``: the same module
objects, so a blob fed through one name is seen through the other. ``caffe2.python``
itself is a package of those modules alone: dslc's own internals (its CLI, tracer, driver)
are not Caffe2 modules. A module not on the list is an ``UnsupportedCaffe2`` error (an
ImportError, so a script's ``try: import ... except ImportError`` still works) naming it
and pointing to the list (docs/caffe2-surface.md, ``dslc exec --list``).

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

from dslc.ir.diagnostics import DSLError, Location
from dslc.driver import blame
from dslc.trace import tracing

# The caffe2.python modules dslc provides: caffe2.python.X is dslc.X. A package listed here
# brings its submodules. Adding a Caffe2 module to dslc is one line here (keep it sorted);
# docs/caffe2-surface.md is generated from this list (python -m dslc.driver.surface).
CAFFE2_PYTHON = (
    "_import_c_extension",
    "brew",
    "cached_reader",
    "checkpoint",
    "cnn",
    "context",
    "control",
    "control_ops_grad",
    "control_ops_util",
    "core",
    "data_parallel_model",
    "data_workers",
    "dataio",
    "dataset",
    "db_file_reader",
    "device_checker",
    "dyndep",
    "functional",
    "gradient_checker",
    "hip_test_util",
    "hypothesis_test_util",
    "layer_model_helper",
    "layer_model_instantiator",
    "layer_test_util",
    "layers",
    "memonger",
    "mkl_test_util",
    "model_helper",
    "modeling",
    "models",
    "modifier_context",
    "net_builder",
    "net_drawer",
    "net_printer",
    "operator_test",
    "optimizer",
    "optimizer_context",
    "optimizer_test_util",
    "parallel_workers",
    "pipeline",
    "predictor",
    "predictor_constants",
    "queue_util",
    "record_queue",
    "recurrent",
    "regularizer",
    "regularizer_context",
    "rnn_cell",
    "schema",
    "scope",
    "serialized_test",
    "session",
    "task",
    "test_util",
    "text_file_reader",
    "timeout_guard",
    "tt_core",
    "utils",
    "visualize",
    "workspace",
)
# caffe2.proto is dslc.proto, the whole package (the protobuf messages)
_PROTO = ("caffe2.proto", "dslc.proto")
SURFACE_DOC = "docs/caffe2-surface.md"
LIST_HINT = f"the supported modules are listed by `dslc exec --list` and in {SURFACE_DOC}"


class CompatError(DSLError):
    """The caffe2 names cannot be given to dslc here (a real Caffe2 is installed)."""


class UnsupportedCaffe2(DSLError, ImportError):
    """A ``caffe2`` module (or a name in one) that dslc does not provide."""

    def __init__(self, message, loc=None, hint=None, name=None):
        DSLError.__init__(self, message, loc, hint)
        self.name, self.path = name, None  # (ImportError's fields)


def target(name: str) -> str | None:
    """The dslc module a caffe2 module name stands for ("" for the ``caffe2`` package itself,
    "caffe2.python" for its python package, which holds the listed modules alone); None for
    a name outside caffe2, or one dslc does not provide."""
    if name in ("caffe2", "caffe2.python"):
        return "" if name == "caffe2" else name
    prefix, to = _PROTO
    if name == prefix or name.startswith(prefix + "."):
        return to + name[len(prefix):]
    if name.startswith("caffe2.python."):
        rest = name[len("caffe2.python."):]
        if rest.split(".", 1)[0] in CAFFE2_PYTHON:
            return "dslc." + rest
    return None


def unsupported(name: str) -> UnsupportedCaffe2:
    """The error for the caffe2 module ``name`` that dslc lacks, located at the importing line."""
    import difflib
    short = name[len("caffe2.python."):] if name.startswith("caffe2.python.") else name
    close = difflib.get_close_matches(short, CAFFE2_PYTHON, 1, 0.85)
    guess = f"did you mean caffe2.python.{close[0]}? " if close else ""
    return UnsupportedCaffe2(f"dslc does not provide the Caffe2 module {name}", _importing_line(),
                             f"{guess}{LIST_HINT}", name=name)


def _importing_line():
    """The user's line that is importing: the innermost frame neither dslc's nor importlib's."""
    f = sys._getframe(1)
    while f is not None:
        filename = f.f_code.co_filename
        if not filename.startswith("<frozen") and not tracing.is_own_file(filename):
            return Location(tracing.display_path(filename), f.f_lineno)
        f = f.f_back
    return None


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``caffe2...`` modules as their dslc modules."""

    def find_spec(self, fullname, path=None, target_=None):
        if fullname != "caffe2" and not fullname.startswith("caffe2."):
            return None
        to = target(fullname)
        if to is None or (to.startswith("dslc") and importlib.util.find_spec(to) is None):
            raise unsupported(fullname)
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec.loader_state = {"to": to, "own": None}
        return spec

    def create_module(self, spec):
        to = spec.loader_state["to"]
        if not to or to == "caffe2.python":  # a namespace holding only the aliased parts
            module = types.ModuleType(spec.name, f"{spec.name}, aliased to dslc ({LIST_HINT})")
            module.__path__ = []
            if to:
                module.__getattr__ = _python_attribute  # (PEP 562: caffe2.python.X without importing X)
            return module
        module = importlib.import_module(to)
        spec.loader_state["own"] = module.__spec__
        return module

    def exec_module(self, module):
        own = module.__spec__.loader_state["own"] if isinstance(module.__spec__.loader_state, dict) else None
        if own is not None:
            module.__spec__ = own  # (the import system gave the dslc module the alias's spec)


def _python_attribute(name: str):
    """``caffe2.python.X`` for a listed X not imported yet: imports it, as Caffe2's package
    has its modules at hand."""
    if name in CAFFE2_PYTHON:
        return importlib.import_module("caffe2.python." + name)
    raise AttributeError(f"module 'caffe2.python' has no attribute {name!r}", name=name,
                         obj=sys.modules.get("caffe2.python"))


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
        runpy.run_path(os.path.abspath(path), run_name="__main__")  # (python gives __main__ its absolute path)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except Exception as e:
        if isinstance(e, DSLError):
            cause = _users_own_cause(e)
            if cause is None:
                raise  # (dslc's own located error: one line, exit 2)
            # (the script's own function failed inside a Python op: its traceback, as
            # `python script.py` shows the script's exceptions, then the op it ran as)
            sys.stderr.write(blame.user_traceback(cause, path, outer=e))
            sys.stderr.write(f"dslc: raised in {e.one_line()}\n")
            return 1
        missing = _missing_name(e)
        if missing is not None:
            raise missing from None
        if blame.raised_inside_dslc(e, __file__):
            raise  # (a dslc bug: the CLI reports an internal error)
        sys.stderr.write(blame.user_traceback(e, path))  # the script's exception, as `python script.py` shows it
        return 1
    finally:
        restore()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


def _users_own_cause(e: DSLError) -> BaseException | None:
    """The exception of the user's own code behind dslc's located error ``e`` (a Python op's
    function raised it: the op's error is caused by it), or None."""
    c = e.__cause__
    while c is not None:
        if not isinstance(c, DSLError) and not blame.raised_inside_dslc(c) \
                and blame.innermost_user_line(c) is not None:
            return c
        c = c.__cause__
    return None


def _missing_name(e: Exception) -> UnsupportedCaffe2 | None:
    """The user error for ``from caffe2.python.X import Name`` (or ``X.Name``) where dslc's X
    lacks Name, raised by the script's own line; else None."""
    if isinstance(e, UnsupportedCaffe2) or blame.raised_inside_dslc(e, __file__):
        return None
    module = None
    if isinstance(e, ImportError) and str(e).startswith("cannot import name") and e.name:
        module, name = e.name, str(e).split("'")[1]
    elif isinstance(e, AttributeError) and isinstance(getattr(e, "obj", None), types.ModuleType):
        module, name = e.obj.__name__, e.name
    shown = caffe2_name(module) if module else None
    if shown is None:
        return None
    where = blame.innermost_user_line(e)
    return UnsupportedCaffe2(f"dslc's {shown} has no {name!r}",
                             Location(tracing.display_path(where[0]), where[1]) if where else None,
                             f"{LIST_HINT} with the names each holds", name=shown)


def caffe2_name(module: str) -> str | None:
    """The caffe2 name of the dslc module ``module`` on the surface (None if it is not)."""
    if module == "dslc.proto" or module.startswith("dslc.proto."):
        return "caffe2" + module[len("dslc"):]
    if module.startswith("dslc.") and module[5:].split(".", 1)[0] in CAFFE2_PYTHON:
        return "caffe2.python" + module[len("dslc"):]
    if module in ("caffe2.python", "caffe2"):
        return module
    return None


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
