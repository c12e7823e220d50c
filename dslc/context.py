"""Per-thread context stacks (``with Task():``, ``with NetBuilder():`` ...).

Each context class keeps its own stack; subclasses share their root's stack, so
``NetBuilder.current()`` also finds an open ``ops.loop()`` block.
"""
from __future__ import annotations

import threading

from dslc.ir.diagnostics import TraceError
from dslc.tracing import user_location

class _Stacks(threading.local):
    def __init__(self):  # runs once in each thread that uses contexts
        self.by_root: dict[type, list] = {}  # context root class -> its open instances, innermost last


_local = _Stacks()


def _stack(key) -> list:
    """This thread's stack for the context root class ``key``."""
    stack = _local.by_root.get(key)
    if stack is None:
        stack = _local.by_root[key] = []
    return stack


class Managed:
    """A class whose instances can be the current one of their kind (``X.current()``)."""

    _allow_default = False
    # The class whose stack this class uses: the first class below Managed/DefaultManaged
    # in the MRO. Set once per class (``current()`` runs for every recorded op).
    _context_root: type

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._context_root = cls._find_root()

    @classmethod
    def _find_root(cls):
        # (While DefaultManaged itself is being made, the first test already holds.)
        for klass in cls.__mro__:
            if Managed in klass.__bases__ or DefaultManaged in klass.__bases__:
                return klass
        return cls

    @classmethod
    def _root(cls):
        return cls._context_root

    @classmethod
    def current(cls, value=None, required: bool = True):
        """``value`` if given, else the innermost open instance; None or an error if none."""
        if value is None:
            stack = _local.by_root.get(cls._context_root)
            if stack:
                return stack[-1]
        return cls._current_slow(value, required)

    @classmethod
    def _current_slow(cls, value, required):
        """``current()`` when a value is given or the stack is empty."""
        root = cls._context_root
        if value is not None:
            if not isinstance(value, root):
                raise TraceError(f"expected a {root.__name__}, got {value!r}", user_location(),
                                 f"pass a {root.__name__} object (or None for the current one)")
            return value
        stack = _stack(root)
        if cls._allow_default:
            default = root()
            stack.append(default)
            return default
        if required:
            raise TraceError(f"no active {root.__name__}", user_location(),
                             hint=f"use this inside a `with {root.__name__}(...):` block")
        return None

    def __enter__(self):
        _stack(self._context_root).append(self)
        return self

    def __exit__(self, *exc):
        stack = _stack(self._context_root)
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:
            stack.remove(self)
        return False


Managed._context_root = Managed


class DefaultManaged(Managed):
    """A context kind with an implicit default instance (Cluster, Node)."""

    _allow_default = True
