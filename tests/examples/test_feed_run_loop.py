"""examples/scripts/feed_run_loop.py, the plain FeedBlob/RunNet-loop script, run as a user runs
it: ``dslc exec`` with its caffe2 imports, on interp and numba.

The real Caffe2 (torch 1.10.2's caffe2.python: ../shared/tools/caffe2-ref/run.sh
examples/scripts/feed_run_loop.py) prints for iterations 100, 150, 200 the losses 0.000042,
0.000051, 0.000057 and learns w [[2.0, -3.0]] b [0.5] (rounded to 3 places); its loss at
iteration 50 differs (0.000321) as its XavierFill draws other initial weights.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import paths

pytestmark = pytest.mark.slow

SCRIPT = paths.EXAMPLES / "scripts" / "feed_run_loop.py"


@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.numba)])
def test_the_feed_run_loop_script_learns_what_caffe2_learns(tmp_path, backend):
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    done = subprocess.run([dslc, "exec", "--backend", backend, str(SCRIPT), "--iters", "200"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:] == ["iter 100: loss 0.000042", "iter 150: loss 0.000051", "iter 200: loss 0.000057",
                         "w [[2.0, -3.0]] b [0.5]"]
