"""RaySession: each Node of a job in its own process of a (local, loopback) Ray cluster."""
from __future__ import annotations

import os

import numpy as np
import pytest

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
    assert ray_session.fetch_blob(outs["b"].names[0] if hasattr(outs["b"], "names") else "", node="b") == 4950


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
