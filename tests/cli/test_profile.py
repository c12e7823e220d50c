"""``workspace.BenchmarkNet`` with Caffe2's signature and report, and ``--profile`` (time per op
type and per op, with the user's line), through ``dslc exec`` as a user runs them."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests import paths

pytestmark = pytest.mark.slow

DSLC = os.path.join(os.path.dirname(sys.executable), "dslc")

# The real Caffe2 (torch 1.10.2, /tmp/caffe2-venv/bin/python on this script with caffe2.python
# imports) prints on stdout, for BenchmarkNet("bench", 2, 5, True):
#   Starting benchmark. / Running warmup runs. / Main runs. /
#   Main run finished. Milliseconds per iter: 37.1998. Iters per second: 26.8819
#   Operator #0 (acc, Add) 0.0062887 ms/iter ...    Time per operator type: ...   N ms in Total
# and returns [ms per iter, ms of op 0, ...] (zeros for the ops when the last argument is False).
BENCH = textwrap.dedent("""\
    import numpy as np
    from caffe2.python import core, workspace
    workspace.FeedBlob("acc", np.zeros(3, np.float32))
    workspace.FeedBlob("one", np.ones(3, np.float32))
    net = core.Net("bench")
    net.Add(["acc", "one"], "acc")
    net.Relu("acc", "r")
    workspace.CreateNet(net)
    got = workspace.BenchmarkNet("bench", 2, 5, {individual})
    print(len(got), [t > 0 for t in got], workspace.FetchBlob("acc").tolist())
    """)


@pytest.mark.parametrize("individual", [False, True])
def test_benchmark_net_runs_as_caffe2s_and_reports_as_it_does(tmp_path, individual):
    (tmp_path / "b.py").write_text(BENCH.format(individual=individual))
    done = subprocess.run([DSLC, "exec", "b.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["Starting benchmark.", "Running warmup runs.", "Main runs."]
    m = re.fullmatch(r"Main run finished. Milliseconds per iter: ([\d.e-]+). Iters per second: ([\d.e+]+)", lines[3])
    assert m and abs(float(m.group(2)) - 1000 / float(m.group(1))) <= 1e-4 * float(m.group(2))
    # 2 warmup + 5 main runs of the net; run individually, the Add op alone 2 + 5 more times
    acc = 14.0 if individual else 7.0
    if individual:
        assert re.fullmatch(r"Operator #0 \(acc, Add\) [\d.e-]+ ms/iter", lines[4])
        assert re.fullmatch(r"Operator #1 \(r, Relu\) [\d.e-]+ ms/iter", lines[5])
        assert lines[6] == "Time per operator type:" and lines[-2].endswith(" ms in Total")
        assert sorted(re.sub(r"^ *[\d.e-]+ ms\. +[\d.e-]+%\. ", "", ln) for ln in lines[7:9]) == \
            ["Add (1 ops)", "Relu (1 ops)"]
    assert lines[-1] == f"3 [True, {individual}, {individual}] [{acc}, {acc}, {acc}]"


@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.numba)])
def test_profile_counts_every_op_call_under_its_line(tmp_path, backend):
    """feed_run_loop.py --iters 20: the training net's ops run 20 times each (WeightedSum twice
    per run: weight and bias, one line), the init net's XavierFill once."""
    script = paths.EXAMPLES / "scripts" / "feed_run_loop.py"
    done = subprocess.run([DSLC, "exec", "--backend", backend, "--profile", str(script), "--iters", "20"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert re.search(r"^profile: [\d.]+ ms in \d+ op calls$", err, re.M), err
    per_op = dict((m.group(2), int(m.group(1))) for m in
                  re.finditer(r"^ +[\d.]+ +[\d.]+% +(\d+) +[\d.]+  (\w+ at \S+)$", err, re.M))
    where = "examples/scripts/feed_run_loop.py"
    if backend == "interp":
        assert per_op[f"FC at {where}:34"] == 20 and per_op[f"FCGradient at {where}:34"] == 20
        assert per_op[f"WeightedSum at {where}:38"] == 40 and per_op[f"XavierFill at {where}:34"] == 1
    else:  # (regions numba compiles count as one entry each; what it interprets, per op)
        assert per_op and all(n >= 1 for n in per_op.values())
    assert "time per op type:" in err



@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_a_profiled_region_cut_into_parts_runs(monkeypatch, backend):
    """A long region's function is cut into parts between lines (codegen.PIECE_LINES): a
    timed op call is one line, never cut between its clock reads."""
    import numpy as np

    from dslc import workspace
    from dslc.backends.interp import codegen
    from dslc.net_builder import ops
    from dslc.runtime.profile import OpProfile
    from dslc.session import LocalSession
    from dslc.task import Task, TaskGroup, final_output

    monkeypatch.setattr(codegen, "PIECE_LINES", 2)
    with TaskGroup() as tg, Task():
        y = ops.Relu("x")
        for _ in range(5):
            y = ops.Add([y, "x"])
        out = final_output(y)
    workspace.FeedBlob("x", np.array([1.0, -2.0], np.float32))
    profile = OpProfile()
    with LocalSession(backend=backend, passes="none", profile=profile) as s:
        s.run(tg)
    np.testing.assert_array_equal(out.fetch(), [6.0, -10.0])  # relu(x) + 5 x, by hand
    assert "Add" in profile.table()
