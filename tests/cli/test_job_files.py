"""Job files whose build_job() returns a Job (and a fetcher Task): ``dslc run`` runs the
Job under a JobRunner, epoch by epoch, then the fetcher, and prints its outputs."""
from __future__ import annotations

import json
import textwrap

from dslc.driver import cli

JOB = textwrap.dedent("""
    import numpy as np
    from dslc import core
    from dslc.checkpoint import Job, epoch_limiter
    from dslc.net_builder import ops
    from dslc.task import Node, Task


    def build_job():
        with Node("reader"):
            with Job() as job:
                with job.init_group:
                    init_net = core.Net("init_net")
                    total = init_net.Const([100], blob_out="total")
                    Task(step=init_net)
                with Task():
                    ops.Add([total, ops.Const(np.array([5]))], [total])
                epoch_limiter(job, {epochs})
            total_fetcher = Task(step=core.Net("empty"), outputs=[total])
        return job, total_fetcher
""")


def test_a_job_runs_epoch_by_epoch_then_its_fetcher(tmp_path, capsys):
    for epochs in (1, 3):
        path = tmp_path / f"job{epochs}.py"
        path.write_text(JOB.format(epochs=epochs))
        assert cli.main(["run", str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["outputs"] == {"total": [100 + 5 * epochs]}


def test_a_job_without_a_stop_condition_is_a_located_error(tmp_path, capsys):
    path = tmp_path / "job.py"
    path.write_text(JOB.format(epochs=1).replace("epoch_limiter(job, 1)", "pass"))
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "stop condition" in err and "epoch_limiter" in err
