"""``dslc exec``: a Caffe2 script runs as it is, its caffe2 imports resolved to dslc; a real
Caffe2 next to dslc is not shadowed unless asked."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # (the README's inner loop skips it: each script runs in a fresh process)

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


def _dslc(tmp_path, *args, env=None, timeout=300):
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    return subprocess.run([dslc, *map(str, args)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
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


POOL = textwrap.dedent("""
    import multiprocessing as mp
    import sys
    import numpy as np
    from caffe2.python import core, workspace
    import helper  # (a module next to the script)


    def work(k):
        import caffe2.python.workspace as ws
        import dslc.workspace
        ws.FeedBlob("x", np.array([k, k + 1], np.float32))
        ws.RunOperatorOnce(core.CreateOperator("Scale", ["x"], ["y"], scale=helper.SCALE))
        return ws.FetchBlob("y").tolist(), ws is dslc.workspace and workspace is dslc.workspace


    def nested(q):  # (a child's own children: the aliases hold there too)
        with mp.get_context(sys.argv[1]).Pool(1) as pool:
            q.put(pool.apply(work, (5,)))


    if __name__ == "__main__":
        ctx = mp.get_context(sys.argv[1])
        with ctx.Pool(1) as pool:
            print(pool.map(work, [1, 2]))
        q = ctx.Queue()
        p = ctx.Process(target=nested, args=(q,))
        p.start()
        print(q.get(timeout=100))
        p.join()
""")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_children_see_the_aliases_and_the_scripts_modules(tmp_path, method):
    """Issue 38: a spawn or forkserver pool under dslc exec hung (its children could not
    import caffe2 and were restarted forever). x * 3 for x = [k, k + 1], by hand."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    (tmp_path / "train.py").write_text(POOL)
    (tmp_path / "helper.py").write_text("SCALE = 3.0\n")
    done = _dslc(tmp_path, "exec", "train.py", method, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[([3.0, 6.0], True), ([6.0, 9.0], True)]", "([15.0, 18.0], True)"]


def test_an_exception_in_the_script_is_the_scripts_traceback_not_an_internal_error(tmp_path):
    (tmp_path / "train.py").write_text("from caffe2.python import core\n\n\ndef f():\n    raise KeyError('x')\n\n\nf()\n")
    done = _dslc(tmp_path, "exec", "train.py")
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    assert done.stderr.startswith("Traceback") and 'train.py", line 5, in f' in done.stderr
    assert done.stderr.strip().endswith("KeyError: 'x'") and "runpy" not in done.stderr
