"""Job, the checkpoint managers and JobRunner, on small jobs made of counters and Adds.

The job used most: the init group sets ``total = [100]`` and an epoch counter; each
epoch adds 3 to ``total`` and stops once the counter (counted up once per epoch,
from 0) has reached 3. So a run from scratch does epochs 1..4, and after epoch e
``total`` is 100 + 3e. Every expected number below comes from that rule.
"""
from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

from dslc import core, workspace
from dslc.runtime import blobdb
from dslc.checkpoint import (BLOB_NAMES, CheckpointManager, Job, JobRunner, MultiNodeCheckpointManager,
                             SnapshotManager, UploadTaskGroupBuilder, db_name, epoch_limiter,
                             get_ckpt_filename)
from dslc.ir.diagnostics import DSLError, ExecutionError, TraceError
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Cluster, Node, Task, TaskGroup, WorkspaceType

EPOCHS = 4


def total_after(epoch: int) -> int:
    return 100 + 3 * epoch


def build_counting(node_id=0):
    """The job described in the module docstring, on node ``trainer_<node_id>``; returns ``total``."""
    with Node(f"trainer_{node_id}"):
        with Job.current().init_group, Task():
            total = ops.Const(np.array([100]))
            counter = ops.CreateCounter([], init_count=0)
        with Task():
            done = ops.CountUp(counter)
            ops.Add([total, ops.Const(np.array([3]))], [total])
            stop = ops.GE([done, ops.Const(np.int64(EPOCHS - 1))])
        Job.current().add_stop_condition(stop)
    return total


def make_job(nodes=(0,)):
    with Job() as job:
        totals = [build_counting(n) for n in nodes]
    fetcher = Task(step=core.Net("empty"), outputs=totals)
    job.compile(LocalSession)
    return job, fetcher


def fetch(session, fetcher):
    session.run(fetcher)
    return [int(o.fetch()[0]) for o in fetcher.outputs()]


def fresh_session():
    ws = workspace.C.Workspace()
    return ws, LocalSession(ws)


MANAGERS = {
    "single-dslcdb": lambda d: CheckpointManager(d, "temp_node", "dslcdb"),
    "single-minidb": lambda d: CheckpointManager(d, "temp_node", "minidb"),
    "multi-minidb": lambda d: MultiNodeCheckpointManager(d, "minidb"),
    "multi-lmdb": lambda d: MultiNodeCheckpointManager(d, "lmdb"),
}


@pytest.fixture(params=sorted(MANAGERS))
def make_manager(request, tmp_path):
    return lambda: MANAGERS[request.param](str(tmp_path))


@pytest.mark.parametrize("api", ["train", "call"])
def test_run_resume_from_every_epoch_and_load_each_checkpoint(make_manager, tmp_path, api):
    run = (lambda runner, s: runner.train(s)) if api == "train" else (lambda runner, s: runner(s))
    with Cluster():
        job, fetcher = make_job()
        ws, session = fresh_session()
        assert run(JobRunner(job, make_manager()), session) == EPOCHS
        assert fetch(session, fetcher) == [total_after(EPOCHS)]
        node = "temp_node" if os.path.exists(tmp_path / "temp_node.0") else "trainer_0"
        for e in range(EPOCHS + 1):
            assert os.path.exists(tmp_path / f"{node}.{e}")
        for start in range(EPOCHS + 1):
            ws, session = fresh_session()
            last = run(JobRunner(job, make_manager(), resume_from_epoch=start), session)
            # resuming from the last epoch runs one more (whose stop condition is true again)
            assert last == max(EPOCHS, start + 1)
            assert fetch(session, fetcher) == [total_after(last)]
        manager = make_manager()
        session.run(manager.init(job.nodes_to_checkpoint(), retrieve_from_epoch=EPOCHS))
        for e in range(EPOCHS + 1):
            session.run(manager.load(e))
            assert fetch(session, fetcher) == [total_after(e)]


def test_blob_counts_of_the_old_and_new_api(tmp_path):
    # Root blobs after a run: total, the counter, the init task's dummy output and blob_names (4);
    # the stop condition's export and the epoch task's dummy output (2); per save (epochs 0..4):
    # the old API's plain Task has one dummy output, the new API's timed Task a timer and its duration.
    for api, per_save in (("call", 1), ("train", 2)):
        with Cluster():
            job, _ = make_job()
            ws, session = fresh_session()
            runner = JobRunner(job, MultiNodeCheckpointManager(str(tmp_path / api), "minidb"))
            os.mkdir(tmp_path / api)
            assert (runner(session) if api == "call" else runner.train(session)) == EPOCHS
            assert len(ws.blobs) == 4 + 2 + per_save * (EPOCHS + 1), sorted(ws.blobs)
            assert BLOB_NAMES in ws.blobs


def test_only_the_blobs_there_after_the_init_group_are_checkpointed(tmp_path):
    with Cluster():
        job, _ = make_job()
        ws, session = fresh_session()
        JobRunner(job, CheckpointManager(str(tmp_path), "n", "minidb")).train(session)
        after_init = {"blob_names", "trainer_0/task:output/ConstantFill:0"}
        saved = set(blobdb.get("minidb").keys(str(tmp_path / "n.3")))
        assert len(saved) == 4 and after_init <= saved
        assert not any("checkpoint_save" in n or n.endswith("/GE") for n in saved)


def test_reuse_a_multi_node_manager_in_one_session(tmp_path):
    with Cluster():
        job, fetcher = make_job()
        ws, session = fresh_session()
        manager = MultiNodeCheckpointManager(str(tmp_path), "minidb")
        assert JobRunner(job, manager).train(session) == EPOCHS
        for start in range(1, EPOCHS):
            assert JobRunner(job, manager, resume_from_epoch=start).train(session) == EPOCHS
            assert fetch(session, fetcher) == [total_after(EPOCHS)]
        assert manager.init(job.nodes_to_checkpoint()).tasks() == []   # the lists are reused
        with pytest.raises(TraceError, match="checkpoints nodes"):
            manager.init(["some_other_node"])


def test_multi_node_names_and_partial_loads(tmp_path):
    prefix = str(tmp_path)
    with Cluster():
        job, _ = make_job(nodes=(0, 1, 2))
        manager = MultiNodeCheckpointManager(prefix, "minidb")
        manager.init(job.nodes_to_checkpoint())
        for k in range(3):
            assert manager.get_ckpt_db_name(f"trainer_{k}", 5) == f"{prefix}/trainer_{k}.5"
        assert manager.get_ckpt_db_name("nobody", 5) is None
    # one run per node, each in its own job and workspace, all into one directory
    for k in range(3):
        with Cluster():
            with Job() as job:
                total = build_counting(k)
            job.compile(LocalSession)
            ws, session = fresh_session()
            assert JobRunner(job, MultiNodeCheckpointManager(prefix, "minidb")).train(session) == EPOCHS
    names = [str(total).replace("trainer_2", f"trainer_{k}") for k in (1, 2)]
    with Cluster():
        job, _ = make_job(nodes=(0, 1, 2))
        ws, session = fresh_session()
        assert len(ws.blobs) == 0
        runner = JobRunner(job, MultiNodeCheckpointManager(prefix, "minidb"))
        for e in range(1, EPOCHS + 1):
            assert runner.load_blobs_from_checkpoints(names, e, session) is True
            for n in names:
                assert ws.fetch_blob(n).tolist() == [total_after(e)]
        assert runner.load_blobs_from_checkpoints(names, EPOCHS + 1, session) is False


def test_a_failing_save_does_not_stop_the_job(tmp_path, caplog):
    missing = str(tmp_path / "no" / "such" / "dir")
    with Cluster():
        job, fetcher = make_job()
        ws, session = fresh_session()
        with caplog.at_level(logging.INFO, logger="dslc.checkpoint"):
            assert JobRunner(job, MultiNodeCheckpointManager(missing, "minidb")).train(session) == EPOCHS
        assert fetch(session, fetcher) == [total_after(EPOCHS)]
        failed = [r for r in caplog.records if "was not saved" in r.getMessage()]
        assert len(failed) == EPOCHS + 1 and missing in failed[0].getMessage()
        # one warning (the first epoch's), the others only logged
        assert [r.levelno for r in failed] == [logging.WARNING] + [logging.INFO] * EPOCHS


def test_resuming_from_a_missing_epoch_is_a_clear_error(tmp_path):
    with Cluster():
        job, _ = make_job()
        ws, session = fresh_session()
        with pytest.raises(ExecutionError) as info:
            JobRunner(job, CheckpointManager(str(tmp_path), "n", "minidb"), resume_from_epoch=7).train(session)
        assert str(tmp_path / "n.7") in info.value.message and "no checkpoint" in info.value.message
        assert info.value.hint and info.value.loc is not None and info.value.loc.file.endswith("test_checkpoint.py")


def test_an_unknown_db_type_is_refused_when_the_manager_is_made(tmp_path):
    for make in (lambda: CheckpointManager(str(tmp_path), "n", "rocksdb"),
                 lambda: MultiNodeCheckpointManager(str(tmp_path), "rocksdb")):
        with pytest.raises(blobdb.DBTypeError) as info:
            make()
        assert "rocksdb" in info.value.message and "lmdb" in info.value.hint
        assert info.value.loc.file.endswith("test_checkpoint.py")


def test_resuming_with_another_db_type_than_saved_says_so(tmp_path):
    with Cluster():
        job, _ = make_job()
        ws, session = fresh_session()
        JobRunner(job, CheckpointManager(str(tmp_path), "n", "minidb")).train(session)
        ws, session = fresh_session()
        with pytest.raises(ExecutionError) as info:
            JobRunner(job, CheckpointManager(str(tmp_path), "n", "lmdb"), resume_from_epoch=2).train(session)
        assert "db_type='minidb'" in info.value.message


def test_epoch_limiter_and_the_download_group():
    with Job() as job:
        with Node("trainer:0"):
            with job.init_group:
                init = core.Net("init")
                for name in ("input1", "input2", "output", "download_result"):
                    init.ConstantFill([], [name], shape=[8], value=1.0)
                Task(step=init)
            with Task():
                with ops.loop(1):
                    ops.Add(["input1", "input2"], ["output"])
                    ops.Add(["input1", "output"], ["input1"])
            with job.download_group:
                download = core.Net("download")
                download.Copy(["output"], ["download_result"])
                Task(step=download)
            epoch_limiter(job, 3)
    ws, session = fresh_session()
    assert JobRunner(job).train(session) == 3
    # input1: 1, then 1+2=3, 3+4=7 ...; output = input1 + 1 after each epoch: 2, 4, 8
    assert ws.fetch_blob("output").tolist() == [8.0] * 8
    assert ws.fetch_blob("download_result").tolist() == [8.0] * 8
    assert ws.fetch_blob("download_result").dtype == np.float32


def test_job_contexts_and_both_api_spellings():
    with Job() as job:
        assert Job.current() is job
        t = Task()
        job.add_stop_signal(ops_free_blob := core.BlobReference("flag"))
        assert job.stop_signals is job.stop_conditions and len(job.stop_conditions) == 1
        assert job.stop_conditions[0].names == [ops_free_blob]
    assert t in job.epoch_group._tasks_to_add
    assert Job.current(required=False) is None
    assert job.compile(LocalSession) is job
    with pytest.raises(TraceError) as info:
        job.add_stop_condition(42)
    assert info.value.hint


def test_a_job_without_a_stop_condition_is_refused():
    with Job() as job:
        Task(step=core.Net("nothing"))
    with pytest.raises(TraceError, match="stop condition") as info:
        JobRunner(job).train(LocalSession(workspace.C.Workspace()))
    assert "epoch_limiter" in info.value.hint


class Handler:
    """A metadata handler that records what it is told; resumes from ``resume``."""

    def __init__(self, resume=None, accessible=True):
        self.calls, self.resume, self.accessible = [], resume, accessible

    def set_params(self, **kw):
        self.calls.append(("set_params", kw["node_names"]))

    def write(self, epoch):
        self.calls.append(("write", epoch))

    def report(self, action, stats):
        self.calls.append(("report", action, stats))

    def last_epoch(self, user_epoch=None):
        return self.resume if user_epoch is None else user_epoch

    def cp_accessible(self, epoch=None):
        return self.accessible


def test_metadata_handler_hooks_and_durations(tmp_path):
    with Cluster():
        job, fetcher = make_job()
        handler = Handler()
        ws, session = fresh_session()
        JobRunner(job, MultiNodeCheckpointManager(str(tmp_path), "minidb", handler)).train(session)
        assert handler.calls[0] == ("set_params", ["trainer_0"])
        assert [c[1] for c in handler.calls if c[0] == "write"] == list(range(EPOCHS + 1))
        reports = [c for c in handler.calls if c[0] == "report"]
        assert [r[1] for r in reports] == ["checkpoint_save"] * (EPOCHS + 1)
        for e, (_, _, stats) in enumerate(reports):
            (name, ns), = stats.items()
            assert name == str(tmp_path / f"trainer_0.{e}") and ns > 0
        # the handler picks the epoch to resume from, and may say the checkpoints are out of reach
        resumed = Handler(resume=2, accessible=False)
        ws, session = fresh_session()
        assert JobRunner(job, MultiNodeCheckpointManager(str(tmp_path), "minidb", resumed)).train(session) == EPOCHS
        assert fetch(session, fetcher) == [total_after(EPOCHS)]
        assert [c[1] for c in resumed.calls if c[0] == "report"] == ["checkpoint_load"]
        assert not any(c[0] == "write" for c in resumed.calls)


def test_upload_builder_runs_once_after_the_last_epoch(tmp_path):
    upload = tmp_path / "upload"
    upload.mkdir()

    class CopyOut(UploadTaskGroupBuilder):
        def build(self, epoch, manager):
            with TaskGroup(WorkspaceType.GLOBAL) as group:
                for node, m in manager._node_managers:
                    src = db_name(epoch, m._node_name, m._db_prefix)
                    with Node(str(node)), Task():
                        ops.Python(lambda i, o, src=src, node=node: shutil.copyfile(src, upload / str(node)))([], [])
            return group

    with Cluster():
        job, _ = make_job()
        ws, session = fresh_session()
        JobRunner(job, MultiNodeCheckpointManager(str(tmp_path), "minidb"),
                  upload_task_group_builder=CopyOut()).train(session)
    copied = blobdb.get("minidb").read(str(upload / "trainer_0"))
    assert copied[f"{BLOB_NAMES}"].size == 4
    with pytest.raises(NotImplementedError):
        UploadTaskGroupBuilder().build(1, None)


def test_db_names():
    assert get_ckpt_filename("trainer_0", 5) == "trainer_0.5"
    assert db_name(5, "trainer_0", "/ck") == "/ck/trainer_0.5"
    assert db_name(5, "trainer_0", "/ck", path_prefix="hdfs://x/") == "hdfs://x/trainer_0.5"
    assert CheckpointManager("/ck", "n", "minidb")._db_name(3) == "/ck/n.3"
    snap = SnapshotManager("/ck", "n", "minidb")
    assert snap._db_name(3) == snap._dbname(3) == "/ck/n.snapshot.3"


def test_snapshot_manager_has_the_same_contract(tmp_path):
    with Cluster():
        job, fetcher = make_job()
        ws, session = fresh_session()
        assert JobRunner(job, SnapshotManager(str(tmp_path), "n", "lmdb"))(session) == EPOCHS
        assert sorted(os.listdir(tmp_path)) == [f"n.snapshot.{e}" for e in range(EPOCHS + 1)]
        ws, session = fresh_session()
        JobRunner(job, SnapshotManager(str(tmp_path), "n", "lmdb"), resume_from_epoch=1)(session)
        assert fetch(session, fetcher) == [total_after(EPOCHS)]


def test_blob_list_before_init_ran_is_a_clear_error():
    m = CheckpointManager("/ck", "n", "minidb")
    with pytest.raises(DSLError) as info:
        m.save(1)
    assert "init" in info.value.hint
    with pytest.raises(TraceError, match="one node"):
        m.init(nodes=["a", "b"])


HOLD_LOCK = """
import sys, time
from dslc.checkpoint import CheckpointManager
locks = CheckpointManager(sys.argv[1], sys.argv[2], "minidb").lock_checkpoints()  # (as a runner does)
print("locked", flush=True)
time.sleep(60)
"""


def _other_runner(directory, node: str):
    import subprocess
    import sys
    other = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(directory), node], stdout=subprocess.PIPE,
                             text=True)
    assert other.stdout.readline().strip() == "locked"
    partial = directory / f"{node}.3.tmp-{other.pid}-0123abcd"  # the other runner's save in progress
    partial.write_bytes(b"DSLCDB2\n")
    return other, partial


@pytest.mark.parametrize("make_manager", [lambda d: CheckpointManager(d, "trainer_0", "minidb"),
                                          lambda d: MultiNodeCheckpointManager(d, "minidb")])
def test_a_second_runner_on_the_same_checkpoints_is_refused(tmp_path, make_manager):
    # issue 23: a runner removes the unfinished saves other processes left of its checkpoints,
    # so two at once would delete each other's saves in progress; the second is refused
    from dslc.checkpoint_managers import CheckpointDirectoryBusy
    other, partial = _other_runner(tmp_path, "trainer_0")
    try:
        with Cluster():
            job, _ = make_job()
            ws, session = fresh_session()
            with pytest.raises(CheckpointDirectoryBusy) as e:
                JobRunner(job, make_manager(str(tmp_path))).train(session)
        assert str(tmp_path) in e.value.message and "trainer_0.<epoch>" in e.value.message and e.value.hint
        assert partial.exists() and not (tmp_path / "trainer_0.0").exists()  # nothing touched
    finally:
        other.kill()
        other.wait()
    with Cluster():  # once the other runner is gone, the checkpoints are free again
        job, fetcher = make_job()
        ws, session = fresh_session()
        assert JobRunner(job, make_manager(str(tmp_path))).train(session) == EPOCHS
    assert not partial.exists()  # (a killed writer's: removed by the runner that owns them)
    assert sorted(os.listdir(tmp_path)) == [f"trainer_0.{e}" for e in range(EPOCHS + 1)]  # (no lock left)


@pytest.mark.parametrize("make_manager", [lambda d: CheckpointManager(d, "trainer_0", "minidb"),
                                          lambda d: MultiNodeCheckpointManager(d, "minidb")])
def test_runners_writing_other_checkpoints_share_a_directory(tmp_path, make_manager):
    # issue 38: the lock is as strict as the conflict: another node's checkpoints in the same
    # directory are neither refused nor touched
    other, partial = _other_runner(tmp_path, "trainer_1")
    try:
        with Cluster():
            job, fetcher = make_job()
            ws, session = fresh_session()
            assert JobRunner(job, make_manager(str(tmp_path))).train(session) == EPOCHS
            assert fetch(session, fetcher) == [total_after(EPOCHS)]
        assert partial.exists()  # the other job's save in progress is left alone
        assert sorted(p for p in os.listdir(tmp_path) if p.startswith("trainer_0")) == \
            [f"trainer_0.{e}" for e in range(EPOCHS + 1)]
    finally:
        other.kill()
        other.wait()


def test_a_second_runner_in_the_same_process_is_refused_too(tmp_path):
    from dslc.checkpoint_managers import CheckpointDirectoryBusy
    with CheckpointManager(str(tmp_path), "n", "minidb").lock_checkpoints():
        with pytest.raises(CheckpointDirectoryBusy, match=r"n\.<epoch>"):
            CheckpointManager(str(tmp_path), "n", "minidb").lock_checkpoints()
        with CheckpointManager(str(tmp_path), "m", "minidb").lock_checkpoints():
            pass
    with CheckpointManager(str(tmp_path), "n", "minidb").lock_checkpoints():  # (released: free again)
        pass
    assert os.listdir(tmp_path) == []
