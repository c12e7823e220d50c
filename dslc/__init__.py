"""dslc: trace Caffe2-style jobs into a typed SSA IR, optimize it, run it on a backend.

Import the modules as Caffe2 programs do: ``from dslc import core``,
``from dslc.net_builder import ops``, ``from dslc.task import Task``,
``from dslc.session import LocalSession``.
"""
__version__ = "0.1.0"


def _quiet_interrupt_at_start():
    """Started as the ``dslc`` command, a Ctrl-C while Python still imports dslc (before the
    CLI's own handler runs) ends with one line, not an import traceback."""
    import os
    import sys

    if not sys.argv or os.path.basename(sys.argv[0]) not in ("dslc", "dslc.exe", "dslc-script.py"):
        return
    original = sys.excepthook

    def hook(etype, value, tb):
        if issubclass(etype, KeyboardInterrupt):
            sys.stderr.write("dslc: interrupted\n")
            return
        original(etype, value, tb)
    sys.excepthook = hook


_quiet_interrupt_at_start()

# the folders pyproject.toml's package-dir maps into dslc (beside dslc/ in a checkout, inside it
# installed): the one-tree check below and the tracer's "own files" both go by this list
_MAPPED = ("ir", "runtime", "backends")


def _check_one_tree():
    """Refuse a dslc whose packages come from two trees.

    ``ir/``, ``backends/`` (and ``runtime/``) are mapped into ``dslc`` by pyproject.toml's
    package-dir. Run from the root of checkout A with dslc installed (``pip install -e``) from
    checkout B, ``import dslc`` finds A's ``dslc/`` on the path but B's ``ir/`` through the
    install: a mixture no test ever ran. Installed, they live inside ``dslc/``; in a checkout,
    beside it. Finding them costs a few stat calls (a fraction of a millisecond) and
    imports none of them.
    """
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.dirname(here)
    for name in _MAPPED:
        inside, beside = os.path.join(here, name), os.path.join(checkout, name)
        want = inside if os.path.isdir(inside) else beside
        spec = importlib.util.find_spec(f"{__name__}.{name}")
        found = [os.path.abspath(d) for d in (spec.submodule_search_locations or [])] if spec else []
        if want in found or (spec is None and not os.path.isfile(os.path.join(want, "__init__.py"))):
            continue    # the same tree (or a package neither has, as runtime/ before it existed)
        if found and os.path.realpath(want) in map(os.path.realpath, found):
            continue    # the same tree reached through a link
        fix = f"{sys.executable} -m pip install -e {checkout}"
        if found:
            raise ImportError(
                f"dslc is imported from {here} but dslc.{name} from {found[0]}: two checkouts mixed. The "
                f"current directory (or sys.path) puts the checkout {checkout} first, while the installed "
                f"dslc maps its packages elsewhere. Run from outside that checkout, or install this one: {fix}",
                name=f"{__name__}.{name}")
        raise ImportError(
            f"dslc is imported from {here} but dslc.{name} ({want}) is not installed with it (dslc was "
            f"installed before that folder existed, from another checkout, or not at all): {fix}",
            name=f"{__name__}.{name}")


_check_one_tree()

from dslc import ir  # noqa: E402,F401  (the IR package, mapped from ir/)
from dslc.ir.diagnostics import DSLError  # noqa: E402,F401
