"""Jobs with checkpoints on a Ray cluster: the seed's pipeline on four trainer nodes, and
surviving a node whose process dies (mid-epoch, or while it saves a checkpoint)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

pytest.importorskip("dslc.pipeline")

from dslc import core  # noqa: E402
from dslc.checkpoint import CheckpointManager, Job, JobRunner, MultiNodeCheckpointManager  # noqa: E402
from dslc.net_builder import ops  # noqa: E402
from dslc.task import Cluster, Node, Task  # noqa: E402
from test_checkpoint_seed import EXPECTED_TOTALS, build_pipeline  # noqa: E402

TRAINERS = 4


def four_trainers():
    """The seed's job on trainer_0..3, and a fetcher Task per trainer (on its node)."""
    with Cluster():
        with Job() as job:
            outputs = [build_pipeline(k)[0] for k in range(TRAINERS)]
        fetchers = []
        for k, total in enumerate(outputs):
            with Node(f"trainer_{k}"):
                fetchers.append(Task(step=core.Net("fetch"), outputs=[total]))
    return job, fetchers


def totals(session, fetchers):
    out = []
    for f in fetchers:
        session.run(f)
        out.append(f.outputs()[0].fetch().tolist())
    return out


def test_the_seed_pipeline_on_four_trainer_nodes_gives_the_local_totals(ray_session, tmp_path):
    job, fetchers = four_trainers()
    manager = MultiNodeCheckpointManager(str(tmp_path), "minidb")
    assert JobRunner(job, manager).train(ray_session) == len(EXPECTED_TOTALS)
    assert totals(ray_session, fetchers) == [[EXPECTED_TOTALS[-1]]] * TRAINERS
    assert {f"trainer_{k}" for k in range(TRAINERS)} <= set(ray_session.nodes())
    # every node saved its own checkpoint of every epoch (0 = after the init group)
    assert sorted(os.listdir(tmp_path)) == sorted(f"trainer_{k}.{e}" for k in range(TRAINERS) for e in range(5))


def pause_on_call(counter_file, marker, nth):
    """A Python op body: on its ``nth`` call (counted in a file: the count survives the
    node's process) write this process's PID to ``marker`` and wait to be killed."""
    def pause(inputs, outputs):
        n = int(counter_file.read_text()) + 1 if counter_file.exists() else 1
        counter_file.write_text(str(n))
        if n == nth:
            marker.write_text(str(os.getpid()))
            time.sleep(120)  # the test SIGKILLs this process meanwhile
    return pause


def kill_when_paused(session, marker, node):
    """In a thread: once ``node`` paused, SIGKILL its actor's process (checked to be that PID)."""
    killed = {}

    def watch():
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        pid = int(marker.read_text())
        killed["matches"] = pid == session.node_info(node)["pid"]
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t, killed


@pytest.mark.slow_cluster
def test_a_node_killed_mid_epoch_is_restarted_and_every_node_resumes(ray_session, tmp_path):
    job, fetchers = four_trainers()
    with job.epoch_group, Node("trainer_1"), Task(name="slow_step"):
        ops.Python(pause_on_call(tmp_path / "calls", tmp_path / "paused", nth=2))([], [])  # epoch 2
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    runner = JobRunner(job, MultiNodeCheckpointManager(str(ckpt), "minidb"))
    watcher, killed = kill_when_paused(ray_session, tmp_path / "paused", "trainer_1")
    assert runner.train(ray_session) == len(EXPECTED_TOTALS)
    watcher.join(5)
    assert killed.get("matches") is True
    assert runner.recoveries == [("trainer_1", 2, 1)]  # lost in epoch 2, all nodes back to epoch 1
    assert ray_session.node_info("trainer_1")["pid"] != killed["pid"]
    assert totals(ray_session, fetchers) == [[EXPECTED_TOTALS[-1]]] * TRAINERS  # as without the fault


@pytest.mark.slow_cluster
def test_a_node_killed_while_saving_resumes_from_the_previous_checkpoint(ray_session, tmp_path, monkeypatch):
    save_task = CheckpointManager._checkpoint_task
    pause = pause_on_call(tmp_path / "calls", tmp_path / "paused", nth=3)  # saves: epoch 0, 1, 2

    def pausing(self, op_name, add_op):
        if op_name != "checkpoint_save" or self._node_name != "trainer_2":
            return save_task(self, op_name, add_op)

        def add():
            ops.Python(pause)([], [])  # inside trainer_2's save task, before its Save op
            add_op()
        return save_task(self, op_name, add)

    monkeypatch.setattr(CheckpointManager, "_checkpoint_task", pausing)
    job, fetchers = four_trainers()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    runner = JobRunner(job, MultiNodeCheckpointManager(str(ckpt), "minidb"))
    watcher, killed = kill_when_paused(ray_session, tmp_path / "paused", "trainer_2")
    assert runner.train(ray_session) == len(EXPECTED_TOTALS)
    watcher.join(5)
    assert killed.get("matches") is True
    assert runner.recoveries == [("trainer_2", 2, 1)]  # the save of epoch 2 never finished: epoch 1 used
    assert totals(ray_session, fetchers) == [[EXPECTED_TOTALS[-1]]] * TRAINERS
