"""Caffe2's ``net_drawer``: a picture of a net's ops and blobs, as a graphviz graph. The
driver's (dslc/driver/drawing.py): ``GetPydotGraph(net)`` and the others return a
``DotGraph`` (DOT text, ``create_png()`` ...) drawn by dslc's own DOT writer."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.driver.drawing import (BLOB_STYLE, OP_STYLE, DotGraph, GetGraphPngSafe, GetPlanGraph, GetPydotGraph,
                                 GetPydotGraphMinimal, NetDrawerError)
