"""A Job: the record of a job's four task groups and the outputs that stop its epochs.

``init_group`` runs once, ``epoch_group`` runs until a stop condition is true,
``download_group`` and ``exit_group`` run once at the end. This is what the tracer
records and what the driver reads (``dslc run`` runs a job file's Job, a session runs one
under the driver's ``JobRunner``); ``dslc.checkpoint`` re-exports it as Caffe2's ``Job``,
beside the checkpoint managers and the runner.
"""
from __future__ import annotations

from dslc.ir.diagnostics import TraceError
from dslc.trace.blobref import BlobReference
from dslc.trace.context import Managed
from dslc.trace.task import Task, TaskGroup, TaskOutput, WorkspaceType
from dslc.trace.tracing import user_location


class Job(Managed):
    """The task groups of a job and the outputs that stop its epochs.

    ``with Job() as job:`` makes it the current job and opens its epoch group, so
    Tasks made in the block are epoch tasks; ``with job.init_group:`` (or
    ``Job.current().init_group``) targets the others. ``session.run(job)`` runs its
    groups epoch by epoch, without checkpoints (``dslc.checkpoint.JobRunner`` with a
    checkpoint manager adds them).
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
        if isinstance(output, (BlobReference, str)):
            output = Task(outputs=[output], group=self.epoch_group).outputs()[0]
        if not isinstance(output, TaskOutput):
            raise TraceError(f"a stop condition must be a blob or a TaskOutput, got {type(output).__name__}",
                             user_location(), "pass the blob an epoch task computes, e.g. "
                                              "reader.data_finished()")
        self.stop_conditions.append(output)

    add_stop_signal = add_stop_condition  # the old API's name
