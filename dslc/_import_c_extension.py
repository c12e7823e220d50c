"""Caffe2's C extension module, as far as Python code reaches into it: dslc has no C++
runtime, so this is the workspace module's ``C`` namespace, plus the cuDNN algorithm
counts. Caffe2's CPU build reports cuDNN's own counts (8, 6, 7: read off the real Caffe2's
``_import_c_extension``); op tests draw ``force_algo_*`` arguments from them, which a CPU
Conv ignores, as ours does."""
from __future__ import annotations

from dslc.workspace import C

Workspace = C.Workspace
registered_dbs = C.registered_dbs
has_mkldnn = C.has_mkldnn
use_mkldnn = C.use_mkldnn
cudnn_convolution_fwd_algo_count = 8
cudnn_convolution_bwd_data_algo_count = 6
cudnn_convolution_bwd_filter_algo_count = 7
