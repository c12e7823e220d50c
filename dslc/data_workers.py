"""Python threads feeding a model's input blobs through a queue (Caffe2's ``data_workers``).

    coordinator = data_workers.init_data_input_workers(model, ["data", "label"], fetch, 32)
    coordinator.start()
    workspace.RunNetOnce(model.param_init_net)   # makes the queue
    workspace.CreateNet(model.net)               # its first op dequeues a batch into data, label
    for _ in range(steps):
        workspace.RunNet(model.net)

``fetch(worker_id, batch_size)`` returns one array per input blob, with any number of
rows; the workers cut the rows into batches of ``batch_size`` (along each input's
``batch_columns`` axis, default 0) and enqueue them (``dont_rebatch``: as fetched).
The queue is made by the init net (``CreateBlobsQueue``, ``max_buffered_batches``
records); the net dequeues at its start, waiting up to ``timeout`` seconds for a batch.
Stopping the workers closes the queue.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from dslc import parallel_workers
from dslc.parallel_workers import Metrics, State, WorkerCoordinator, run_worker
from dslc import workspace
from dslc import core


class GlobalCoordinator(parallel_workers.GlobalWorkerCoordinator):
    """The data workers of the process (start, stop, and stop one input source)."""

    def get_queue_size(self, input_source_name):
        for c in self._coordinators:
            if c._worker_name == input_source_name:
                return c._state.queue_size()
        return 0


global_coordinator = GlobalCoordinator()


class BatchFeeder(State):
    """Cuts fetched rows into batches and puts them on the workspace's queue."""

    def __init__(self, net, input_blob_names, batch_size, queue_name, dont_rebatch, batch_columns):
        self._net = net
        self._names = list(input_blob_names)
        self._batch_size = int(batch_size)
        self._queue_name = queue_name
        self._dont_rebatch = dont_rebatch
        self._columns = list(batch_columns) if batch_columns else [0] * len(self._names)
        self._pending: list[list[np.ndarray]] = []  # rows fetched and not yet batched, per input
        self._lock = threading.Lock()
        self._order = threading.Lock()
        self._inputs = 0  # batches enqueued
        self._active = False
        self._workspace = None

    def start(self):
        self._workspace = workspace.current()
        self._active = True

    def stop(self):
        self._active = False
        q = self._queue(wait=False)
        if q is not None:
            q.close()

    def cleanup(self):
        pass

    def queue_size(self) -> int:
        q = self._queue(wait=False)
        return 0 if q is None else len(q)

    def _queue(self, wait=True):
        """The runtime queue the init net made (waiting for it while the workers are active)."""
        while True:
            cell = self._workspace.lookup(self._queue_name) if self._workspace is not None else None
            if cell is not None and cell.v is not None:
                return cell.v
            if not wait or not self._active:
                return None
            time.sleep(0.01)

    def put(self, worker_id, arrays):
        if len(arrays) != len(self._names):
            raise ValueError(f"the fetch function gave {len(arrays)} arrays for the {len(self._names)} "
                             f"inputs {self._names}")
        arrays = [np.asarray(a) for a in arrays]
        if self._dont_rebatch:
            return self._enqueue(arrays)
        with self._order:  # (batches go on the queue in the order they were cut)
            with self._lock:
                self._pending.append(arrays)
                batches = self._cut()
            for batch in batches:
                if not self._enqueue(batch):
                    return

    def _cut(self) -> list:
        """Whole batches from the pending rows (the rest stays pending)."""
        rows = sum(a[0].shape[self._columns[0]] for a in self._pending)
        if rows < self._batch_size:
            return []
        joined = [np.concatenate([p[k] for p in self._pending], axis=self._columns[k])
                  for k in range(len(self._names))]
        n = rows // self._batch_size
        out = []
        for b in range(n):
            at = slice(b * self._batch_size, (b + 1) * self._batch_size)
            out.append([np.take(a, range(at.start, at.stop), axis=c) for a, c in zip(joined, self._columns)])
        rest = [np.take(a, range(n * self._batch_size, rows), axis=c) for a, c in zip(joined, self._columns)]
        self._pending = [rest] if rest[0].shape[self._columns[0]] else []
        return out

    def _enqueue(self, arrays) -> bool:
        q = self._queue()
        while q is not None and self._active:
            if len(q) < q.capacity:  # (only workers put; a full queue waits for the net)
                if q.put(tuple(np.ascontiguousarray(a) for a in arrays)):
                    with self._lock:
                        self._inputs += 1
                    return True
                return False  # closed
            time.sleep(0.001)
        return False


class _DataWorker(parallel_workers.Worker):
    def __init__(self, coordinator, worker_id, fetch_fun, metrics, feeder, batch_size):
        super().__init__(coordinator, worker_id, fetch_fun, metrics)
        self._feeder, self._batch_size = feeder, batch_size

    def run(self):
        arrays = self._worker_fun(self._worker_id, self._batch_size)
        if arrays is not None and self._coordinator.is_active():
            self._feeder.put(self._worker_id, arrays)


_queues = [0]


def init_data_input_workers(net, input_blob_names, fetch_fun, batch_size, num_worker_threads=2,
                            input_source_name="train", max_buffered_batches=800, init_fun=None,
                            external_loggers=None, dont_rebatch=False, batch_columns=None, timeout=600):
    """Workers calling ``fetch_fun`` and a dequeue op at the start of ``net`` (a ModelHelper or
    a Net; its init net makes the queue); returns the process-wide data coordinator."""
    model_net = getattr(net, "net", net)
    init_net = getattr(net, "param_init_net", None)
    _queues[0] += 1
    queue_name = f"{input_source_name}/data_queue_{_queues[0]}"
    make = init_net if init_net is not None else model_net
    make.CreateBlobsQueue([], [queue_name], capacity=max(1, int(max_buffered_batches)),
                          num_blobs=len(input_blob_names))
    _prepend_dequeue(model_net, queue_name, input_blob_names, timeout)
    feeder = BatchFeeder(model_net, input_blob_names, batch_size, queue_name, dont_rebatch, batch_columns)
    ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = WorkerCoordinator(input_source_name, ids, init_fun, state=feeder)
    metrics = Metrics(external_loggers)
    coordinator._workers = [
        threading.Thread(target=run_worker, name=f"data_workers worker id {i}",
                         args=[coordinator, _DataWorker(coordinator, i, fetch_fun, metrics, feeder, batch_size)])
        for i in ids]
    global_coordinator.add(coordinator)
    return global_coordinator


def _prepend_dequeue(net, queue_name, names, timeout):
    """The net's first op: dequeue one batch into the input blobs (through the net's NetDef)."""
    proto = net.Proto()
    ops = list(proto.op)
    dequeue = core.CreateOperator("DequeueBlobs", [queue_name], list(names), timeout_secs=float(timeout))
    del proto.op[:]
    proto.op.extend([dequeue] + ops)
