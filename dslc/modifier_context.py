"""Caffe2's ``modifier_context``: named modifiers (optimizers, regularizers) in force inside
``with`` blocks, nested blocks adding to (and overriding) the outer ones.

    with UseRegularizer({"WEIGHT": L1Norm(0.1)}):
        RegularizerContext.current().get_regularizer("WEIGHT")

Each ModifierContext subclass has its own stack of blocks per thread; ``current()`` is the
merge of that stack's dicts, innermost last."""
from __future__ import annotations

import threading

DEFAULT_MODIFIER = "DEFAULT"


class _Stacks(threading.local):
    def __init__(self):
        self.by_class: dict = {}


_stacks = _Stacks()


class ModifierContext:
    """The modifiers in force: name -> modifier."""

    def __init__(self, modifiers=None):
        self._modifiers = dict(modifiers or {})

    @classmethod
    def current(cls):
        merged: dict = {}
        for frame in _stacks.by_class.get(cls, ()):
            merged.update(frame)
        return cls(merged)

    def _has_modifier(self, name) -> bool:
        return name in self._modifiers

    def _get_modifier(self, name):
        return self._modifiers.get(name)


class UseModifierBase:
    """``with Use...(modifiers):`` pushes a dict of modifiers (or one modifier, as the
    default) onto its context class's stack for the block."""

    def __init__(self, modifier_or_dict):
        self._frame = dict(modifier_or_dict) if isinstance(modifier_or_dict, dict) else \
            {DEFAULT_MODIFIER: modifier_or_dict}

    def _context_class(self):
        raise NotImplementedError

    def __enter__(self):
        _stacks.by_class.setdefault(self._context_class(), []).append(self._frame)
        return self

    def __exit__(self, *exc):
        _stacks.by_class[self._context_class()].pop()
