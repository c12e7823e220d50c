"""``dslc exec``: a Caffe2 script runs as it is, its caffe2 imports resolved to dslc; a real
Caffe2 next to dslc is not shadowed unless asked."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from caffe2.python import brew, core, model_helper, workspace
    from caffe2.proto import caffe2_pb2
    import caffe2.python.optimizer as optimizer
    import dslc.core

    m = model_helper.ModelHelper(name="t")
    brew.fc(m, "data", "fc", dim_in=3, dim_out=2, weight_init=("ConstantFill", {"value": 0.5}))
    workspace.FeedBlob("data", np.array([[1.0, 2.0, 3.0]], np.float32))
    workspace.RunNetOnce(m.param_init_net)
    workspace.RunNetOnce(m.net)
    assert core is dslc.core and isinstance(m.net.Proto(), caffe2_pb2.NetDef)
    print(sys.argv[1:], workspace.FetchBlob("fc").tolist())
    sys.exit(int(sys.argv[-1]))
""")


def _dslc(tmp_path, *args, env=None):
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    return subprocess.run([dslc, *map(str, args)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_caffe2_script_runs_with_its_own_arguments(tmp_path):
    """fc = [1, 2, 3] . 0.5 + 0 = 3 for both outputs; the script's exit status is dslc's."""
    (tmp_path / "train.py").write_text(SCRIPT)
    done = _dslc(tmp_path, "exec", "train.py", "--epochs", "3", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['--epochs', '3', '0'] [[3.0, 3.0]]"
    assert _dslc(tmp_path, "exec", "train.py", "4").returncode == 4


def test_a_real_caffe2_is_not_shadowed_unless_asked(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    real = tmp_path / "site" / "caffe2"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("")
    env = {"PYTHONPATH": str(tmp_path / "site")}
    done = _dslc(tmp_path, "exec", "train.py", "0", env=env)
    assert done.returncode == 2 and "a real Caffe2 is installed" in done.stderr, done.stderr
    done = _dslc(tmp_path, "exec", "--shadow", "train.py", "0", env=env)
    assert done.returncode == 0 and "[[3.0, 3.0]]" in done.stdout, done.stderr


def test_a_missing_script_is_a_user_error(tmp_path):
    done = _dslc(tmp_path, "exec", "nope.py")
    assert done.returncode == 2 and "no script 'nope.py'" in done.stderr
