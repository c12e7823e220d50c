"""Per-thread context stacks (``with Task():``, ``with NetBuilder():`` ...).

Each context class keeps its own stack; subclasses share their root's stack, so
``NetBuilder.current()`` also finds an open ``ops.loop()`` block.
"""
from __future__ import annotations

import threading

from dslc.ir.diagnostics import TraceError
from dslc.tracing import user_location

_local = threading.local()


def _stack(key) -> list:
    stacks = getattr(_local, "stacks", None)
    if stacks is None:
        stacks = _local.stacks = {}
    return stacks.setdefault(key, [])


class Managed:
    """A class whose instances can be the current one of their kind (``X.current()``)."""

    _allow_default = False

    @classmethod
    def _root(cls):
        for klass in cls.__mro__:
            if Managed in klass.__bases__ or DefaultManaged in klass.__bases__:
                return klass
        return cls

    @classmethod
    def current(cls, value=None, required: bool = True):
        """``value`` if given, else the innermost open instance; None or an error if none."""
        if value is not None:
            if not isinstance(value, cls._root()):
                raise TraceError(f"expected a {cls._root().__name__}, got {value!r}", user_location(),
                                 f"pass a {cls._root().__name__} object (or None for the current one)")
            return value
        stack = _stack(cls._root())
        if stack:
            return stack[-1]
        if cls._allow_default:
            default = cls._root()()
            stack.append(default)
            return default
        if required:
            raise TraceError(f"no active {cls._root().__name__}", user_location(),
                             hint=f"use this inside a `with {cls._root().__name__}(...):` block")
        return None

    def __enter__(self):
        _stack(self._root()).append(self)
        return self

    def __exit__(self, *exc):
        stack = _stack(self._root())
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:
            stack.remove(self)
        return False


class DefaultManaged(Managed):
    """A context kind with an implicit default instance (Cluster, Node)."""

    _allow_default = True
