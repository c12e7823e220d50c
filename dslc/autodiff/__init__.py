"""Gradients of recorded nets: the reverse pass over a net's op records (``gradients``),
the registry of gradient makers Caffe2 programs extend (``gradient_registry``) and the
gradient of If, which differentiates its branch nets (``control``). Each operator's own
gradient is declared beside it in the op table (``dslc.ir.ops``).
"""
from dslc.autodiff import control  # noqa: F401  (the If gradient joins the op table's gradients)
