"""RaySession: each Node of a job in its own process of a (local, loopback) Ray cluster."""
from __future__ import annotations

import os

import pytest

from dslc import core
from dslc.ir.diagnostics import ExecutionError
from dslc.net_builder import ops
from dslc.task import Cluster, Node, Task, TaskGroup, final_output
from markers import Markers

M = Markers(__file__)


def sum_to(n):
    total = ops.Const(0)
    with ops.loop(n) as loop:
        ops.Add([total, loop.iter()], [total])
    return total


def test_each_node_runs_its_tasks_in_its_own_process(ray_session):
    pids = {}

    def note_pid(node):
        return lambda inputs, outputs: pids.setdefault(node, os.getpid())

    with Cluster(), TaskGroup() as group:
        outs = {}
        for node, n in (("a", 10), ("b", 100)):
            with Node(node), Task():
                ops.Python(note_pid(node))([], [])  # runs in the node's process: pids stays empty here
                outs[node] = final_output(sum_to(n))
    ray_session.run(group)
    assert outs["a"].fetch() == 45 and outs["b"].fetch() == 4950  # sum(range(n)) = n(n-1)/2
    assert pids == {}
    info = {n: ray_session.node_info(n) for n in ("a", "b")}
    assert len({i["pid"] for i in info.values()} | {os.getpid()}) == 3
    ray_session.run(group)  # the second run reuses the nodes' compiled programs and root workspaces
    assert outs["b"].fetch() == 4950
    assert ray_session.fetch_blob(outs["b"].names[0], node="b") == 4950  # FetchBlob names the node


def test_a_failing_task_is_located_by_node_task_and_line(ray_session):
    with Cluster(), TaskGroup() as group:
        with Node("ok"), Task(name="waits"):
            q = ops.CreateBlobsQueue([], capacity=1, num_blobs=1)
            ops.DequeueBlobs(q, 1)  # blocks forever unless the node is stopped
        with Node("bad"), Task(name="fails"):
            ops.Python(lambda i, o: 1 / 0)([], [])  # @raise
    with pytest.raises(ExecutionError) as err:
        ray_session.run(group)
    M.assert_at(err.value, "raise")
    assert "node 'bad'" in str(err.value) and "fails" in str(err.value)
    assert err.value.node == "bad"
    import ray
    assert ray.get(ray_session.actor("ok").running.remote()) == 0  # the waiting node stopped


def test_two_raylets_place_nodes_on_the_raylet_offering_their_resource(ray_session):
    import ray
    with Cluster(), TaskGroup() as group:
        for node in ("host_a", "host_b"):
            with Node(node), Task():
                final_output(ops.Const(1))
    ray_session.run(group)
    by_resource = {}
    for n in ray.nodes():
        for r in ("host_a", "host_b"):
            if r in n["Resources"]:
                by_resource[r] = n["NodeID"]
    assert len(set(by_resource.values())) == 2
    for node in ("host_a", "host_b"):
        assert ray_session.node_info(node)["node_id"] == by_resource[node]


N_RECORDS = 100_000


def test_a_queue_feeds_two_consumer_nodes_each_record_exactly_once_in_order(ray_session):
    """100k records 0..N-1 from a producer node to two consumer nodes. Each consumer counts
    its records, sums them and their squares, and counts records not above the one
    before (order). Two consumers together must see every record once: counts adding up
    to N, sums to N(N-1)/2, squares to (N-1)N(2N-1)/6, and no order violation."""
    with Cluster():
        with Node("producer"):
            setup = Task()  # a GLOBAL run: the queue stays in the producer's workspace
            with setup:
                q = ops.CreateBlobsQueue([], ["records"], capacity=512, num_blobs=1)
        with TaskGroup() as group:
            with Node("producer"), Task():
                with ops.loop(N_RECORDS) as loop:
                    ops.EnqueueBlobs([q, loop.iter()], [])
                ops.CloseBlobsQueue([q], [])
            stats = {}
            for c in ("consumer_1", "consumer_2"):
                with Node(c), Task():
                    one = ops.Const(1)
                    count, total, squares, disorder, last = (ops.Const(v) for v in (0, 0, 0, 0, -1))
                    with ops.loop():
                        rec, done = ops.SafeDequeueBlobs([q], 2)
                        ops.stop_if(done)
                        ops.Add([count, one], [count])
                        ops.Add([total, rec], [total])
                        ops.Add([squares, ops.Mul([rec, rec])], [squares])
                        ops.Add([disorder, ops.Cast(ops.LE([rec, last]), to=core.DataType.INT64)], [disorder])
                        ops.Copy([rec], [last])
                    stats[c] = [final_output(b) for b in (count, total, squares, disorder)]
    ray_session.run(setup)
    ray_session.run(group)
    got = {c: [int(o.fetch()) for o in outs] for c, outs in stats.items()}
    n = N_RECORDS
    assert sum(g[0] for g in got.values()) == n
    assert sum(g[1] for g in got.values()) == n * (n - 1) // 2
    assert sum(g[2] for g in got.values()) == (n - 1) * n * (2 * n - 1) // 6
    assert [g[3] for g in got.values()] == [0, 0]
    assert all(g[0] > 0 for g in got.values())  # both consumers took part


def test_the_driver_finds_ray_through_the_backend_registry():
    # the driver imports no backend by name: RaySession's cluster starter, splitter and node
    # worker come from the registry's cluster backend
    from dslc import backends
    from dslc.backends.ray import RayCluster
    from dslc.backends.ray.worker import NodeWorker
    from dslc.ir.diagnostics import DSLError
    ray_ = backends.cluster("ray")
    assert ray_ is RayCluster and ray_.node_worker() is NodeWorker
    assert "ray" not in backends.names()  # it runs no module itself: not a --backend choice
    with pytest.raises(DSLError, match="unknown cluster backend 'mpi'"):
        backends.cluster("mpi")


def test_a_net_fed_other_sizes_reuses_one_compile_with_the_dim_unknown(ray_session):
    """As LocalSession does (dslc/driver/variants.py): fed 3, 5, 8 and 3 values, the net is
    lowered for length 3, once more with the length unknown, and that compile serves 8 and 3
    again; every result is numpy's."""
    import numpy as np
    net = core.Net("doubled")
    net.Scale("x", "y", scale=2.0)
    before = ray_session.compiles
    for n in (3, 5, 8, 3):
        x = np.arange(n, dtype=np.float32) + 0.5
        ray_session.feed_blob("x", x)
        ray_session.run(net)
        np.testing.assert_array_equal(ray_session.fetch_blob("y"), x * 2)
    assert ray_session.compiles - before == 2
    assert "f32[?]" in ray_session.compile(net).text


def test_a_node_forgets_the_programs_of_variants_the_driver_evicted(ray_session, monkeypatch):
    """A runnable keeps at most MAX_VARIANTS compiles (2 here): fed four ranks in turn (each
    rank its own variant), the node the net runs on must hold no more programs than that,
    as a LocalSession holds no more, and every result is still numpy's."""
    import numpy as np
    from dslc.driver import distributed

    monkeypatch.setattr(distributed, "MAX_VARIANTS", 2)
    net = core.Net("tripled")
    net.Scale("x", "y", scale=3.0)
    for shape in ((3,), (2, 2), (2, 1, 2), (1, 2, 1, 2), (3,)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 0.25
        ray_session.feed_blob("x", x)
        ray_session.run(net)
        np.testing.assert_array_equal(ray_session.fetch_blob("y"), x * 3)
    assert ray_session.compiles >= 5  # (the last (3,) was evicted: lowered again)
    assert ray_session.node_info("local")["programs"] == 2
