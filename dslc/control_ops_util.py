"""Caffe2's ``control_ops_util``: ``add_if_op`` / ``add_while_op`` record If and While
control ops over nets. The tracer's (dslc/trace/control_ops.py)."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.trace.control_ops import ControlOpError, add_if_op, add_while_op, get_external_blob_names
