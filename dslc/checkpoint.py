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

The managers and the checkpoint names (``<db_prefix>/<node>.<epoch>``, ``db_name``)
are in ``dslc.checkpoint_managers``, re-exported here; what a database file holds is
described in docs/checkpoints.md.
"""
from __future__ import annotations

import logging

from dslc import core
from dslc.driver import progress
from dslc.checkpoint_managers import (BLOB_NAMES, CheckpointManager, MultiNodeCheckpointManager, SnapshotManager,
                                      db_name, get_ckpt_filename, get_snapshot_filename)
from dslc.context import Managed
from dslc.ir.diagnostics import DSLError, NodeLostError, TraceError
from dslc.task import Task, TaskGroup, TaskOutput, WorkspaceType
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- jobs


class Job(Managed):
    """The task groups of a job and the outputs that stop its epochs.

    ``with Job() as job:`` makes it the current job and opens its epoch group, so
    Tasks made in the block are epoch tasks; ``with job.init_group:`` (or
    ``Job.current().init_group``) targets the others.
    """

    def __init__(self, init_group=None, epoch_group=None, download_group=None, exit_group=None,
                 stop_conditions=None, nodes_to_checkpoint=None, stop_signals=None):
        self.init_group = init_group or TaskGroup(workspace_type=WorkspaceType.GLOBAL)
        self.epoch_group = epoch_group or TaskGroup()
        self.download_group = download_group or TaskGroup()
        self.exit_group = exit_group or TaskGroup()
        self.stop_conditions = list(stop_conditions or stop_signals or [])
        self._nodes_to_checkpoint = nodes_to_checkpoint
        self.loc = user_location()  # where a job without stop conditions is reported

    @property
    def stop_signals(self) -> list:
        """The old API's name for ``stop_conditions`` (the same list)."""
        return self.stop_conditions

    @stop_signals.setter
    def stop_signals(self, value) -> None:
        self.stop_conditions = value

    def nodes_to_checkpoint(self) -> list:
        """The nodes whose workspaces are checkpointed: as given, else those the init group uses."""
        return self._nodes_to_checkpoint or self.init_group.used_nodes()

    def compile(self, session_class):
        """Fix the checkpointed nodes and turn each group into what ``session_class`` runs.

        The new API compiles in place (and returns nothing); the old one returns the
        compiled job. Compiling in place and returning ``self`` serves both.
        """
        self._nodes_to_checkpoint = self.nodes_to_checkpoint()
        as_group = getattr(session_class, "as_group", None)
        for attr in ("init_group", "epoch_group", "download_group", "exit_group"):
            group = getattr(self, attr)
            setattr(self, attr, as_group(group) if as_group is not None else session_class.compile(group))
        return self

    def __enter__(self):
        super().__enter__()
        self.epoch_group.__enter__()
        return self

    def __exit__(self, *exc):
        self.epoch_group.__exit__(*exc)
        return super().__exit__(*exc)

    def add_stop_condition(self, output) -> None:
        """Stop after the epoch in which ``output`` (a TaskOutput, or a blob of an epoch task) is true.

        A blob is exported by a step-less Task of the epoch group, as Caffe2 does.
        """
        if isinstance(output, (core.BlobReference, str)):
            output = Task(outputs=[output], group=self.epoch_group).outputs()[0]
        if not isinstance(output, TaskOutput):
            raise TraceError(f"a stop condition must be a blob or a TaskOutput, got {type(output).__name__}",
                             user_location(), "pass the blob an epoch task computes, e.g. "
                                              "reader.data_finished()")
        self.stop_conditions.append(output)

    add_stop_signal = add_stop_condition  # the old API's name

    def run_in(self, session) -> None:
        """``session.run(job)``: its groups run epoch by epoch, without checkpoints."""
        JobRunner(self).train(session)


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


# ----------------------------------------------------------------------------- the runner


class JobRunner:
    """Runs a Job in a session, with checkpoints after the init group and every epoch.

    ``resume_from_epoch=e`` skips the init group and loads epoch ``e``'s checkpoint
    instead; the epochs then go on from ``e + 1``. Both ``train(session)`` (new API)
    and ``runner(session)`` (old API) return the number of the last epoch run.
    """

    MAX_NODE_RESTARTS = 3  # lost nodes a run survives before it gives up

    def __init__(self, job: Job, checkpoint_manager=None, resume_from_epoch=None,
                 upload_task_group_builder=None):
        self.job = job
        self.checkpoint_manager = checkpoint_manager
        self.resume_from_epoch = resume_from_epoch
        self.upload_task_group_builder = upload_task_group_builder
        self.recoveries: list = []  # (lost node, epoch it was in, epoch restored from)
        self._last_complete = None  # the last epoch whose checkpoint every node saved

    def train(self, session) -> int:
        return self._run(session, timed=True)

    def __call__(self, session) -> int:
        return self._run(session, timed=False)

    def _run(self, session, timed: bool) -> int:
        job, cm = self.job, self.checkpoint_manager
        if not job.stop_conditions:
            raise TraceError("this Job has no stop condition, so its epochs would never end", job.loc,
                             "add one with job.add_stop_condition(blob) or epoch_limiter(job, n)")
        if cm is None or not hasattr(cm, "lock_checkpoints"):
            return self._epochs(session, timed)
        with cm.lock_checkpoints(job.nodes_to_checkpoint()):  # one runner per node's checkpoints
            return self._epochs(session, timed)

    def _epochs(self, session, timed: bool) -> int:
        job, cm = self.job, self.checkpoint_manager
        if cm is not None:
            cm.timed = timed
            cm.set_params(nodes=job.nodes_to_checkpoint())
            cm.remove_partial_saves(job.nodes_to_checkpoint())
            self._save_failed = False
            self.resume_from_epoch = cm.get_resume_from_epoch_id(self.resume_from_epoch)
        from_scratch = self.resume_from_epoch is None
        self._last_complete = None if from_scratch else self.resume_from_epoch
        if from_scratch:
            session.run(job.init_group)
        if cm is not None:
            session.run(cm.init(job.nodes_to_checkpoint(), retrieve_from_epoch=self.resume_from_epoch))
            if from_scratch:
                self.save_checkpoints(0, session)
            else:
                logger.info("resuming from the checkpoint of epoch %s", self.resume_from_epoch)
                session.run(cm.load(self.resume_from_epoch))
                if timed:
                    cm.report_checkpoint_stats("checkpoint_load")
        epoch = 1 if from_scratch else self.resume_from_epoch + 1
        epochs = progress.counter("epochs")  # a line on a terminal, when the CLI shows progress
        while True:
            try:
                session.run(job.epoch_group)
                epochs.tick()
                stop = [o.fetch() for o in job.stop_conditions]  # read before the save, as Caffe2 does
                if cm is not None:
                    self.save_checkpoints(epoch, session)
            except NodeLostError as lost:
                epoch = self._recover(session, lost, epoch)
                continue
            if any(bool(s) for s in stop):
                break
            epoch += 1
        if self.upload_task_group_builder is not None:
            session.run(self.upload_task_group_builder.build(epoch, cm))
        session.run(job.download_group)
        session.run(job.exit_group)
        return epoch

    def save_checkpoints(self, epoch, session) -> None:
        """Save the checkpoint of ``epoch``; a failure is logged, never raised (the job goes on)."""
        cm = self.checkpoint_manager
        if cm is None:
            raise ValueError("this JobRunner has no checkpoint manager")
        try:
            if not cm.cp_accessible(epoch=None):
                logger.warning("checkpoints are not accessible: epoch %s is not saved", epoch)
                return
            session.run(cm.save(epoch))
            self._last_complete = epoch
            cm.write_checkpoint_metadata(epoch)
            if cm.timed:
                cm.report_checkpoint_stats("checkpoint_save")
        except NodeLostError:
            raise  # not a failing save: the job lost a node (see _recover)
        except Exception as e:  # Caffe2's contract: a failing save never stops the job
            self._report_failed_save(epoch, e)

    def _report_failed_save(self, epoch, e: Exception) -> None:
        """A warning for the first failed save of a run, at the line that made the manager;
        the later ones (every epoch, typically for the same reason) only to the log."""
        if getattr(self, "_save_failed", False):
            logger.info("the checkpoint of epoch %s was not saved either: %s", epoch, e)
            return
        self._save_failed = True
        why = f"{e.message}; {e.hint}" if isinstance(e, DSLError) and e.hint else getattr(e, "message", str(e))
        where = getattr(self.checkpoint_manager, "loc", None)
        logger.warning("%swarning: the checkpoint of epoch %s was not saved, and the job goes on "
                       "without checkpoints: %s (later failed saves of this run are not reported)",
                       f"{where}: " if where else "", epoch, why)

    def _recover(self, session, lost: NodeLostError, epoch: int) -> int:
        """A node's process died in ``epoch`` (a cluster session): start a new one for it,
        load every node from the last checkpoint all nodes completed, and return the
        epoch to run next. Without such a checkpoint, or a session that can restart
        nodes, the loss is the job's end."""
        restart = getattr(session, "restart_node", None)
        if self.checkpoint_manager is None or restart is None or self._last_complete is None \
                or len(self.recoveries) >= self.MAX_NODE_RESTARTS:
            raise lost
        back_to = self._last_complete
        logger.warning("node %r was lost in epoch %s; restarting it and loading every node from the "
                       "checkpoint of epoch %s", lost.node, epoch, back_to)
        self.recoveries.append((lost.node, epoch, back_to))
        restart(lost.node)
        session.run(self.checkpoint_manager.load(back_to))
        return back_to + 1

    def load_blobs_from_checkpoints(self, blob_names, epoch, session) -> bool:
        """Load just ``blob_names`` from every node's checkpoint of ``epoch``; False if one is missing."""
        cm = self.checkpoint_manager
        if cm is None:
            raise ValueError("this JobRunner has no checkpoint manager")
        if not hasattr(cm, "load_blobs_locally"):
            raise TraceError(f"{type(cm).__name__} cannot load blobs across nodes", user_location(),
                             "use a MultiNodeCheckpointManager")
        loaded = cm.load_blobs_locally(self.job.nodes_to_checkpoint(), blob_names, epoch, session)
        if cm.timed:
            cm.report_checkpoint_stats("checkpoint_partial_load")
        return loaded


__all__ = ["BLOB_NAMES", "CheckpointManager", "Job", "JobRunner", "MultiNodeCheckpointManager",
           "SnapshotManager", "UploadTaskGroupBuilder", "db_name", "epoch_limiter", "get_ckpt_filename",
           "get_snapshot_filename"]
