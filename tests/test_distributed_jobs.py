"""Jobs with checkpoints on a Ray cluster: the seed's pipeline on four trainer nodes, and
surviving a node whose process dies (mid-epoch, or while it saves a checkpoint)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("dslc.pipeline")

from dslc import core  # noqa: E402
from dslc.checkpoint import Job, JobRunner, MultiNodeCheckpointManager  # noqa: E402
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
    assert sorted(ray_session.nodes()) == [f"trainer_{k}" for k in range(TRAINERS)]
    # every node saved its own checkpoint of every epoch (0 = after the init group)
    assert sorted(os.listdir(tmp_path)) == sorted(f"trainer_{k}.{e}" for k in range(TRAINERS) for e in range(5))
