"""RecordQueue: reader threads feed a queue through a processing net; consumers drain it."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.dataset import Dataset
from dslc.ir.diagnostics import TraceError
from dslc.record_queue import RecordQueue
from dslc.schema import FeedRecord, List, NewRecord, Struct, from_blob_list

SCHEMA = Struct(("id", np.int64), ("tags", List(np.int32)))
# rows: (1, [5]), (2, [6, 7]), (3, []), (4, [8, 9, 10])
CONTENTS = [np.array([1, 2, 3, 4]), np.array([1, 2, 0, 3], np.int32), np.array([5, 6, 7, 8, 9, 10], np.int32)]


def _source(net):
    ds = Dataset(SCHEMA, name="src")
    ds.init_empty(net)
    blobs = NewRecord(net, from_blob_list(SCHEMA, CONTENTS))
    FeedRecord(blobs, CONTENTS)
    ds.writer(init_net=net).write_record(net, blobs)
    return ds


@pytest.mark.parametrize("producers, consumers", [(1, 1), (4, 3)])
def test_records_pass_through_the_queue_once_each(session, producers, consumers):
    init = core.Net("init")
    src = _source(init)
    reader = src.reader(init_net=init)
    dst = Dataset(from_blob_list(SCHEMA, CONTENTS), name="dst")
    dst.init_empty(init)
    dst_writer = dst.writer(init_net=init)
    session.run(init)

    queue = RecordQueue(SCHEMA, num_threads=producers, capacity=2)

    def times_ten(net, rec):  # the processing step: ids * 10
        out = from_blob_list(rec, [net.Mul([rec.id(), net.Const(np.int64(10))])] + rec.field_blobs()[1:])
        return out

    q_reader, producer, exit_step, schema = queue.build(reader, times_ten)
    assert schema is queue.schema
    consumer_steps = []
    for i in range(consumers):
        read = core.Net(f"read_{i}")
        should_stop, rec = q_reader.read_record(read)
        write = core.Net(f"write_{i}")
        dst_writer.write(write, rec.field_blobs())
        consumer_steps.append(core.execution_step(f"consumer_{i}", [core.execution_step(f"r{i}", read),
                                                                    core.execution_step(f"w{i}", write)],
                                                  should_stop_blob=should_stop))
    work = core.execution_step("work", [
        core.execution_step("produce", [producer, exit_step]),
        core.execution_step("consume", consumer_steps, concurrent_substeps=True)],
        concurrent_substeps=True)
    plan = core.Plan("queue")
    plan.AddStep(work)
    session.run(plan)

    ids, lengths, tags = [workspace.FetchBlob(b) for b in dst.get_blobs()]
    # records arrive in any order, each with its own tags
    rows, pos = [], 0
    for i, n in zip(ids.tolist(), lengths.tolist()):
        rows.append((i, tags[pos:pos + n].tolist()))
        pos += n
    assert sorted(rows) == [(10, [5]), (20, [6, 7]), (30, []), (40, [8, 9, 10])]


def test_fields_as_names_and_bad_fields():
    q = RecordQueue(["a", "b:lengths", "b:values"], name="named")
    assert q.schema.field_names() == ["a", "b:lengths", "b:values"]
    assert workspace.HasBlob(str(q.blobs_queue))  # made at once, in the current workspace
    with pytest.raises(TraceError, match="Struct or a list"):
        RecordQueue(np.int32)
