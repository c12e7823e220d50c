"""A queue of records fed by reader threads (Caffe2's ``record_queue``).

``RecordQueue(fields, num_threads=n)`` makes the queue at once, in the current
workspace. ``build(reader, process)`` returns ``(queue_reader, producer_step,
exit_step, schema)``: the producer step runs ``n`` concurrent loops, each reading a
record from ``reader``, optionally passing it through ``process(net, record)``, and
enqueuing it; run it concurrently with the consumers, then ``exit_step`` closes the
queue so that the consumers' ``should_stop`` turns True once it is drained.
"""
from __future__ import annotations

from dslc import core, workspace
from dslc.dataio import Reader, Writer
from dslc.ir.diagnostics import TraceError
from dslc.schema import Field, Struct, from_column_list
from dslc.trace.tracing import user_location


class _QueueReader(Reader):
    """Dequeues one record per read; should_stop is True once the queue is closed and empty."""

    def __init__(self, blobs_queue, schema, name=None):
        super().__init__(schema)
        self.blobs_queue = blobs_queue
        self.name = name

    def read(self, read_net):
        with core.NameScope(read_net.NextName(self.name)):
            status = read_net.NextName()
            fields = read_net.SafeDequeueBlobs(self.blobs_queue, self._schema.field_names() + [status])
            return fields[-1], list(fields[:-1])


class _QueueWriter(Writer):
    """Enqueues records (after checking they form a consistent record of the schema)."""

    def __init__(self, blobs_queue, schema):
        self.blobs_queue = blobs_queue
        self.schema = schema

    def write(self, writer_net, fields):
        if isinstance(fields, Field):
            fields = fields.field_blobs()
        fields = list(fields)
        writer_net.CheckDatasetConsistency(fields, [], fields=self.schema.field_names())
        status = writer_net.NextName()
        writer_net.SafeEnqueueBlobs([self.blobs_queue] + fields, fields + [status])
        return status


class RecordQueue:
    """A bounded queue of records, with reader threads feeding it (see the module docstring)."""

    def __init__(self, fields, name=None, capacity=1, enforce_unique_name=False, num_threads=1):
        if isinstance(fields, list):
            fields = from_column_list(fields)
        if not isinstance(fields, Struct):
            raise TraceError(f"RecordQueue fields must be a schema.Struct or a list of field names, "
                             f"got {type(fields).__name__}", user_location())
        self.schema = fields
        self.name = name or "queue"
        self.num_threads = num_threads
        init_net = core.Net(self.name + "/init_net")
        self.blobs_queue = init_net.CreateBlobsQueue([], 1, capacity=capacity,
                                                     num_blobs=len(fields.field_names()),
                                                     enforce_unique_name=enforce_unique_name)
        workspace.RunNetOnce(init_net)  # as in Caffe2: the queue exists from now on
        self.writer = _QueueWriter(self.blobs_queue, self.schema)
        self.reader = _QueueReader(self.blobs_queue, self.schema, self.name + "_reader")
        exit_net = core.Net(self.name + "/exit_net")
        exit_net.CloseBlobsQueue(self.blobs_queue, 0)
        self.exit_step = core.execution_step(f"{exit_net}_close_step", exit_net)

    def build(self, reader, process=None):
        """The queue's reader, the producer step, the exit step and the schema."""
        producers = []
        for i in range(self.num_threads):
            read_net = core.Net(f"reader_{i}")
            should_stop, fields = reader.read_record(read_net)
            write_net = core.Net(f"queue_writer{i}")
            blobs = fields.field_blobs()
            if process:
                blobs = process(write_net, fields).field_blobs()
            self.writer.write(write_net, blobs)
            producers.append(core.execution_step(
                f"producer_{i}", [core.execution_step(f"reader_{i}", read_net),
                                  core.execution_step(f"queue_writer{i}", write_net)],
                should_stop_blob=should_stop))
        step = core.execution_step("producers", producers, concurrent_substeps=True)
        return self.reader, step, self.exit_step, self.schema


__all__ = ["RecordQueue"]
