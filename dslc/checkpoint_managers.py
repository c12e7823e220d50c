"""Checkpoint managers: the Tasks that save a node's root workspace at epoch boundaries
and load it back (Caffe2's ``CheckpointManager``, ``SnapshotManager`` and
``MultiNodeCheckpointManager``), and the names of the checkpoints they write.

``dslc.checkpoint`` (jobs and the ``JobRunner`` that drives these) re-exports all of
it; what a database file holds is described in docs/checkpoints.md.
"""
from __future__ import annotations

import logging
import os
import re

from dslc import core
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.net_builder import ops
from dslc.task import Node, Task, TaskGroup, WorkspaceType, final_output
from dslc.trace.tracing import user_location

# the checkpoint module's logger: users configure "dslc.checkpoint" for both halves
logger = logging.getLogger("dslc.checkpoint")

BLOB_NAMES = "blob_names"  # the blob holding the list of checkpointed blob names


# ----------------------------------------------------------------------------- db names


def get_ckpt_filename(node_name, epoch) -> str:
    """``<node>.<epoch>``: a checkpoint's file name."""
    return f"{node_name}.{epoch}"


def db_name(epoch, node_name, db_prefix, path_prefix=None) -> str:
    """Where the checkpoint of ``node_name`` at ``epoch`` lives.

    ``path_prefix`` is glued on as a string (so it may end in a separator or not);
    otherwise the file is ``<db_prefix>/<node>.<epoch>``.
    """
    if path_prefix:
        return path_prefix + get_ckpt_filename(node_name, epoch)
    return os.path.join(db_prefix, get_ckpt_filename(node_name, epoch))


def get_snapshot_filename(node_name, epoch) -> str:
    """``<node>.snapshot.<epoch>``: a snapshot's file name (SnapshotManager)."""
    return f"{node_name}.snapshot.{epoch}"


# ----------------------------------------------------------------------------- managers


def _check_db_type(db_type) -> None:
    """Reject an unknown db_type when the manager is made, not at its first (logged) save."""
    from dslc.runtime import blobdb  # the runner drives sessions; only it needs the registry
    try:
        blobdb.get(db_type)
    except blobdb.DBError as e:
        e.loc = user_location()
        raise


def _hook(handler, name: str, *args, default=None, **kwargs):
    """Call an optional metadata-handler method (handlers are duck typed)."""
    method = getattr(handler, name, None) if handler is not None else None
    return method(*args, **kwargs) if method is not None else default


class _MetadataHooks:
    """What both managers ask of their ``_metadata_handler`` (None: no handler)."""

    _metadata_handler = None

    def write_checkpoint_metadata(self, epoch) -> None:
        _hook(self._metadata_handler, "write", epoch=epoch)

    def get_resume_from_epoch_id(self, user_epoch=None):
        """The epoch to resume from: the handler's choice if there is one, else ``user_epoch``."""
        if self._metadata_handler is None or not hasattr(self._metadata_handler, "last_epoch"):
            return user_epoch
        return self._metadata_handler.last_epoch(user_epoch=user_epoch)


class CheckpointManager(_MetadataHooks):
    """Saves and loads one node's root workspace at epoch boundaries.

    ``init`` fixes which blobs are checkpointed: every blob in the node's root
    workspace at that moment (after the init group), including ``blob_names``
    itself, so a fresh session can load the list first and then the blobs.
    ``save``/``load`` build the Tasks; ``timed`` (the new API) wraps each in a timer
    whose duration is reported to the metadata handler.
    """

    def __init__(self, db_prefix, node_name, db_type, metadata_handler=None):
        _check_db_type(db_type)
        self._db_prefix = db_prefix
        self._node_name = str(node_name)
        self._db_type = db_type
        self._metadata_handler = metadata_handler
        self._net = core.Net("!!checkpoint_mngr")
        self._blob_names = self._net.AddExternalInput(BLOB_NAMES)
        self._names_output = None
        self._path_prefix = None
        self._path_type = None
        self._current_db_name = None
        self._current_checkpoint_duration = None
        self.timed = True
        self.loc = user_location()  # where a failing save is reported (the line naming the directory)

    # --- names
    def _db_name(self, epoch, path_prefix=None) -> str:
        return db_name(epoch, self._node_name, self._db_prefix, path_prefix)

    _dbname = _db_name  # the old API's spelling

    # --- the blob list
    def init(self, nodes=None, retrieve_from_epoch=None, path_prefix=None, path_type=None) -> Task:
        """The Task that fixes the blob list: listed now, or loaded from ``retrieve_from_epoch``."""
        if nodes is not None and len(nodes) > 1:
            raise TraceError(f"CheckpointManager checkpoints one node, got {len(nodes)}", user_location(),
                             "use MultiNodeCheckpointManager for a job on several nodes")
        self._path_prefix, self._path_type = path_prefix, path_type
        _hook(self._metadata_handler, "init", db_prefix=self._db_prefix, db_type=self._db_type,
              node_names=[self._node_name], path_prefix=path_prefix, path_type=path_type)
        with Task(outputs=[self._blob_names]) as task:
            if retrieve_from_epoch is None:
                ops.GetAllBlobNames([], self._blob_names, include_shared=False)
            else:
                source = self._db_name(retrieve_from_epoch, path_prefix)
                logger.info("reading the checkpointed blob names from %s", source)
                ops.Load([], self._blob_names, db=source, db_type=path_type or self._db_type,
                         absolute_path=True, **self._keep_device())
        self._names_output = task.outputs()[0]
        return task

    def blob_list(self) -> list:
        """The checkpointed blob names (fetched from the init Task, which must have run)."""
        if self._names_output is None:
            raise TraceError("this checkpoint manager has no blob list yet", user_location(),
                             "run the Task of manager.init(...) in the session first")
        return self._names_output.fetch().tolist()

    # --- the checkpoint tasks
    def _keep_device(self) -> dict:
        return {"keep_device": True} if self.timed else {}

    def _checkpoint_task(self, op_name: str, add_op) -> Task:
        if self.timed:
            return self._timed_task(op_name, add_op)
        with Task() as task:
            add_op()
        return task

    def _timed_task(self, cp_op_name: str, add_op) -> Task:
        """A Task named ``cp_op_name`` running ``add_op``'s ops between a timer's start and end;
        the elapsed nanoseconds are its output (``_current_checkpoint_duration``)."""
        with Task(name=cp_op_name) as task:
            with ops.task_init():
                timer = ops.TimerBegin([], counter_name=self._node_name)
            add_op()
            with ops.task_exit():
                duration = ops.TimerGetAndEnd(timer)
            self._current_checkpoint_duration = final_output(duration)
        return task

    def save(self, epoch) -> Task:
        """The Task that writes every checkpointed blob to ``db_name(epoch)``."""
        self._current_db_name = self._db_name(epoch)
        logger.info("saving a checkpoint to %s", self._current_db_name)
        return self._checkpoint_task("checkpoint_save", lambda: ops.Save(
            self.blob_list(), [], db=self._current_db_name, db_type=self._db_type, absolute_path=True))

    def load(self, epoch, path_prefix=None, path_type=None) -> Task:
        """The Task that reads every checkpointed blob back from the checkpoint of ``epoch``."""
        self._current_db_name = self._db_name(epoch, path_prefix)
        logger.info("loading the checkpoint %s", self._current_db_name)
        return self._checkpoint_task("checkpoint_load", lambda: ops.Load(
            [], self.blob_list(), db=self._current_db_name, db_type=path_type or self._db_type,
            absolute_path=True, **self._keep_device()))

    def load_blobs_from_checkpoint(self, blob_names, epoch) -> Task:
        """The Task that reads just ``blob_names`` (those the checkpoint has) from ``epoch``'s."""
        self._current_db_name = self._db_name(epoch)
        logger.info("loading %d blobs from %s", len(blob_names), self._current_db_name)
        return self._checkpoint_task("checkpoint_partial_load", lambda: ops.Load(
            [], list(blob_names), db=self._current_db_name, db_type=self._db_type, absolute_path=True,
            allow_incomplete=True))

    def check_db_exists(self, epoch) -> Task:
        """A Task whose output says whether the checkpoint of ``epoch`` exists."""
        with Task() as task:
            existence = ops.Const(False)
            ops.DBExists([], [existence], db_name=self._db_name(epoch), db_type=self._db_type,
                         absolute_path=True)
            task.add_output(existence)
        return task

    # --- stats and the metadata handler
    def collect_checkpoint_stats(self, stats: dict) -> None:
        """Add ``db name -> nanoseconds`` of the last timed checkpoint Task that ran."""
        out = self._current_checkpoint_duration
        if self._current_db_name and out is not None:
            try:
                stats[self._current_db_name] = int(out.fetch()[0])
            except TraceError:  # the Task was built but did not run (e.g. its save failed)
                logger.info("no duration for %s", self._current_db_name)

    def report_checkpoint_stats(self, action_name: str) -> None:
        stats: dict = {}
        self.collect_checkpoint_stats(stats)
        _hook(self._metadata_handler, "report", action_name, stats)

    def set_params(self, nodes, path_prefix=None, path_type=None) -> None:
        if path_prefix:
            self._path_prefix = path_prefix
        if path_type:
            self._path_type = path_type
        _hook(self._metadata_handler, "set_params", db_prefix=self._db_prefix, db_type=self._db_type,
              node_names=[self._node_name], path_prefix=self._path_prefix, path_type=self._path_type)

    def cp_accessible(self, epoch=None) -> bool:
        return _hook(self._metadata_handler, "cp_accessible", epoch, default=True)

    def remove_partial_saves(self, nodes=None) -> list:
        """Remove what saves killed mid-write left of this manager's checkpoints; returns the paths."""
        return _remove_partial_saves(self._db_name)

    def lock_checkpoints(self, nodes=None) -> "CheckpointLocks":
        """Lock this manager's checkpoints, for one runner at a time."""
        return CheckpointLocks([self._db_name], getattr(self, "loc", None))


class SnapshotManager(CheckpointManager):
    """A CheckpointManager whose databases are named ``<db_prefix>/<node>.snapshot.<epoch>``,
    so snapshots and checkpoints of one job can share a directory."""

    def _db_name(self, epoch, path_prefix=None) -> str:
        name = get_snapshot_filename(self._node_name, epoch)
        return path_prefix + name if path_prefix else os.path.join(self._db_prefix, name)

    _dbname = _db_name


class MultiNodeCheckpointManager(_MetadataHooks):
    """One CheckpointManager per node; ``init``/``save``/``load`` give GLOBAL TaskGroups
    with one Task per node (made under that ``Node``)."""

    def __init__(self, db_prefix, db_type, metadata_handler=None):
        _check_db_type(db_type)
        self._node_managers = None
        self._db_prefix = db_prefix
        self._db_type = db_type
        self._metadata_handler = metadata_handler
        self._path_prefix = None
        self._path_type = None
        self._node_names = []
        self.timed = True
        self.loc = user_location()

    def _make_managers(self, nodes) -> None:
        if self._node_managers is not None:
            if [str(n) for n, _ in self._node_managers] != [str(n) for n in nodes]:
                raise TraceError(f"this manager checkpoints nodes {[str(n) for n, _ in self._node_managers]}, "
                                 f"not {[str(n) for n in nodes]}", user_location(),
                                 "use one MultiNodeCheckpointManager per set of nodes")
            return
        self._node_managers = []
        for node in nodes:
            with Node(str(node)):
                self._node_managers.append(
                    (node, CheckpointManager(self._db_prefix, str(node), self._db_type)))

    def _task_group(self, build, *args, **kwargs) -> TaskGroup:
        if self._node_managers is None:
            raise TraceError("this checkpoint manager was not initialised", user_location(),
                             "run the TaskGroup of manager.init(nodes) first")
        with TaskGroup(WorkspaceType.GLOBAL) as group:
            for node, manager in self._node_managers:
                manager.timed = self.timed
                with Node(str(node)):
                    build(manager, *args, **kwargs)
        return group

    def init(self, nodes, retrieve_from_epoch=None, path_prefix=None, path_type=None) -> TaskGroup:
        """Per node, the Task fixing its blob list; later calls (same nodes) give an empty group,
        as the lists fetched the first time are reused."""
        if self._node_managers is not None:
            self._make_managers(nodes)
            return TaskGroup(WorkspaceType.GLOBAL)
        self._make_managers(nodes)
        return self._task_group(lambda m: m.init([m._node_name], retrieve_from_epoch=retrieve_from_epoch,
                                                 path_prefix=path_prefix, path_type=path_type))

    def load(self, epoch, path_prefix=None, path_type=None) -> TaskGroup:
        return self._task_group(lambda m: m.load(epoch, path_prefix=path_prefix, path_type=path_type))

    def save(self, epoch) -> TaskGroup:
        return self._task_group(lambda m: m.save(epoch))

    def load_blobs_locally(self, nodes, blob_names, epoch, session) -> bool:
        """Load ``blob_names`` from each node's checkpoint of ``epoch`` into the session.

        Blobs a node's checkpoint lacks are skipped; False as soon as a node has no
        checkpoint of that epoch, True when every node's was read.
        """
        self._make_managers(nodes)
        for _, manager in self._node_managers:
            manager.timed = self.timed
            exists = manager.check_db_exists(epoch)
            session.run(exists)
            if not exists.outputs()[0].fetch():
                logger.info("no checkpoint at %s", manager._db_name(epoch))
                return False
            session.run(manager.load_blobs_from_checkpoint(blob_names, epoch))
        return True

    def get_ckpt_db_name(self, node_name, epoch):
        """The checkpoint path of ``node_name`` at ``epoch`` (None for a node this manager lacks)."""
        for node, manager in self._node_managers or []:
            if str(node) == str(node_name):
                return manager._db_name(epoch)
        return None

    def report_checkpoint_stats(self, action_name: str) -> None:
        stats: dict = {}
        for _, manager in self._node_managers or []:
            manager.collect_checkpoint_stats(stats)
        _hook(self._metadata_handler, "report", action_name, stats)

    def set_params(self, nodes, path_prefix=None, path_type=None) -> None:
        self._node_names = [str(n) for n in nodes]
        if path_prefix:
            self._path_prefix = path_prefix
        if path_type:
            self._path_type = path_type
        _hook(self._metadata_handler, "set_params", db_prefix=self._db_prefix, db_type=self._db_type,
              node_names=self._node_names, path_prefix=self._path_prefix, path_type=self._path_type)

    def cp_accessible(self, epoch=None) -> bool:
        return _hook(self._metadata_handler, "cp_accessible", epoch, default=True)

    def remove_partial_saves(self, nodes) -> list:
        """Remove what saves killed mid-write left of the checkpoints of ``nodes``."""
        return [path for node in nodes for path in _remove_partial_saves(
            lambda e, n=str(node): db_name(e, n, self._db_prefix, self._path_prefix))]

    def lock_checkpoints(self, nodes) -> "CheckpointLocks":
        """Lock the checkpoints of ``nodes``, for one runner at a time."""
        return CheckpointLocks([lambda e, n=str(node): db_name(e, n, self._db_prefix, self._path_prefix)
                               for node in nodes], getattr(self, "loc", None))


class CheckpointDirectoryBusy(DSLError):
    """Another running job writes the same checkpoints (a node's, in the same directory)."""


class CheckpointLocks:
    """Locks on the checkpoints a JobRunner writes, held while it runs.

    A runner removes the unfinished saves other processes left of its own checkpoints when
    it starts (a killed writer's: ``_remove_partial_saves``) and writes its own; two runners
    writing one node's checkpoints (``<node>.<epoch>`` in one directory) would delete each
    other's saves in progress and overwrite each other's files, so the second is refused.
    Runners whose checkpoints differ (other nodes, other names) share a directory freely:
    each cleanup matches only its own names. The lock is an ``flock`` on a file beside the
    checkpoints, ``.<node>.EPOCH.lock``, removed when the runner ends. Directories that do
    not exist yet are not locked (the first save reports them).
    """

    def __init__(self, names_of_epoch: list, loc=None):
        self.held: list[tuple[str, int]] = []
        try:
            for directory, head, tail in dict.fromkeys(map(_family, names_of_epoch)):
                if os.path.isdir(directory):
                    self.held.append(_lock(directory, head, tail, loc))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for path, fd in self.held:
            try:
                os.unlink(path)  # (while still holding it: whoever opens it next makes a new one)
            except OSError:
                pass
            os.close(fd)
        self.held = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _family(name_of_epoch) -> tuple[str, str, str]:
    """(directory, head, tail): the checkpoints ``name_of_epoch`` names are
    ``<directory>/<head><epoch><tail>``."""
    head, _, tail = os.path.basename(name_of_epoch("\0")).partition("\0")
    return os.path.dirname(os.path.abspath(name_of_epoch(0))), head, tail


def _lock(directory: str, head: str, tail: str, loc) -> tuple[str, int]:
    import fcntl

    path = os.path.join(directory, f".{head}EPOCH{tail}.lock")
    what = f"the checkpoints {head}<epoch>{tail} in {directory}"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise CheckpointDirectoryBusy(f"cannot lock {what}: {path}: {e.strerror}", loc,
                                          "give this job a checkpoint directory (db_prefix) of its own") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except OSError:
            locked = False
        if _still_named(fd, path):
            if locked:
                return path, fd
            os.close(fd)
            raise CheckpointDirectoryBusy(
                f"{what} are being written by another running job", loc,
                "wait for that job to end, or give this one a checkpoint directory (db_prefix) or "
                "node names of its own") from None
        os.close(fd)  # (its holder ended and removed it as this opened it: take the next one)


def _still_named(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _remove_partial_saves(name_of_epoch) -> list:
    """Remove the partial files of every epoch's checkpoint named by ``name_of_epoch``
    (any process but this one wrote them: the runner that owns the directory starts)."""
    from dslc.runtime import partials  # the runner drives sessions; only it cleans
    directory, head, tail = _family(name_of_epoch)
    epoch_file = re.compile(re.escape(head) + r"\d+" + re.escape(tail) + r"\Z")
    removed = partials.remove_stale_in(directory, epoch_file.match)
    for path in removed:
        logger.info("removed %s, left by a save that did not finish", path)
    return removed
