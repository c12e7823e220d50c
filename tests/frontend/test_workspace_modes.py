"""The workspace's root folder (where relative db names are), immediate mode, and what
creating a net makes: Caffe2's behaviour, checked by hand in each test."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dslc import core, workspace


@pytest.fixture(autouse=True)
def _fresh():
    workspace.ResetWorkspace()
    yield
    workspace.StopImmediate()
    workspace.ResetWorkspace()


def test_a_relative_db_name_is_under_the_root_folder(tmp_path, backend):
    assert workspace.RootFolder() == "."
    workspace.ResetWorkspace(str(tmp_path))
    assert workspace.RootFolder() == str(tmp_path)
    workspace.FeedBlob("w", np.arange(3, dtype=np.float32))
    net = core.Net("save")
    net.Save(["w"], [], db="ck", db_type="minidb")
    workspace.RunNetOnce(net)
    assert os.path.exists(tmp_path / "ck")
    workspace.FeedBlob("w", np.zeros(3, np.float32))
    load = core.Net("load")
    load.Load([], ["w"], db="ck", db_type="minidb")
    workspace.RunNetOnce(load)
    np.testing.assert_array_equal(workspace.FetchBlob("w"), [0, 1, 2])


def test_immediate_mode_runs_each_op_as_it_is_recorded_in_its_own_workspace():
    workspace.StartImmediate(i_know=True)
    folder = workspace._immediate_root_folder
    assert workspace.IsImmediate() and os.path.isdir(folder)
    net = core.Net("now")
    net.ConstantFill([], "x", shape=[2], value=1.5)
    net.Scale("x", "y", scale=2.0)
    assert workspace.ImmediateBlobs() == ["x", "y"]
    np.testing.assert_array_equal(workspace.FetchImmediate("y"), [3.0, 3.0])
    assert not workspace.HasBlob("x")  # (the user's workspace is untouched)
    workspace.FeedImmediate("x", np.array([4.0], np.float32))
    np.testing.assert_array_equal(workspace.FetchImmediate("x"), [4.0])
    assert len(net.Proto().op) == 2  # (the net itself is recorded as always)
    workspace.StopImmediate()
    assert not workspace.IsImmediate() and not os.path.exists(folder)
    with pytest.raises(RuntimeError, match="immediate mode is off"):
        workspace.FetchImmediate("x")


def test_creating_a_net_makes_its_outputs_and_twice_is_refused():
    ws = workspace.C.Workspace()
    net = core.Net("made")
    net.ConstantFill([], "out", shape=[1], value=1.0)
    ws.create_net(net)
    assert "out" in ws.blobs
    with pytest.raises(RuntimeError, match="already created"):
        ws.create_net(net)
    ws.create_net(net, overwrite=True)
    ws.nets["made"].run()
    np.testing.assert_array_equal(ws.blobs["out"].fetch(), [1.0])


def test_a_mutex_iter_counts_every_run_of_concurrent_instances(backend):
    """utils.BuildUniqueMutexIter: init makes the counter (0) and its mutex, the net counts it
    up under the mutex; 4 concurrent instances of a task counting 50 times each: 200."""
    from dslc import utils
    from dslc.net_builder import ops
    from dslc.session import LocalSession
    from dslc.task import Task
    init, net = core.Net("init"), core.Net("count")
    it = utils.BuildUniqueMutexIter(init, net)
    assert utils.BuildUniqueMutexIter(init, net) == it and len(init.Proto().op) == 2  # (made once)
    with LocalSession(backend=backend) as s:
        s.run(init)
        with Task(num_instances=4) as task:
            with ops.loop(50):
                ops.net(net)
        s.run(task)
    assert workspace.FetchBlob(str(it)).tolist() == [200]
