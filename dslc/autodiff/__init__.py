"""Gradients of recorded nets: the reverse pass over a net's op records (``gradients``)
and the registry of gradient makers Caffe2 programs extend (``gradient_registry``).
Each operator's own gradient is declared beside it in the op table (``dslc.ir.ops``).
"""
