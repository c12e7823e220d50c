"""RaySession against LocalSession, and dslc's cross-node queue against Ray's own transfers.

Figures, each a ratio against a reference measured in the same run:

1. cluster start: seconds for the local cluster `dslc run --cluster ray` starts (paid once a run);
2. CPU-bound nodes: two nodes each running a numba-compiled loop nest, on the cluster
   (two processes) against LocalSession (two threads of one process);
3. per-epoch overhead: a trivial two-node Job (epoch_limiter, no checkpoints), seconds
   per epoch on the cluster against LocalSession (each epoch is one driver round trip
   per node);
4. cross-node queue: 1 MiB float32 batches from a producer node to a consumer node
   through a dslc queue, against the same bytes moved by Ray itself (an actor method
   returning the batch, read through ray.get) and through Ray's ``ray.util.queue.Queue``.

Usage: python bench/distributed.py [--iters N] [--epochs E] [--batches K] [--reps R]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile

import numpy as np

from dslc.backends.ray.cluster import LocalCluster, short_temp_dir
from dslc import core
from dslc.checkpoint import Job, JobRunner, epoch_limiter
from dslc.distributed import RaySession
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Cluster, Node, Task, TaskGroup, final_output
from timing import median_time  # noqa: E402  (bench/timing.py)

MIB_FLOATS = (1 << 20) // 4


def cpu_group(iters: int, nodes=("cpu_0", "cpu_1")):
    """Nodes each running a promoted loop nest (the sum of sqrt(i) for i < ``iters``)."""
    outs = []
    with Cluster(), TaskGroup() as group:
        for n in nodes:
            with Node(n), Task():
                total = ops.Cast(ops.Const(0.0), to=core.DataType.DOUBLE)
                with ops.loop(iters) as loop:
                    ops.Add([total, ops.Sqrt(ops.Cast(loop.iter(), to=core.DataType.DOUBLE))], [total])
                outs.append(final_output(total))
    expect = float(np.sum(np.sqrt(np.arange(iters, dtype=np.float64))))
    return group, outs, expect


def bench_cpu(session_local, session_ray, iters, reps):
    group, outs, expect = cpu_group(iters)

    def check(s):
        s.run(group)
        assert np.allclose([float(o.fetch()) for o in outs], expect, rtol=1e-9)

    local = median_time(lambda: check(session_local), reps)
    ray = median_time(lambda: check(session_ray), reps)
    group, outs, expect = cpu_group(iters, nodes=("cpu_alone",))
    alone = median_time(lambda: check(session_local), reps)
    return local, ray, alone


def trivial_job(epochs: int):
    with Cluster():
        with Job() as job:
            for n in ("e_0", "e_1"):
                with Node(n), Task():
                    ops.Const(1)
        epoch_limiter(job, epochs)
    return job


def bench_epochs(session_local, session_ray, epochs, reps):
    job = trivial_job(epochs)

    def go(s):
        assert JobRunner(job).train(s) == epochs

    local = median_time(lambda: go(session_local), reps) / epochs
    ray = median_time(lambda: go(session_ray), reps) / epochs
    return local, ray


def queue_group(batches: int):
    with Cluster():
        with Node("q_producer"):
            setup = Task()
            with setup:
                q = ops.CreateBlobsQueue([], ["q"], capacity=4, num_blobs=1)
        with TaskGroup() as group:
            with Node("q_producer"), Task():
                batch = ops.ConstantFill([], shape=[MIB_FLOATS], value=1.0)
                with ops.loop(batches):
                    ops.EnqueueBlobs([q, batch], [])
                ops.CloseBlobsQueue([q], [])
            with Node("q_consumer"), Task():
                count = ops.Const(0)
                one = ops.Const(1)
                with ops.loop():
                    rec, done = ops.SafeDequeueBlobs([q], 2)
                    ops.stop_if(done)
                    ops.Add([count, one], [count])
                out = final_output(count)
    return setup, group, out


def bench_queue(session_ray, batches, reps):
    import ray
    from ray.util.queue import Queue

    setup, group, out = queue_group(batches)

    def dslc_queue():
        session_ray.run(setup)
        session_ray.run(group)
        assert int(out.fetch()) == batches

    @ray.remote(num_cpus=0)
    class Producer:
        def batch(self):
            return np.ones(MIB_FLOATS, dtype=np.float32)

        def fill(self, queue, k):
            for _ in range(k):
                queue.put(np.ones(MIB_FLOATS, dtype=np.float32))

    @ray.remote(num_cpus=0)
    class Consumer:
        def pull(self, producer, k):
            return sum(float(ray.get(producer.batch.remote()).sum()) for _ in range(k))

        def drain(self, queue, k):
            return sum(float(queue.get().sum()) for _ in range(k))

    p, c = Producer.remote(), Consumer.remote()
    ray.get([p.batch.remote(), c.pull.remote(p, 1)])

    def objects():
        assert ray.get(c.pull.remote(p, batches)) == float(batches * MIB_FLOATS)

    def ray_queue():
        queue = Queue(maxsize=4)
        fill = p.fill.remote(queue, batches)
        assert ray.get(c.drain.remote(queue, batches)) == float(batches * MIB_FLOATS)
        ray.get(fill)
        ray.kill(queue.actor)

    times = {name: median_time(f, reps) for name, f in
             (("dslc", dslc_queue), ("objects", objects), ("ray_queue", ray_queue))}
    for a in (p, c):
        ray.kill(a)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20_000_000)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    home = tempfile.mkdtemp(prefix="dslc-bench-home-")
    cluster = LocalCluster(short_temp_dir(), num_cpus=2, home=home)
    cluster.start()
    print(f"cluster start (local, one raylet): {cluster.start_seconds:.1f} s")
    try:
        with RaySession(backend="numba") as ray_s, LocalSession(backend="numba") as local_s:
            local, ray, alone = bench_cpu(local_s, ray_s, args.iters, args.reps)
            print(f"cpu-bound, 2 nodes x {args.iters} iterations (numba): local {local:.3f} s, "
                  f"cluster {ray:.3f} s, ratio cluster/local {ray / local:.2f} (one node alone, "
                  f"locally: {alone:.3f} s)")
        with RaySession(backend="interp") as ray_s, LocalSession(backend="interp") as local_s:
            local, ray = bench_epochs(local_s, ray_s, args.epochs, args.reps)
            print(f"trivial 2-node job, per epoch: local {local * 1e3:.2f} ms, cluster {ray * 1e3:.2f} ms "
                  f"(overhead {(ray - local) * 1e3:.2f} ms per epoch, {ray / local:.1f}x)")
            t = bench_queue(ray_s, args.batches, args.reps)
            mib = args.batches
            print(f"cross-node queue, {mib} x 1 MiB float32: dslc queue {mib / t['dslc']:.0f} MiB/s, "
                  f"ray object refs {mib / t['objects']:.0f} MiB/s, ray.util.queue {mib / t['ray_queue']:.0f} MiB/s; "
                  f"dslc / object refs {t['objects'] / t['dslc']:.2f}x, "
                  f"ray.util.queue / object refs {t['objects'] / t['ray_queue']:.2f}x")
    finally:
        cluster.stop()
        cluster.remove_temp_dir()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
