"""The real Caffe2 in the caffe2-ref venv (a development aid, absent on CI): where it is, and
running an example script on it with its imports turned back to caffe2.python."""
from __future__ import annotations

import os
import re
import subprocess

CAFFE2_PY = os.path.join(os.environ.get("TMPDIR", "/tmp"), "caffe2-venv", "bin", "python")
HAVE_CAFFE2 = os.path.exists(CAFFE2_PY)


def run_script(script, argv, tmp_path, timeout=600) -> subprocess.CompletedProcess:
    """``script`` (a dslc program) run on Caffe2, as ../shared/tools/caffe2-ref/run.sh does."""
    text = re.sub(r"\bfrom dslc\.", "from caffe2.python.", script.read_text())
    copy = tmp_path / script.name
    copy.write_text(re.sub(r"\bfrom dslc import", "from caffe2.python import", text))
    return subprocess.run([CAFFE2_PY, str(copy), *argv], capture_output=True, text=True, timeout=timeout)
