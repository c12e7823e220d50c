"""The seed's checkpointed job: a reader node, ReaderWithLimit(num_iter=3), totals per epoch.

``build_pipeline(k)`` reads the dataset 0..9 three records per epoch and adds them
to ``total = [100]``: after epoch e the total is 100 + the first 3e values, so
103, 115, 136, and in epoch 4 the last 9 (the reader then finds the data finished,
which stops the job): 145. These are the spec's expected numbers (section 8.2),
recomputed below from the data rather than copied.
"""
from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("dslc.pipeline")  # the data pipeline (issue 5) provides Dataset, pipe, ...

from dslc import core, workspace  # noqa: E402
from dslc.checkpoint import (CheckpointManager, Job, JobRunner, MultiNodeCheckpointManager,  # noqa: E402
                             UploadTaskGroupBuilder, db_name)
from dslc.dataio import ReaderWithLimit  # noqa: E402
from dslc.dataset import Dataset  # noqa: E402
from dslc.net_builder import ops  # noqa: E402
from dslc.pipeline import pipe  # noqa: E402
from dslc.schema import ConstRecord, Struct  # noqa: E402
from dslc.session import LocalSession  # noqa: E402
from dslc.task import Cluster, Node, Task, TaskGroup, WorkspaceType  # noqa: E402

DATA = list(range(10))
PER_EPOCH = 3
EXPECTED_TOTALS = [100 + sum(DATA[:PER_EPOCH * e]) for e in range(1, 5)]  # 103, 115, 136, 145


def build_pipeline(node_id, old_api=False):
    with Node(f"trainer_{node_id}"):
        with Job.current().init_group, Task():
            data = ConstRecord(ops, Struct(("val", np.array(DATA))))
            full_reader = Dataset(data, name=f"dataset:{node_id}").reader(ops)
            total = ops.Const([100])

        def inc_total(rec):
            ops.Add([total, rec.val()], [total])

        epoch_reader = ReaderWithLimit(full_reader, num_iter=PER_EPOCH)
        pipe(epoch_reader, processor=inc_total)
        stop = Job.current().add_stop_signal if old_api else Job.current().add_stop_condition
        stop(epoch_reader.data_finished())
    return [total]


def run(runner, session, old_api):
    return runner(session) if old_api else runner.train(session)


def fresh():
    ws = workspace.C.Workspace()
    return ws, LocalSession(ws)


@pytest.mark.parametrize("old_api", [False, True])
@pytest.mark.parametrize("which", ["single", "multi-minidb", "multi-lmdb"])
def test_run_resume_and_load_give_the_expected_totals(tmp_path, which, old_api):
    def manager():
        if which == "single":
            return CheckpointManager(str(tmp_path), "temp_node", "minidb")
        return MultiNodeCheckpointManager(str(tmp_path), which.split("-")[1])

    with Cluster():
        with Job() as job:
            outputs = build_pipeline(0, old_api)
        fetcher = Task(step=core.Net("empty"), outputs=outputs)

        def total(session):
            session.run(fetcher)
            return fetcher.outputs()[0].fetch().tolist()

        job = job.compile(LocalSession)
        ws, session = fresh()
        assert run(JobRunner(job, manager()), session, old_api) == len(EXPECTED_TOTALS)
        assert total(session) == [EXPECTED_TOTALS[-1]]
        node = "temp_node" if which == "single" else "trainer_0"
        assert sorted(os.listdir(tmp_path)) == [f"{node}.{e}" for e in range(5)]
        for start in range(1, 5):
            ws, session = fresh()
            last = run(JobRunner(job, manager(), resume_from_epoch=start), session, old_api)
            assert last == (5 if start == 4 else 4)  # resuming from the last epoch runs an empty one
            assert total(session) == [EXPECTED_TOTALS[-1]]
        m = manager()
        session.run(m.init(job.nodes_to_checkpoint(), retrieve_from_epoch=4))
        for e in range(1, 5):
            session.run(m.load(e))
            assert total(session) == [EXPECTED_TOTALS[e - 1]]


def test_blob_counts_names_and_partial_loads(tmp_path):
    prefix = str(tmp_path)
    # (a) names: the three nodes' managers
    manager = MultiNodeCheckpointManager(prefix, "minidb")
    with Cluster():
        with Job() as job:
            for k in range(3):
                build_pipeline(k)
        job.compile(LocalSession)
        manager.init(job.nodes_to_checkpoint())
        for k in range(3):
            assert manager.get_ckpt_db_name(f"trainer_{k}", 5) == f"{prefix}/trainer_{k}.5"
    # (b) one run per node; the spec's counts: 17 root blobs with the new API, 12 with the old
    for k in range(3):
        for old_api, count in ((False, 17), (True, 12)):
            ws, session = fresh()
            with Cluster():
                with Job() as job:
                    build_pipeline(k, old_api)
                job.compile(LocalSession)
                d = os.path.join(prefix, "old" if old_api else "")
                os.makedirs(d, exist_ok=True)
                assert run(JobRunner(job, MultiNodeCheckpointManager(d, "minidb")), session, old_api) == 4
            assert len(ws.blobs) == count, sorted(ws.blobs)
    # (c) the totals of nodes 1 and 2, by the names the spec derives, into a fresh workspace
    model_blobs = ["trainer_1/task_2/GivenTensorInt64Fill:0", "trainer_2/task_2/GivenTensorInt64Fill:0"]
    ws, session = fresh()
    assert len(ws.blobs) == 0
    with Cluster():
        with Job() as job:
            for k in range(3):
                build_pipeline(k)
        job.compile(LocalSession)
        runner = JobRunner(job, MultiNodeCheckpointManager(prefix, "minidb"))
        for e in range(1, 5):
            assert runner.load_blobs_from_checkpoints(model_blobs, e, session) is True
            for name in model_blobs:
                assert ws.has_blob(name)
                assert ws.fetch_blob(name).tolist() == [EXPECTED_TOTALS[e - 1]]
        assert runner.load_blobs_from_checkpoints(model_blobs, 5, session) is False


def test_upload_and_save_failures(tmp_path, caplog):
    upload = tmp_path / "upload"
    upload.mkdir()

    class UploadToLocalFile(UploadTaskGroupBuilder):
        def build(self, epoch, manager):
            with TaskGroup(WorkspaceType.GLOBAL) as group:
                for node, m in manager._node_managers:
                    with Node(str(node)), Task():
                        src, dest = db_name(epoch, m._node_name, m._db_prefix), str(upload / str(node))
                        ops.Python(lambda i, o, src=src, dest=dest: shutil.copyfile(src, dest))([], [])
            return group

    for k in range(3):
        assert not (upload / f"trainer_{k}").exists()
        ws, session = fresh()
        with Cluster():
            with Job() as job:
                build_pipeline(k)
            job.compile(LocalSession)
            assert JobRunner(job, MultiNodeCheckpointManager(str(tmp_path), "minidb"),
                             upload_task_group_builder=UploadToLocalFile()).train(session) == 4
        assert (upload / f"trainer_{k}").exists()
    missing = str(tmp_path / "path_does_not_exist")
    for k in range(3):
        ws, session = fresh()
        with Cluster(), caplog.at_level(logging.INFO, logger="dslc.checkpoint"):
            with Job() as job:
                build_pipeline(k)
            job.compile(LocalSession)
            assert JobRunner(job, MultiNodeCheckpointManager(missing, "minidb")).train(session) == 4
    failed = [r for r in caplog.records if "was not saved" in r.getMessage()]
    assert len(failed) == 3 * 5  # every save of every run, but one warning per run
    assert sum(r.levelno == logging.WARNING for r in failed) == 3


def test_reuse_a_checkpoint_manager(tmp_path):
    ws, session = fresh()
    manager = MultiNodeCheckpointManager(str(tmp_path), "lmdb")
    with Job() as job:
        outputs = build_pipeline(0)
    fetcher = Task(step=core.Net("empty"), outputs=outputs)
    job.compile(LocalSession)
    assert JobRunner(job, manager).train(session) == 4
    for start in range(1, 5):
        JobRunner(job, manager, resume_from_epoch=start).train(session)
        session.run(fetcher)
        assert fetcher.outputs()[0].fetch().tolist() == [EXPECTED_TOTALS[-1]]


SEED_JOB = '''
import numpy as np
from dslc import core
from dslc.checkpoint import Job
from dslc.dataio import ReaderWithLimit
from dslc.dataset import Dataset
from dslc.pipeline import pipe
from dslc.schema import ConstRecord, Struct
from dslc.task import Node, Task


def build_job():
    with Node("reader"):
        with Job() as job:
            with job.init_group:
                init_net = core.Net("init_net")
                data = ConstRecord(init_net, Struct(("val", np.array(range(10)))))
                full_reader = Dataset(data).reader(init_net)
                total = init_net.Const([100])
                Task(step=init_net)

            def inc_total(rec):
                net = core.Net("inc_total")
                net.Add([total, rec.val()], [total])
                return [net]

            epoch_reader = ReaderWithLimit(full_reader, num_iter=3)
            pipe(epoch_reader, processor=inc_total)
            job.add_stop_signal(epoch_reader.data_finished())
        total_fetcher = Task(step=core.Net("empty"), outputs=[total])
    return job, total_fetcher
'''


def test_the_seed_build_job_runs_from_the_command_line(tmp_path, capsys):
    import json

    from dslc.driver import cli
    path = tmp_path / "job.py"
    path.write_text(SEED_JOB)
    assert cli.main(["run", str(path), "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["outputs"].values()) == [[EXPECTED_TOTALS[-1]]]
