"""Caffe2's ``modeling.parameter_sharing``: ``with ParameterSharing({"b": "a"}):`` makes the
parameters created under name scope ``b`` (and its children) those of scope ``a``.

    with scope.NameScope("global"), ParameterSharing({"tower_b": "tower_a"}):
        with scope.NameScope("tower_b"):
            model.create_param("w", ...)   # -> global/tower_a/w
"""
from __future__ import annotations

import contextlib
import logging

from dslc import scope

_SEP = "/"
logger = logging.getLogger(__name__)


def _as_scope(name: str) -> str:
    return name if not name or name.endswith(_SEP) else name + _SEP


class ParameterSharingContext:
    """The stack of scope overrides in force ({scope: the scope whose parameters it uses})."""

    def __init__(self):
        self._scope_overrides: dict[str, str] = {}
        self._contexts: list[dict] = []

    def _resolve_scope_overrides(self, candidate: str) -> str:
        """The scope ``candidate`` maps to: its longest overridden prefix replaced by what
        that prefix maps to, resolved again (overrides may chain)."""
        parts = candidate.split(_SEP)
        prefix, best, best_idx = "", None, 0
        for idx, part in enumerate(parts):
            prefix += part + _SEP
            if prefix in self._scope_overrides:
                best, best_idx = self._scope_overrides[prefix], idx
        if best is None or best == candidate:
            return candidate
        return self._resolve_scope_overrides(best) + _SEP.join(parts[best_idx + 1:])

    def get_parameter_name(self, name: str) -> str:
        current = scope.CurrentNameScope()
        resolved = self._resolve_scope_overrides(current)
        if resolved != current:
            logger.info("parameter scope %s is shared with %s", current, resolved)
        return resolved + name

    def add_scope_overrides(self, shared_scopes: dict) -> None:
        self._contexts.append(shared_scopes)
        self._scope_overrides.update(shared_scopes)

    def pop(self) -> None:
        self._contexts.pop()
        self._scope_overrides = {}
        for overrides in self._contexts:
            self._scope_overrides.update(overrides)


parameter_sharing_context = ParameterSharingContext()


@contextlib.contextmanager
def ParameterSharing(shared_scopes: dict):
    """Inside the block, parameters of each key scope (relative to the current name scope)
    are those of its value scope."""
    if not isinstance(shared_scopes, dict):
        raise TypeError(f"ParameterSharing takes a dict {{scope: shared scope}}, got {type(shared_scopes).__name__}")
    current = scope.CurrentNameScope()
    overrides = {}
    for k, v in shared_scopes.items():
        if v.startswith(k):
            raise ValueError(f"cannot share scope {k!r} with {v!r}: it is a prefix of it")
        overrides[_as_scope(current + k)] = _as_scope(current + v)
    parameter_sharing_context.add_scope_overrides(overrides)
    try:
        yield
    finally:
        parameter_sharing_context.pop()
