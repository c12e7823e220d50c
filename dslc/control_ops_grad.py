"""Caffe2's ``control_ops_grad``: gradients through control-flow ops. dslc's autodiff
(dslc/autodiff/control.py) declares the If gradient; this module keeps Caffe2's name."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.autodiff.control import disambiguate_grad_if_op_output
