"""Which optimizer a parameter gets, by its tag (Caffe2's ``optimizer_context``).

    with UseOptimizer({"WEIGHT": adagrad, "BIAS": sgd}):   # or UseOptimizer(opt): the default
        brew.fc(model, "x", "y", 4, 2)                      # y_w -> adagrad, y_b -> sgd

``model.create_param`` looks the current context up for each of the parameter's tags
(then ``DEFAULT``) and records the optimizer in the parameter's info; nested contexts
add to the outer ones.
"""
from __future__ import annotations

import contextlib
import threading

DEFAULT_OPTIM = "DEFAULT"


class _Stack(threading.local):
    frames: list | None = None


_stack = _Stack()


class OptimizerContext:
    """The optimizers in force: tag -> optimizer."""

    def __init__(self, optimizers: dict):
        self._optimizers = dict(optimizers)

    @staticmethod
    def current() -> "OptimizerContext":
        merged: dict = {}
        for frame in _stack.frames or ():
            merged.update(frame)
        return OptimizerContext(merged)

    def has_optimizer(self, name) -> bool:
        return name in self._optimizers

    def get_optimizer(self, name):
        assert self.has_optimizer(name), f"{name} optimizer is not provided"
        return self._optimizers[name]


@contextlib.contextmanager
def UseOptimizer(optim_or_dict):
    frame = dict(optim_or_dict) if isinstance(optim_or_dict, dict) else {DEFAULT_OPTIM: optim_or_dict}
    if _stack.frames is None:
        _stack.frames = []
    _stack.frames.append(frame)
    try:
        yield
    finally:
        _stack.frames.pop()
