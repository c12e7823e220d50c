"""RaySession against LocalSession, and dslc's cross-node queue against Ray's own transfers.

Figures, each a ratio against a reference measured in the same run:

1. cluster start: seconds for the local cluster `dslc run --cluster ray` starts (paid once a run);
2. CPU-bound nodes: two nodes each running a numba-compiled loop nest, on the cluster
   (two processes) against LocalSession (two threads of one process); and GIL-bound
   ones, each running an interpreted loop of small ops;
3. per-epoch overhead: a trivial two-node Job (epoch_limiter, no checkpoints), seconds
   per epoch on the cluster against LocalSession (each epoch is one driver round trip
   per node);
4. cross-node queue: 1 MiB float32 batches from a producer node to a consumer node
   through a dslc queue, against the same bytes moved by Ray itself (an actor method
   returning the batch, read through ray.get) and through Ray's ``ray.util.queue.Queue``.

5. data-parallel training: the 784-1024-1024-10 MLP, batch 256 per replica, one BLAS
   thread per node, as 2 shards on 2 Ray nodes against 1 node (samples/s), and the
   step's gradient Allreduce alone (ms per step, bytes per step, GB/s, share of a step).

Usage: python bench/distributed.py [--iters N] [--epochs E] [--batches K] [--reps R]
                                   [--steps S] [--only dp]

GEMM speed depends on which OpenBLAS kernel runs; run it as
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/distributed.py
(the nodes inherit the environment); the kernel is printed.
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


def gil_group(iters: int, nodes=("gil_0", "gil_1")):
    """Nodes each running an interpreted loop of small ops (the GIL is held throughout):
    x <- x * 0.5 + 1 on a 4-vector, ``iters`` times (x tends to 2)."""
    outs = []
    with Cluster(), TaskGroup() as group:
        for n in nodes:
            with Node(n), Task():
                x = ops.ConstantFill([], shape=[4], value=0.0)
                half, one = ops.ConstantFill([], shape=[4], value=0.5), ops.ConstantFill([], shape=[4], value=1.0)
                with ops.loop(iters):
                    ops.Add([ops.Mul([x, half]), one], [x])
                outs.append(final_output(x))
    return group, outs


def bench_gil(session_local, session_ray, iters, reps):
    group, outs = gil_group(iters)

    def check(s):
        s.run(group)
        assert all(np.allclose(o.fetch(), 2.0) for o in outs)

    return median_time(lambda: check(session_local), reps), median_time(lambda: check(session_ray), reps)


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


DP_SIZES = (784, 1024, 1024, 10)
DP_BATCH = 256


def one_blas_thread():
    """In each node's process: one BLAS thread (the limit stays for the process). numba's
    np.dot calls scipy's BLAS, another library than numpy's: loaded first, so that the
    limit reaches it too."""
    import scipy.linalg.cython_blas  # noqa: F401
    from threadpoolctl import threadpool_limits
    global _LIMIT
    _LIMIT = threadpool_limits(limits=1)


def dp_models(shards: int, sync: bool = True):
    """Shard s of the MLP (plain SGD), fed its own batch (blobs fed on its node); without
    ``sync``, the shards train apart (no collectives: the compute alone)."""
    from dslc import brew, data_parallel_model, optimizer
    from dslc.model_helper import ModelHelper

    def forward(model, loss_scale):
        x, sizes = "data", DP_SIZES
        for k in range(len(sizes) - 1):
            x = brew.fc(model, x, f"fc{k}", dim_in=sizes[k], dim_out=sizes[k + 1])
            if k < len(sizes) - 2:
                x = brew.relu(model, x, f"relu{k}")
        _, loss = model.net.SoftmaxWithLoss([x, "label"], ["softmax", "loss"])
        return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]

    models = []
    for s in range(shards):
        model = ModelHelper(name=f"dp{shards}_{s}")
        data_parallel_model.Parallelize_CPU(
            model, lambda m: None, forward, optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.01),
            devices=[0], rendezvous=dict(shard_id=s, num_shards=shards) if shards > 1 and sync else None)
        models.append(model)
    return models


def dp_groups(models, steps):
    from dslc.task import WorkspaceType
    with Cluster():
        with TaskGroup() as init:
            for s, m in enumerate(models):
                with Node(f"dp_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                    ops.net(m.param_init_net)
        with TaskGroup() as train:
            for s, m in enumerate(models):
                with Node(f"dp_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                    with ops.loop(steps):
                        ops.net(m.net)
    return init, train


def allreduce_group(shards, steps):
    """The step's gradients in one Allreduce (as Parallelize makes it across shards), alone."""
    from dslc.task import WorkspaceType
    sizes = DP_SIZES
    shapes = [s for k in range(len(sizes) - 1) for s in ((sizes[k + 1], sizes[k]), (sizes[k + 1],))]
    with Cluster(), TaskGroup() as group:
        for s in range(shards):
            with Node(f"dp_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                grads = [ops.ConstantFill([], [f"g{k}"], shape=list(shape), value=1.0)
                         for k, shape in enumerate(shapes)]
                with ops.loop(steps):
                    ops.Allreduce(grads, grads, tensors=len(grads), shards=shards, shard=s, group="bench")
    return group, sum(4 * int(np.prod(shape)) for shape in shapes)


def bench_data_parallel(backend, steps, reps):
    """samples/s on 1 and 2 nodes, and the Allreduce alone: {"1", "2", "allreduce", "bytes"}."""
    import warnings

    from dslc.lower.nodes import NodeBlobWarning
    warnings.simplefilter("ignore", NodeBlobWarning)  # (each node its own names: a cluster job)
    rng = np.random.RandomState(0)
    out = {}
    with RaySession(backend=backend, node_setup=one_blas_thread) as session:
        for shards, sync in ((1, True), (2, True), (2, False)):
            models = dp_models(shards, sync)
            init, train = dp_groups(models, steps)
            for s in range(shards):
                session.feed_blob("cpu_0/data", rng.randn(DP_BATCH, DP_SIZES[0]).astype(np.float32), node=f"dp_{s}")
                session.feed_blob("cpu_0/label", rng.randint(0, 10, DP_BATCH).astype(np.int32), node=f"dp_{s}")
            session.run(init)
            t = median_time(lambda: session.run(train), reps)
            tag = str(shards) if sync else "apart"
            out[tag] = shards * DP_BATCH * steps / t
            out[f"step{tag}"] = t / steps
        group, nbytes = allreduce_group(2, steps)
        out["allreduce"] = median_time(lambda: session.run(group), reps) / steps
        out["bytes"] = nbytes
        import ray
        out["kernel"] = ray.get(ray.remote(num_cpus=0)(_blas_kernel).remote())
    return out


def _blas_kernel() -> str:
    """The BLAS libraries a node uses (numpy's and scipy's, for numba) and their kernels."""
    one_blas_thread()
    from threadpoolctl import threadpool_info
    info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                     f"{i.get('num_threads')} thread(s)" for i in info) or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20_000_000)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gil-iters", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=20, help="training steps per measured run (data-parallel)")
    ap.add_argument("--only", choices=["dp"], help="run only the data-parallel figures")
    args = ap.parse_args(argv)
    home = tempfile.mkdtemp(prefix="dslc-bench-home-")
    cluster = LocalCluster(short_temp_dir(), num_cpus=2, home=home)
    cluster.start()
    print(f"cluster start (local, one raylet): {cluster.start_seconds:.1f} s")
    try:
        for backend in ("numba",):
            dp = bench_data_parallel(backend, args.steps, args.reps)
            print(f"data-parallel MLP {'-'.join(map(str, DP_SIZES))}, batch {DP_BATCH} per replica, 1 BLAS thread "
                  f"per node ({dp['kernel']}), {backend}: 1 node {dp['1']:.0f} samples/s ({dp['step1'] * 1e3:.1f} ms "
                  f"a step), 2 nodes {dp['2']:.0f} samples/s ({dp['step2'] * 1e3:.1f} ms a step), speed-up "
                  f"{dp['2'] / dp['1']:.2f}x; Allreduce alone {dp['allreduce'] * 1e3:.2f} ms a step "
                  f"({dp['bytes'] / 1e6:.1f} MB of gradients per shard, {dp['bytes'] / dp['allreduce'] / 1e9:.2f} GB/s), "
                  f"{dp['allreduce'] / dp['step2']:.0%} of a 2-node step; 2 nodes training apart (no Allreduce) "
                  f"{dp['apart']:.0f} samples/s ({dp['stepapart'] * 1e3:.1f} ms a step, {dp['apart'] / dp['1']:.2f}x)")
        if args.only == "dp":
            return 0
        with RaySession(backend="numba") as ray_s, LocalSession(backend="numba") as local_s:
            local, ray, alone = bench_cpu(local_s, ray_s, args.iters, args.reps)
            print(f"cpu-bound, 2 nodes x {args.iters} iterations (numba): local {local:.3f} s, "
                  f"cluster {ray:.3f} s, ratio cluster/local {ray / local:.2f} (one node alone, "
                  f"locally: {alone:.3f} s)")
        with RaySession(backend="interp") as ray_s, LocalSession(backend="interp") as local_s:
            local, ray = bench_gil(local_s, ray_s, args.gil_iters, args.reps)
            print(f"GIL-bound, 2 nodes x an interpreted loop of {args.gil_iters} x 2 small ops: local {local:.3f} s, "
                  f"cluster {ray:.3f} s, ratio cluster/local {ray / local:.2f}")
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
