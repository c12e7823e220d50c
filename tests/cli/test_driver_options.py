"""One set of driver options for ``dslc run``, ``compile`` and ``exec``: options before the
script are dslc's, everything after it the script's; the implicit sessions behind
``workspace.RunNet`` honour them (backend, passes, dump directory, pass timing)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests import paths

pytestmark = pytest.mark.slow  # (each case runs dslc in a fresh process)

DSLC = os.path.join(os.path.dirname(sys.executable), "dslc")

SCRIPT = textwrap.dedent("""\
    import sys
    import numpy as np
    from caffe2.python import core, workspace
    import dslc.driver.runner

    workspace.FeedBlob("x", np.ones(4, np.float32))
    net = core.Net("loop")
    net.Scale("x", "y", scale=2.0)
    net.Add(["y", "x"], "z")
    workspace.CreateNet(net)
    for _ in range(3):
        workspace.RunNet(net.Name())
    other = core.Net("other")
    other.Mul(["z", "z"], "w")
    workspace.RunNetOnce(other)
    session = dslc.driver.runner.current().session()
    print(sys.argv[1:], type(session.backend).__name__, session.passes != [], workspace.FetchBlob("w").tolist())
    """)


def _dslc(tmp_path, *argv, env=None):
    return subprocess.run([DSLC, *map(str, argv)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_options_before_the_script_are_dslcs_and_after_it_the_scripts(tmp_path):
    """w = (2x + x)^2 = 9 for x = 1; the flags after the script reach it untouched."""
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _dslc(tmp_path, "exec", "--backend", "numba", "-O", "s.py", "--backend", "interp")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['--backend', 'interp'] NumbaBackend True [9.0, 9.0, 9.0, 9.0]"
    plain = _dslc(tmp_path, "exec", "--passes", "none", "s.py", env={"DSLC_BACKEND": "interp"})
    assert plain.stdout.strip() == "[] InterpBackend False [9.0, 9.0, 9.0, 9.0]", plain.stderr


def test_dslc_backend_picks_the_backend_of_exec_and_a_bad_one_is_named(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _dslc(tmp_path, "exec", "s.py", env={"DSLC_BACKEND": "numba"})
    assert done.returncode == 0 and "NumbaBackend" in done.stdout, done.stderr
    bad = _dslc(tmp_path, "exec", "s.py", env={"DSLC_BACKEND": "nope"})
    assert bad.returncode == 2 and bad.stderr.startswith("error: DSLC_BACKEND='nope': unknown backend 'nope'")
    assert bad.stdout == ""  # (refused before the script ran)


def test_the_dump_directory_holds_what_every_implicit_session_compiled(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = _dslc(tmp_path, "exec", "--dump-dir", "dump", "s.py")
    assert done.returncode == 0, done.stderr
    files = sorted(os.listdir(tmp_path / "dump"))
    assert [f.split("-", 1)[0] for f in files] == ["001", "001", "002", "002"]
    first, second = (tmp_path / "dump" / files[0]).read_text(), (tmp_path / "dump" / files[2]).read_text()
    assert "Scale" in first and "Add" in first and "Mul" not in first and "Mul" in second
    assert "y = Scale(x, scale=2" in (tmp_path / "dump" / files[1]).read_text()  # (the plan)


def _timing_rows(stderr: str) -> tuple[int, dict, float]:
    runs = int(re.search(r"pass timing: (\d+) pipeline runs?", stderr).group(1))
    rows = dict((m.group(3), (float(m.group(1)), int(m.group(2)))) for m in
                re.finditer(r"^ +([\d.]+) +[\d.]+% +(\d+)  (\S+)$", stderr, re.M))
    total = float(re.search(r"^ +([\d.]+) +100\.0% +total$", stderr, re.M).group(1))
    return runs, rows, total


def test_time_passes_sums_every_modules_pipeline(tmp_path):
    """examples/train_mlp.py compiles 5 modules (its init, each-epoch and exit groups...): each
    pass ran 5 times, and the total is the rows' sum (it was the last module's alone, 0.0001 s,
    printed as 0.0000 per row)."""
    done = _dslc(tmp_path, "run", "-O", "--time-passes", paths.EXAMPLES / "train_mlp.py")
    assert done.returncode == 0, done.stderr
    runs, rows, total = _timing_rows(done.stderr)
    assert "time (ms)" in done.stderr and runs >= 2
    assert all(n == runs for _, n in rows.values()) and "dce" in rows
    assert abs(sum(t for t, _ in rows.values()) - total) < 0.01 * len(rows)
    assert sum(1 for t, _ in rows.values() if t > 0) >= len(rows) - 1  # (no column of zeros)
    done = _dslc(tmp_path, "exec", "-O", "--time-passes", paths.EXAMPLES / "scripts" / "feed_run_loop.py")
    assert done.returncode == 0, done.stderr
    assert _timing_rows(done.stderr)[0] >= 2


def test_run_offers_only_backends_that_run(tmp_path):
    helped = _dslc(tmp_path, "run", "--help")
    assert "{interp,numba" in helped.stdout and "text" not in helped.stdout.split("--json")[0]
    refused = _dslc(tmp_path, "run", "--backend", "text", paths.EXAMPLES / "loops.py")
    assert refused.returncode == 2 and "invalid choice: 'text'" in refused.stderr
    assert _dslc(tmp_path, "compile", "--backend", "text", paths.EXAMPLES / "loops.py").returncode == 0
