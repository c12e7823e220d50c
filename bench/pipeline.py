"""Records per second through pipe(): a numeric processor on batches, 1, 2 and 4 threads.

The processor computes y = x * x + 3 * x on each batch of int64 records read from a
Dataset and appends y to another Dataset, directly (one pipe) and through a queue of
capacity 8 (two pipes). The references run in the same process: a plain-Python loop
doing the same arithmetic record by record, and numpy on the whole array. Every run's
output is checked against numpy.

Usage: python bench/pipeline.py [--records N] [--batch B] [--backend interp] [--reps R]
"""
from __future__ import annotations

import argparse

import numpy as np

from dslc import core, workspace
from dslc.dataset import Dataset
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import NewRecord, Struct, from_column_list
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, WorkspaceType
from timing import median_time  # noqa: E402  (bench/timing.py)


def python_loop(xs: list) -> list:
    """The reference: the same arithmetic, one record at a time, in plain Python."""
    out = []
    for x in xs:
        out.append(x * x + 3 * x)
    return out


def numpy_whole(x: np.ndarray) -> np.ndarray:
    return x * x + 3 * x


def processor(rec):
    with core.NameScope("poly"):
        out = NewRecord(ops, rec)
    x = rec.x()
    ops.Add([ops.Mul([x, x]), ops.Mul([x, ops.Const(np.array([3]))])], [out.x()])
    return out


def build(n: int, batch: int, threads: int, via_queue: bool):
    """The source (fed now), an init group emptying the destination, and the pipe group."""
    tag = f"{'q' if via_queue else 'd'}{threads}"
    blob = core.BlobReference(f"src{tag}/x")
    workspace.FeedBlob(str(blob), np.arange(n, dtype=np.int64))
    src = Dataset(from_column_list(["x"], col_blobs=[blob]), name=f"src{tag}")
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as init, Task(), core.NameScope(f"dst{tag}"):
        dst = Dataset(Struct(("x", np.int64)), name=f"dst{tag}")
        dst.init_empty(ops)
    with TaskGroup() as tg:
        if via_queue:
            q = pipe(src.reader(batch_size=batch), processor=processor, num_runtime_threads=threads, capacity=8)
            pipe(q, dst.writer(), num_runtime_threads=threads)
        else:
            pipe(src.reader(batch_size=batch), dst.writer(), processor=processor, num_runtime_threads=threads)
    return init, tg, dst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--backend", default="interp")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    n, batch = args.records, args.batch
    x = np.arange(n, dtype=np.int64)
    want = numpy_whole(x)
    xs = x.tolist()
    t_py = median_time(lambda: python_loop(xs), args.reps)
    t_np = median_time(lambda: numpy_whole(x), args.reps)
    assert python_loop(xs) == want.tolist()
    print(f"pipe of {n} int64 records in batches of {batch}, y = x*x + 3*x, backend {args.backend}")
    print(f"  {'plain Python loop':<24}{n / t_py:12,.0f} records/s")
    print(f"  {'numpy, whole array':<24}{n / t_np:12,.0f} records/s")
    print("  time ratios: the pipe's time over the reference's (2.0x = twice as long)")
    print(f"  {'pipe':<24}{'records/s':>12}{'vs Python':>12}{'vs numpy':>12}")
    ws = workspace.current()
    with LocalSession(ws, backend=args.backend) as session:
        for via_queue in (False, True):
            for threads in (1, 2, 4):
                init, tg, dst = build(n, batch, threads, via_queue)
                session.compile(tg)

                def once():
                    session.run(init)
                    session.run(tg)

                t = median_time(once, args.reps)
                got = np.sort(ws.fetch(str(dst.content().x())))
                assert np.array_equal(got, want), "the pipe lost or duplicated records"
                label = f"{'via queue(8)' if via_queue else 'direct'}, {threads} thread{'s' * (threads > 1)}"
                print(f"  {label:<24}{n / t:12,.0f}{t / t_py:11.2f}x{t / t_np:11.1f}x")


if __name__ == "__main__":
    main()
