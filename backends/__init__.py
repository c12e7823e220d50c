"""Backends consume an ``ir.Module``; the registry finds them by name.

A backend is a class with ``name``, ``run(module, workspace, **options)`` and
``compile(module, **options)``. Built-in ones are listed here; other packages add
theirs through the ``dslc.backends`` entry-point group.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

BUILTIN = {"interp": "dslc.backends.interp:InterpBackend"}


def names() -> list[str]:
    found = set(BUILTIN)
    try:
        found |= {ep.name for ep in entry_points(group="dslc.backends")}
    except Exception:
        pass
    return sorted(found)


def get(name: str):
    """The backend class called ``name``."""
    target = BUILTIN.get(name)
    if target is None:
        for ep in entry_points(group="dslc.backends"):
            if ep.name == name:
                return ep.load()
        from dslc.ir.diagnostics import DSLError
        raise DSLError(f"unknown backend {name!r}", hint=f"choose one of: {', '.join(names())}")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
