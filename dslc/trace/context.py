"""Per-thread context stacks (``with Task():``, ``with NetBuilder():`` ...), as Caffe2 has them.

Every class deriving from ``Managed`` has its own stack in each thread. Entering an
instance pushes it onto the stack of its class and of each Managed ancestor, so
``NetBuilder.current()`` also finds an open ``ops.loop()`` block, while a subclass's
``current()`` only finds instances of that subclass. ``DefaultManaged`` classes make
an instance when none is open (Cluster, Node); for the others ``current()`` with
none open is an error that is also an ``AssertionError``, as in Caffe2. An instance
is also a decorator: ``@MyContext()`` runs the function inside ``with MyContext():``.
``define_context()`` is the 2018 spelling: a class decorator making any class one.
"""
from __future__ import annotations

import functools
import threading

from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location


class ContextError(TraceError, AssertionError):
    """No context of a kind is open, or a value of the wrong kind was given (Caffe2 asserts)."""


class _Stacks(threading.local):
    def __init__(self):  # runs once in each thread that uses contexts
        self.by_class: dict[type, list] = {}  # context class -> its open instances, innermost last


_local = _Stacks()


def _stack(key) -> list:
    """This thread's stack for the context class ``key``."""
    stack = _local.by_class.get(key)
    if stack is None:
        stack = _local.by_class[key] = []
    return stack


def _current(cls, value=None, required: bool = True):
    """``value`` if given, else the innermost open ``cls``; a default, None or an error if none."""
    if value is None:
        stack = _local.by_class.get(cls)
        if stack:
            return stack[-1]
    return _current_slow(cls, value, required)


def _current_slow(cls, value, required):
    """``current()`` when a value is given or the stack is empty."""
    if value is not None:
        if not isinstance(value, cls):
            raise ContextError(f"expected a {cls.__name__}, got {value!r}", user_location(),
                               f"pass a {cls.__name__} object (or None for the current one)")
        return value
    if not required:
        return None
    if cls._allow_default:
        default = cls()
        _stack(cls).append(default)
        return default
    raise ContextError(f"no active {cls.__name__}", user_location(),
                       hint=f"use this inside a `with {cls.__name__}(...):` block")


def _enter(self):
    for klass in self._context_classes:
        _stack(klass).append(self)
    return self


def _exit(self):
    for klass in self._context_classes:
        stack = _stack(klass)
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:
            stack.remove(self)


def _decorate(self, func):
    """``@ctx`` on a function: it runs inside ``with ctx:``."""
    @functools.wraps(func)
    def inside(*args, **kwargs):
        with self:
            return func(*args, **kwargs)
    return inside


class Managed:
    """A class whose instances can be the current one of their kind (``X.current()``)."""

    _allow_default = False
    # The classes whose stacks an instance enters: its own and its Managed ancestors
    # (not Managed / DefaultManaged). Set once per class: entering runs often.
    _context_classes: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        bases = (Managed, globals().get("DefaultManaged"))  # (None while it is being made)
        cls._context_classes = tuple(k for k in cls.__mro__ if issubclass(k, Managed)
                                     and k not in bases)
        cls._allow_default = bases[1] is None or issubclass(cls, bases[1])

    @classmethod
    def current(cls, value=None, required: bool = True):
        """``value`` if given, else the innermost open instance; a default, None or an error."""
        return _current(cls, value, required)

    def __enter__(self):
        return _enter(self)

    def __exit__(self, *exc):
        _exit(self)
        return False

    def __call__(self, func):
        return _decorate(self, func)


class DefaultManaged(Managed):
    """A context kind with an implicit default instance (Cluster, Node)."""


class define_context:
    """``@define_context()`` on a class makes it a context kind (Caffe2's 2018 spelling).

    The class keeps its own ``__enter__`` / ``__exit__`` (they run around the stack push
    and pop) and gains ``current()`` and use as a decorator. ``arg_name`` is accepted and
    unused, as in Caffe2's later versions.
    """

    def __init__(self, arg_name=None, allow_default=False):
        self.arg_name = arg_name
        self.allow_default = allow_default

    def __call__(self, cls):
        if isinstance(getattr(cls, "_context_classes", None), tuple) and cls._context_classes:
            raise ContextError(f"{cls.__name__} is already a context kind (through "
                               f"{cls._context_classes[0].__name__})", user_location(),
                               "apply define_context() to one class of a hierarchy only")
        prev_enter = getattr(cls, "__enter__", None)
        prev_exit = getattr(cls, "__exit__", None)

        def __enter__(self):
            if prev_enter is not None:
                prev_enter(self)
            return _enter(self)

        def __exit__(self, *exc):
            _exit(self)
            return prev_exit(self, *exc) if prev_exit is not None else False

        cls._context_classes = (cls,)
        cls._allow_default = bool(self.allow_default)
        cls.__enter__, cls.__exit__, cls.__call__ = __enter__, __exit__, _decorate
        cls.current = classmethod(_current)
        return cls


__all__ = ["Managed", "DefaultManaged", "define_context", "ContextError"]
