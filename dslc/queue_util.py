"""Queues between pipes (Caffe2's ``queue_util``).

A ``Queue`` is a bounded FIFO of records held in the blob ``<net>/handler``, where the
net is ``Net(name)`` made where the Queue is made (inside a Task: ``<task>/queue``).
It is created once per node and TaskGroup run, by the group's local setup, from the
schema its first writer brings. Readers and writers close it when their task ends:
a finished producer lets consumers drain and stop; a finished consumer makes
producers blocked on a full queue fail, and so stop too.
"""
from __future__ import annotations

import logging

from dslc import core, dataio
from dslc.ir.diagnostics import TraceError
from dslc.task import TaskGroup
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


class _QueueReader(dataio.Reader):
    def __init__(self, wrapper, num_dequeue_records=1):
        if wrapper.schema() is None:
            raise TraceError("this queue has no schema yet, so it cannot be read", user_location(),
                             "give Queue(schema=...), or create its writer (pipe into it) first")
        super().__init__(wrapper.schema())
        self._wrapper = wrapper
        self._num_dequeue_records = num_dequeue_records

    def setup_ex(self, init_net, exit_net):
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def read_ex(self, local_init_net, local_finish_net):
        self._wrapper._new_reader(local_init_net)
        net = core.Net("dequeue")
        names = self.schema().field_names()
        fields, status = dequeue(net, self._wrapper.queue(), len(names), field_names=names,
                                 num_records=self._num_dequeue_records)
        return [net], status, fields

    def read(self, net):
        nets, _, fields = self.read_ex(net, None)
        return nets, fields


class _QueueWriter(dataio.Writer):
    def __init__(self, wrapper):
        self._wrapper = wrapper

    def setup_ex(self, init_net, exit_net):
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def write_ex(self, fields, local_init_net, local_finish_net, status):
        self._wrapper._new_writer(self.schema(), local_init_net)
        net = core.Net("enqueue")
        enqueue(net, self._wrapper.queue(), fields, status)
        return [net]


class QueueWrapper(dataio.Pipe):
    """Readers and writers of an existing queue blob ``handler``."""

    def __init__(self, handler, schema=None, num_dequeue_records=1):
        super().__init__(schema, TaskGroup.LOCAL_SETUP)
        self._queue = handler
        self._num_dequeue_records = num_dequeue_records

    def reader(self):
        return _QueueReader(self, num_dequeue_records=self._num_dequeue_records)

    def writer(self):
        return _QueueWriter(self)

    def queue(self):
        return self._queue


class Queue(QueueWrapper):
    """A new queue of ``capacity`` records; ``num_dequeue_records`` records per read."""

    def __init__(self, capacity, schema=None, name="queue", num_dequeue_records=1):
        net = core.Net(name)
        super().__init__(net.AddExternalInput(net.NextName("handler")), schema,
                         num_dequeue_records=num_dequeue_records)
        self.capacity = capacity
        self._setup_done = False

    def setup(self, global_init_net):
        if not self._schema:
            raise TraceError(f"queue {self._queue} never learnt its schema", user_location(),
                             "give Queue(schema=...) or write to it from a pipe")
        self._setup_done = True
        names = self._schema.field_names()
        global_init_net.CreateBlobsQueue([], [self._queue], capacity=self.capacity,
                                         num_blobs=len(names), field_names=names)


def enqueue(net, queue, data_blobs, status=None):
    """Record a SafeEnqueueBlobs of ``data_blobs``; returns the status blob (True: failed)."""
    if status is None:
        status = net.NextName("status")
    blobs = []
    for b in data_blobs:
        if b in blobs:  # enqueue moves its inputs into the queue: a blob cannot go twice
            logger.warning("copying blob %s to enqueue it twice", b)
            b = net.Copy(b)
        blobs.append(b)
    return net.SafeEnqueueBlobs([queue] + blobs, blobs + [status])[-1]


def dequeue(net, queue, num_blobs, status=None, field_names=None, num_records=1):
    """Record a SafeDequeueBlobs; returns (the record's blobs, the status blob)."""
    if field_names is not None:
        if len(field_names) != num_blobs:
            raise TraceError(f"dequeue of {num_blobs} blobs got {len(field_names)} field names",
                             user_location())
        names = [net.NextName(n) for n in field_names]
    else:
        names = [net.NextName("data", i) for i in range(num_blobs)]
    if status is None:
        status = net.NextName("status")
    out = list(net.SafeDequeueBlobs(queue, names + [status], num_records=num_records))
    return out[:-1], out[-1]


def close_queue(step, *queues):
    """``step``, then a step closing ``queues``."""
    net = core.Net("close_queue_net")
    for q in queues:
        net.CloseBlobsQueue([q], 0)
    closing = core.execution_step(f"{net.Name()}_step", net)
    return core.execution_step(f"{net.Name()}_wraper_step", [step, closing])


__all__ = ["Queue", "QueueWrapper", "enqueue", "dequeue", "close_queue"]
