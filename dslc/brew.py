"""brew: layer helpers that add a layer's parameters and ops to a ModelHelper (Caffe2's ``brew``).

    fc1 = brew.fc(model, "data", "fc1", dim_in=64, dim_out=256)   # fc1_w, fc1_b + FC
    r1 = brew.relu(model, fc1, "r1")

``brew.<name>`` is a registered helper (dslc/brew_helpers.py, and any added with
``brew.Register``) called with extra keyword arguments, as Caffe2's brew does: first
the model's ``arg_scope`` (those the helper accepts), then the arguments of the
innermost ``brew.arg_scope`` naming the helper, then the call's own.

    with brew.arg_scope([brew.conv], order="NHWC"):
        brew.conv(model, "data", "c1", 3, 16, 5)   # order="NHWC"
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import threading

from dslc.brew_helpers import HELPERS
from dslc.model_helper import ModelHelper

_registry: dict = dict(HELPERS)


class _Scope(threading.local):
    current: dict | None = None  # helper name -> its arguments, in this thread


_scope = _Scope()


def get_current_scope() -> dict:
    if _scope.current is None:
        _scope.current = {}
    return _scope.current


@contextlib.contextmanager
def arg_scope(single_helper_or_list, **kwargs):
    """Give the helpers named (functions or brew's helpers) ``kwargs`` inside the block;
    nested scopes add to the outer ones."""
    helpers = single_helper_or_list if isinstance(single_helper_or_list, list) else [single_helper_or_list]
    saved = copy.deepcopy(get_current_scope())
    for helper in helpers:
        if not callable(helper):
            raise TypeError("arg_scope takes a helper function or a list of them")
        get_current_scope().setdefault(helper.__name__, {}).update(kwargs)
    try:
        yield
    finally:
        _scope.current = saved


def Register(helper) -> None:
    """Add ``helper`` (a function taking the model first) as ``brew.<its name>``."""
    name = helper.__name__
    if name in _registry:
        raise AttributeError(f"Helper {name} already exists; give your helper another name")
    _registry[name] = helper


def has_helper(helper_or_name) -> bool:
    name = helper_or_name if isinstance(helper_or_name, str) else helper_or_name.__name__
    return name in _registry


def _wrapped(name: str):
    func = _registry[name]
    params = inspect.signature(func).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())

    def helper(*args, **kwargs):
        model = args[0] if args and isinstance(args[0], ModelHelper) else kwargs.get("model")
        if model is None:
            raise RuntimeError("a helper's first argument is the model (or pass model=<your model>)")
        extra = copy.deepcopy(model.arg_scope)
        if not takes_any:
            extra = {k: v for k, v in extra.items() if k in params}
        extra.update(get_current_scope().get(name, {}))
        extra.update(kwargs)
        return func(*args, **extra)

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = func.__doc__
    return helper


def __getattr__(name: str):
    if name in _registry:
        return _wrapped(name)
    raise AttributeError(f"Helper function {name} not registered.")
