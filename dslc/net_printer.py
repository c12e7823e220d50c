"""Caffe2's ``net_printer``: a job as text (``to_string``), a check of its blob definitions
(``analyze``, raising ``AnalysisError``), a logging net (``debug_net``). The driver's
(dslc/driver/printing.py), over the text backend's plan."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.driver.printing import AnalysisError, analyze, debug_net, to_string

__all__ = ["AnalysisError", "analyze", "debug_net", "to_string"]
