"""Jobs, checkpoint managers and the JobRunner (Caffe2's ``checkpoint`` module).

A ``Job`` is four task groups: ``init_group`` (run once), ``epoch_group`` (run until
a stop condition is true), ``download_group`` and ``exit_group`` (run once at the
end). A checkpoint manager builds the Tasks that save the root workspace's blobs
after the init group and after every epoch, and load them back; ``JobRunner``
drives a session through all of it and returns the number of the last epoch run.

Both generations of Caffe2's API work: ``add_stop_signal`` / ``stop_signals`` and
``runner(session)`` (old: plain checkpoint Tasks) next to ``add_stop_condition`` /
``stop_conditions`` and ``runner.train(session)`` (new: checkpoint Tasks that time
themselves and report their durations). ``Job.compile`` compiles in place and
returns the job, which serves both.

The Job is the tracer's (dslc/trace/job.py), the runner the driver's
(dslc/driver/jobrunner.py); the managers and the checkpoint names
(``<db_prefix>/<node>.<epoch>``, ``db_name``) are in ``dslc.checkpoint_managers``. All are
re-exported here; what a database file holds is described in docs/checkpoints.md.
"""
from __future__ import annotations

from dslc import core
from dslc.checkpoint_managers import (BLOB_NAMES, CheckpointManager, MultiNodeCheckpointManager, SnapshotManager,
                                      db_name, get_ckpt_filename, get_snapshot_filename)
from dslc.driver.jobrunner import JobRunner
from dslc.ir.diagnostics import TraceError
from dslc.task import Task, TaskGroup
from dslc.trace.job import Job
from dslc.trace.tracing import user_location


def epoch_limiter(job: Job, num_epochs: int) -> None:
    """Make ``job`` stop after exactly ``num_epochs`` epochs (a counter counted down per epoch)."""
    if not isinstance(num_epochs, int) or num_epochs < 1:
        raise TraceError(f"epoch_limiter needs num_epochs >= 1, got {num_epochs!r}", user_location(),
                         "a job runs at least one epoch")
    with job.init_group:
        init_net = core.Net("epoch_counter_init")
        counter = init_net.CreateCounter([], init_count=num_epochs - 1)
        Task(step=init_net)
    with job.epoch_group:
        epoch_net = core.Net("epoch_countdown")
        finished = epoch_net.CountDown(counter)
        output = Task(step=epoch_net, outputs=finished).outputs()[0]
    job.add_stop_condition(output)


class UploadTaskGroupBuilder:
    """Builds the TaskGroup that uploads the checkpoints of an epoch (JobRunner runs it once,
    after the last epoch). Subclasses implement ``build``."""

    def build(self, epoch, checkpoint_manager) -> TaskGroup:
        raise NotImplementedError("subclass UploadTaskGroupBuilder and implement build(epoch, manager)")


__all__ = ["BLOB_NAMES", "CheckpointManager", "Job", "JobRunner", "MultiNodeCheckpointManager",
           "SnapshotManager", "UploadTaskGroupBuilder", "db_name", "epoch_limiter", "get_ckpt_filename",
           "get_snapshot_filename"]
