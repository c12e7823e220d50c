"""data_parallel_model across the nodes of a Ray cluster: each shard a Node, a process of
its own, the gradients combined through the session's hub (backends/ray/collective.py).

The reference is one replica with the whole batch on LocalSession (no collectives at
all); two shards of half the batch each must give its losses and parameters."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from dslc import workspace
from dslc.backends.ray.cluster import shm_dir
from dslc.ir.diagnostics import DSLError
from dslc.net_builder import ops
from dslc.task import Cluster, Node, Task, TaskGroup, WorkspaceType
from test_data_parallel_shards import PARAMS, groups, shard_models, whole_batch
import paths


@pytest.mark.filterwarnings("ignore::UserWarning")  # (one name per node, as a cluster job)
def test_two_shards_on_two_nodes_train_as_one_replica_with_the_whole_batch(ray_session, ray_cluster):
    want_losses, want = whole_batch(steps=3)
    workspace.ResetWorkspace()
    models = shard_models(2, lambda s: [0])  # (each node its own workspace: the same names)
    init, train = groups(models)
    ray_session.run(init)
    losses = []
    for _ in range(3):
        ray_session.run(train)
        losses.append(sum(float(ray_session.fetch_blob("cpu_0/loss", node=f"trainer_{s}")) for s in range(2)))
    np.testing.assert_allclose(np.array(losses) / 2, want_losses, rtol=1e-6)
    for s in range(2):
        for name in PARAMS:
            got = ray_session.fetch_blob(f"cpu_0/{name}", node=f"trainer_{s}")
            np.testing.assert_allclose(got, want[name], rtol=1e-6, atol=1e-7, err_msg=f"trainer_{s} {name}")
    assert ray_session.node_info("trainer_0")["pid"] != ray_session.node_info("trainer_1")["pid"]
    import ray
    for s in range(2):  # every payload was taken by its round
        assert ray.get(ray_session.actor(f"trainer_{s}").collective_pending.remote()) == 0
    # shared memory segments (nodes on one machine) lose their names once the run is over
    where = shm_dir(ray_cluster.temp_dir)
    deadline = time.monotonic() + 10
    while os.path.isdir(where) and os.listdir(where) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.isdir(where) or os.listdir(where) == []


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sparse_rows_are_gathered_across_nodes(ray_session):
    with Cluster(), TaskGroup() as group:
        for s in range(2):
            with Node(f"trainer_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                rows = ops.Const(np.arange(2 * (s + 1), dtype=np.float32).reshape(s + 1, 2) + 10 * s, "rows")
                ops.Allgather([rows], ["gathered"], shards=2, shard=s, group="g")
    ray_session.run(group)
    for s in range(2):
        np.testing.assert_array_equal(ray_session.fetch_blob("gathered", node=f"trainer_{s}"),
                                      [[0, 1], [10, 11], [12, 13]])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_failing_shard_stops_the_others_waiting(ray_session):
    """Shard 1 fails before its Allreduce: shard 0, waiting there, is stopped, and the error
    is shard 1's, located."""
    with Cluster(), TaskGroup() as group:
        for s in range(2):
            with Node(f"trainer_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                v = ops.Const(np.ones(3, np.float32), "v")
                if s == 1:
                    ops.Div([ops.Const(np.ones(2, np.int32), "one"), ops.Const(np.zeros(2, np.int32), "z")],
                            ["oops"])
                ops.Allreduce([v], ["total"], shards=2, shard=s, group="fails")
    with pytest.raises(DSLError) as err:
        ray_session.run(group)
    assert "trainer_1" in str(err.value) or "division" in str(err.value).lower()
    assert "test_data_parallel_ray.py" in str(err.value)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_example_job_gives_the_same_losses_in_one_process_and_on_the_cluster(ray_session):
    """examples/data_parallel.py, as `dslc run` and `dslc run --cluster ray` run it."""
    from dslc.driver import jobfile
    from dslc.session import LocalSession

    path = str(paths.EXAMPLES / "data_parallel.py")

    def losses(session):
        job = jobfile.load(path)
        for r in job.runnables:
            session.run(r)
        learned = [bool(job.outputs[f"learned_{s}"].fetch()) for s in range(2)]
        return [float(fetch(session, f"cpu_{s}/loss", f"trainer_{s}")) for s in range(2)], learned

    def fetch(session, blob, node):
        return session.fetch_blob(blob, node=node) if session is ray_session else workspace.FetchBlob(blob)

    workspace.ResetWorkspace()
    with LocalSession(backend=ray_session.backend_name) as local:
        here, learned_here = losses(local)
    there, learned_there = losses(ray_session)
    np.testing.assert_allclose(there, here, rtol=1e-5)
    assert max(here) < 0.1 and learned_here == learned_there == [True, True]  # (from about log(10) = 2.3)


def _example_job():
    """examples/data_parallel.py's Job (built afresh) and its outputs."""

    from dslc.task import Cluster
    example = paths.load(paths.EXAMPLES / "data_parallel.py", "dslc_example_data_parallel")
    with Cluster():
        return example.build_job()


@pytest.mark.slow_cluster
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_shard_killed_mid_epoch_costs_the_epoch_and_training_ends_as_without_it(ray_session, tmp_path):
    """Shard 1's process is SIGKILLed in epoch 2: the runner restarts its node, every node
    reloads the checkpoint of epoch 1, and the shards end with the parameters of a run
    without the fault (LocalSession's, same backend)."""
    from dslc.checkpoint import JobRunner, MultiNodeCheckpointManager
    from dslc.session import LocalSession
    from test_distributed_jobs import kill_when_paused, pause_on_call

    workspace.ResetWorkspace()
    job, _ = _example_job()
    with LocalSession(backend=ray_session.backend_name) as local:
        JobRunner(job).train(local)
    want = {s: {p: workspace.FetchBlob(f"cpu_{s}/{p}") for p in ("fc1_w", "fc2_w", "fc2_b")} for s in range(2)}

    job, _ = _example_job()
    with job.epoch_group, Node("trainer_1"), Task(name="slow_step"):
        ops.Python(pause_on_call(tmp_path / "calls", tmp_path / "paused", nth=2))([], [])  # in epoch 2
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    runner = JobRunner(job, MultiNodeCheckpointManager(str(ckpt), "minidb"))
    watcher, killed = kill_when_paused(ray_session, tmp_path / "paused", "trainer_1")
    assert runner.train(ray_session) == 3
    watcher.join(5)
    assert killed.get("matches") is True
    assert runner.recoveries == [("trainer_1", 2, 1)]
    for s in range(2):
        for p, value in want[s].items():
            got = ray_session.fetch_blob(f"cpu_{s}/{p}", node=f"trainer_{s}")
            np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-7, err_msg=f"trainer_{s} {p}")
