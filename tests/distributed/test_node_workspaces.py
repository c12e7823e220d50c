"""One workspace per node: a blob written by tasks of two nodes is shared by LocalSession
(as in Caffe2) but not on a cluster, so compiling such a job warns, once, naming both lines."""
from __future__ import annotations

import os
import warnings

from dslc.lower.nodes import NodeBlobWarning
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Cluster, Node, Task, TaskGroup, final_output
from markers import Markers

M = Markers(__file__)


def two_nodes_one_blob():
    with Cluster(), TaskGroup() as group:
        with Node("n1"), Task():
            ops.ConstantFill([], ["shared_name"], shape=[], value=1.0)  # @first
        with Node("n2"), Task():
            ops.ConstantFill([], ["shared_name"], shape=[], value=2.0)  # @second
            out = final_output(ops.Const(7))
    return group, out


def test_two_nodes_writing_one_blob_warn_once_with_both_lines(backend):
    group, out = two_nodes_one_blob()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with LocalSession(backend=backend) as s:
            s.run(group)
            s.run(group)  # compiled once: no second warning
    mine = [w for w in caught if issubclass(w.category, NodeBlobWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    for tag in ("first", "second"):
        assert f"test_node_workspaces.py:{M.line_of(tag)}" in text
    assert "'shared_name'" in text and "'n1'" in text and "'n2'" in text
    assert (os.path.abspath(mine[0].filename), mine[0].lineno) == (M.path, M.line_of("second"))
    assert out.fetch() == 7  # the local behaviour is kept


def test_nodes_with_their_own_names_do_not_warn(backend):
    with Cluster(), TaskGroup() as group:
        for n in ("n1", "n2"):
            with Node(n), Task():
                ops.ConstantFill([], [f"{n}_value"], shape=[], value=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NodeBlobWarning)
        with LocalSession(backend=backend) as s:
            s.run(group)


def test_one_node_writing_a_blob_twice_does_not_warn():
    with Cluster(), TaskGroup() as group:
        with Node("n1"):
            for v in (1.0, 2.0):
                with Task():
                    ops.ConstantFill([], ["again"], shape=[], value=v)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NodeBlobWarning)
        with LocalSession() as s:
            s.run(group)
