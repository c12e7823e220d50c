"""Backends consume an ``ir.Module``; the registry finds them by name.

A backend is a class with ``name``, ``run(module, workspace, **options)`` and
``compile(module, **options)``. Built-in ones are listed here; other packages add
theirs through the ``dslc.backends`` entry-point group.

``compile`` returns a program with ``run(workspace)``. For ``dslc compile JOB.py
--backend NAME [-o DIR]`` a program may also provide, each optional:

* ``summary() -> dict``: a few JSON-able facts (``{"kernels": 3, "cache": "hit"}``),
  printed as ``key: value`` lines under the command's own summary line, or inside its
  ``--json`` output;
* ``listing() -> str``: text worth reading, printed before the summary (the text
  backend's plan; generated kernel source, say);
* ``write_artifacts(directory) -> list[str]``: with ``-o DIR``, write files into
  ``directory`` (it exists) and return their paths. ``dslc compile`` itself always
  writes the optimized IR next to them as ``job.dslir``.
"""
from __future__ import annotations

import importlib

from dslc.ir.diagnostics import DSLError

BUILTIN = {"interp": "dslc.backends.interp:InterpBackend", "text": "dslc.backends.text:TextBackend",
           "numba": "dslc.backends.numba:NumbaBackend", "xla": "dslc.backends.xla:XlaBackend"}
# cluster backends: what a multi-node session needs of a cluster system (start or join a
# cluster, split a module by node, the per-node worker). They run no module themselves, so
# they are not among ``names()``.
CLUSTERS = {"ray": "dslc.backends.ray:RayCluster"}


def entry_points(group: str):
    """The installed entry points of ``group`` (importlib.metadata is imported only when
    asked: it costs a first run more than the built-in backends do)."""
    from importlib.metadata import entry_points as found
    return found(group=group)


def names() -> list[str]:
    found = set(BUILTIN)
    try:
        found |= {ep.name for ep in entry_points(group="dslc.backends")}
    except Exception:
        pass
    return sorted(found)


# backends that render a module rather than run it: `dslc compile` offers them, run and exec do not
RENDER_ONLY = frozenset({"text"})


def runnable_names() -> list[str]:
    """The backends that run a module (``dslc run``'s and ``exec``'s choices)."""
    return [n for n in names() if n not in RENDER_ONLY]


def get(name: str):
    """The backend class called ``name``."""
    target = BUILTIN.get(name)
    if target is None:
        for ep in entry_points(group="dslc.backends"):
            if ep.name == name:
                return ep.load()
        raise DSLError(f"unknown backend {name!r}", hint=f"choose one of: {', '.join(names())}")
    return _load(target)


def cluster(name: str):
    """The cluster backend called ``name`` (``"ray"``: ``dslc.backends.ray.RayCluster``)."""
    target = CLUSTERS.get(name)
    if target is None:
        raise DSLError(f"unknown cluster backend {name!r}", hint=f"choose one of: {', '.join(sorted(CLUSTERS))}")
    return _load(target)


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
