"""Running a Job in a session: its groups epoch by epoch, with checkpoints if a manager is given.

``JobRunner(job, checkpoint_manager).train(session)`` runs the init group once, then the
epoch group until a stop condition is true (saving a checkpoint after the init group and
each epoch, and loading one instead of the init group when resuming), then the download and
exit groups. ``session.run(job)`` is a runner without a manager. Caffe2's name for it is
``dslc.checkpoint.JobRunner`` (re-exported there, beside the managers).
"""
from __future__ import annotations

import logging

from dslc.driver import progress
from dslc.ir.diagnostics import DSLError, NodeLostError, TraceError
from dslc.trace.job import Job
from dslc.trace.tracing import user_location

# Caffe2's logger name: programs (and our tests) filter the runner's warnings by it
logger = logging.getLogger("dslc.checkpoint")


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
