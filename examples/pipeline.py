"""A data pipeline: 1000 numbers through a processor on four threads, a queue of 8, and a sum.

Two pipes run at once. The first reads 0, 1, ..., 999 (a counter, limited to 1000
reads in all) on 4 runtime threads and writes 2x + 1 into a new queue of capacity 8,
blocking while the queue is full. The second drains that queue, counting the
records and adding them up; it stops once the first pipe has closed the queue and
nothing is left in it. The sum of 2x + 1 for x < 1000 is 1000 * 1000.

Expected output (dslc run examples/pipeline.py):
    records = 1000
    total = 1000000
"""
from dslc import core
from dslc.dataio import CountUntil
from dslc.net_builder import ops
from dslc.pipeline import pipe, pipe_and_output
from dslc.schema import NewRecord

N = 1000


def double_plus_one(rec):
    with core.NameScope("double_plus_one"):
        out = NewRecord(ops, rec)
    ops.Add([ops.Add([rec.iter(), rec.iter()]), ops.Const(1)], [out.iter()])
    return out


def build_job():
    records, total = core.BlobReference("records"), core.BlobReference("total")

    def add_up(rec):
        with ops.task_init():  # once per run of the pipe's task
            ops.Const(0, records)
            ops.Const(0, total)
        ops.Add([records, ops.Const(1)], [records])
        ops.Add([total, rec.iter()], [total])

    queue = pipe(CountUntil(N), processor=double_plus_one, num_runtime_threads=4, capacity=8)
    _, (n, s) = pipe_and_output(queue, processor=add_up, final_outputs=[records, total])
    return {"records": n, "total": s}
