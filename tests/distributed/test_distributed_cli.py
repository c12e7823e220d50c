"""``dslc run JOB.py --cluster ...``: the same job file on a Ray cluster."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dslc.driver import cli

pytest.importorskip("ray")

JOB = '''
from dslc.net_builder import ops
from dslc.task import Node, Task, final_output


def build_job():
    outs = {}
    for node, n in (("a", 10), ("b", 100)):
        with Node(node), Task():
            total = ops.Const(0)
            with ops.loop(n) as loop:
                ops.Add([total, loop.iter()], [total])
            outs[node] = final_output(total)
    return outs
'''


def test_run_on_the_cluster_prints_the_local_outputs(ray_cluster, tmp_path, capsys, backend):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    assert cli.main(["run", str(job), "--cluster", "auto", "--backend", backend, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": {"a": 45, "b": 4950}}  # n(n-1)/2


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path, capsys):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    assert cli.main(["run", str(job), "--cluster", "ray://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Ray cluster at 'ray://127.0.0.1:1'" in err[0]


WAITING_JOB = '''
import os
import time
from dslc.net_builder import ops
from dslc.task import Node, Task


def wait(inputs, outputs):
    open(os.environ["DSLC_TEST_MARKER"], "w").write(str(os.getpid()))
    time.sleep(300)


def build_job():
    with Node("a"), Task():
        ops.Python(wait)([], [])
'''


def _tree(pid):
    from dslc.backends.ray.cluster import descendants
    return descendants([pid]) - {pid}


def _terminal_sigint():
    """In the child, before it runs dslc: SIGINT with its default action, not blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


@pytest.mark.slow_cluster
def test_ctrl_c_stops_the_run_and_leaves_no_ray_process(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(WAITING_JOB)
    marker = tmp_path / "running"
    env = dict(os.environ, DSLC_TEST_MARKER=str(marker), HOME=str(tmp_path))
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    # (the runner's threads may leave SIGINT ignored or blocked, which a child inherits; a
    # process started from a terminal gets it with its default action)
    parent = f"the test runner's SIGINT: {signal.getsignal(signal.SIGINT)}, " \
             f"blocked: {signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}"
    proc = subprocess.Popen([dslc, "run", str(job), "--cluster", "ray"], env=env, preexec_fn=_terminal_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=60)
        time.sleep(0.2)
        started = _tree(proc.pid)  # the cluster's daemons and the node's worker, all below dslc
        assert int(marker.read_text()) in started
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"dslc run went on 120 s after Ctrl-C ({parent}); its stdout:\n{out}\nits stderr:\n{err}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    time.sleep(0.5)
    left = [p for p in started if os.path.exists(f"/proc/{p}") and
            open(f"/proc/{p}/stat").read().split(")")[-1].split()[0] != "Z"]
    assert left == []
