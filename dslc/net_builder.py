"""Caffe2's ``net_builder``: ``ops`` and ``NetBuilder`` record nets, loops, conditionals and
phases as what they are. The tracer's (dslc/trace/builder_ops.py, builder_base.py,
builder_blocks.py)."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc import autodiff  # (nets recorded here can record their gradients)
from dslc.trace.builder_ops import NetBuilder, NoBuilderError, Operations, StopIf, ops

__all__ = ["NetBuilder", "NoBuilderError", "ops", "StopIf"]
