"""Caffe2's ``context``: ``Managed`` / ``DefaultManaged`` objects that are the current one
of their kind inside a ``with`` block, and ``define_context``. The tracer's
(dslc/trace/context.py)."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.trace.context import ContextError, DefaultManaged, Managed, define_context

__all__ = ["Managed", "DefaultManaged", "define_context", "ContextError"]
