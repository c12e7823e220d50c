"""data_parallel_model across shards (rendezvous): every shard a Node of one job.

The reference is the same MLP as one replica with the whole batch (plain LocalSession,
no collectives): n shards of batch B, their gradients added by Allreduce across shards
and their initial values broadcast from shard 0, must train as that one replica.
Here the shards are Nodes under LocalSession (threads of this process); the Ray
cluster's form is in test_data_parallel_ray.py."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from dslc import brew, core, data_parallel_model, optimizer, workspace
from dslc.runtime import collectives
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Cluster, Node, Task, TaskGroup, WorkspaceType

BACKENDS = ["interp", "numba"]
RNG = np.random.RandomState(5)
X = RNG.randn(16, 8).astype(np.float32)
LABELS = RNG.randint(0, 4, size=16).astype(np.int32)
PARAMS = ("h_w", "h_b", "logits_w", "logits_b")


def mlp(model, loss_scale):
    h = brew.relu(model, brew.fc(model, "data", "h", dim_in=8, dim_out=16), "h_relu")
    logits = brew.fc(model, h, "logits", dim_in=16, dim_out=4)
    _, loss = model.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
    return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]


def feeder(x, labels):
    """An input builder giving each step the same batch (constants of the net)."""
    def build(model):
        model.net.GivenTensorFill([], "data", values=x.ravel().tolist(), shape=list(x.shape))
        model.net.GivenTensorIntFill([], "label", values=labels.tolist(), shape=list(labels.shape))
    return build


def sgd(model):
    return optimizer.build_sgd(model, 0.5, momentum=0.9)


def one_replica(backend, steps):
    """The whole batch on one replica: losses per step and the final parameters."""
    workspace.ResetWorkspace()
    model = ModelHelper(name="whole")
    data_parallel_model.Parallelize_CPU(model, feeder(X, LABELS), mlp, optimizer_builder_fun=sgd, devices=[0])
    losses = []
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        for _ in range(steps):
            s.run(model.net)
            losses.append(float(workspace.FetchBlob("cpu_0/loss")))
    return losses, {p: workspace.FetchBlob(f"cpu_0/{p}") for p in PARAMS}


@functools.cache
def whole_batch(steps):
    """one_replica on the interpreter (the reference semantics), once per ``steps`` and
    process: every test here and in test_data_parallel_ray.py compares its shards, on
    whichever backend, with it (a numba reference would compile one more training step)."""
    return one_replica("interp", steps)


def shard_models(shards, devices_of, **rendezvous):
    """Shard s of ``shards``: its model (on devices ``devices_of(s)``) fed its rows of X."""
    per = len(X) // shards
    models = []
    for s in range(shards):
        model = ModelHelper(name=f"shard{s}")
        rows = slice(s * per, (s + 1) * per)
        data_parallel_model.Parallelize_CPU(
            model, feeder(X[rows], LABELS[rows]), mlp, optimizer_builder_fun=sgd, devices=devices_of(s),
            rendezvous=dict(shard_id=s, num_shards=shards, **rendezvous))
        models.append(model)
    return models


def groups(models):
    """The init and training task groups: shard s runs on Node trainer_s."""
    with Cluster():
        with TaskGroup() as init:
            for s, m in enumerate(models):
                with Node(f"trainer_{s}"), Task(name=f"init_{s}", workspace_type=WorkspaceType.GLOBAL):
                    ops.net(m.param_init_net)
        with TaskGroup() as train:
            for s, m in enumerate(models):
                with Node(f"trainer_{s}"), Task(name=f"train_{s}", workspace_type=WorkspaceType.GLOBAL):
                    ops.net(m.net)
    return init, train


def local_shards(backend, steps, shards=2):
    workspace.ResetWorkspace()
    models = shard_models(shards, lambda s: [s])  # (one workspace: each shard's replica its own names)
    init, train = groups(models)
    losses = []
    with warnings.catch_warnings(), LocalSession(backend=backend) as session:
        warnings.simplefilter("ignore")  # (the shards share the optimizer's iteration counter here)
        session.run(init)
        for _ in range(steps):
            session.run(train)
            losses.append(float(np.sum([workspace.FetchBlob(f"cpu_{s}/loss") for s in range(shards)])))
    params = [{p: workspace.FetchBlob(f"cpu_{s}/{p}") for p in PARAMS} for s in range(shards)]
    return losses, params, models


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_shards_train_as_one_replica_with_the_whole_batch(backend):
    want_losses, want = whole_batch(steps=4)
    losses, params, models = local_shards(backend, steps=4)
    # each shard's loss is its half's mean: their mean is the whole batch's
    np.testing.assert_allclose(np.array(losses) / 2, want_losses, rtol=1e-6)
    assert want_losses[-1] < want_losses[0]
    for name in PARAMS:
        np.testing.assert_allclose(params[0][name], want[name], rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_array_equal(params[1][name], params[0][name])  # the shards stay equal
    reduce = [op for op in models[0].net.Proto().op if op.type == "Allreduce"]
    assert len(reduce) == 1 and len(reduce[0].input) == 4  # (a step's gradients in one call)
    assert [op.type for op in models[1].param_init_net.Proto().op].count("Broadcast") >= 4


def test_four_shards_of_two_devices_each():
    want_losses, want = whole_batch(steps=2)
    workspace.ResetWorkspace()
    models = shard_models(4, lambda s: [2 * s, 2 * s + 1])
    init, train = groups(models)
    with warnings.catch_warnings(), LocalSession() as session:
        warnings.simplefilter("ignore")
        session.run(init)
        session.run(train)
        session.run(train)
    for d in range(8):
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_{d}/logits_w"), want["logits_w"], rtol=1e-6, atol=1e-7)


def test_allreduce_broadcast_and_allgather_across_shards_in_shard_order():
    """The ops alone: three shards as Nodes, values checked by hand."""
    workspace.ResetWorkspace()
    with Cluster(), TaskGroup() as group:
        for s in range(3):
            with Node(f"n{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                v = ops.Const(np.array([1.0, 2.0], np.float32) * 10 ** s, f"v{s}")
                ops.Allreduce([v], [f"sum{s}"], shards=3, shard=s, group="g")
                ops.Allreduce([v], [f"mean{s}"], reduce="mean", shards=3, shard=s, group="g")
                w = ops.Const(np.array([[1, 2], [3, 4]], np.int64) + s, f"w{s}")  # two tensors of two replicas:
                ops.Allreduce([v, w, v, w], [f"a{s}", f"b{s}", f"c{s}", f"d{s}"], tensors=2, shards=3, shard=s,
                              group="g")
                ops.Broadcast([v], [f"root{s}"], root=1, shards=3, shard=s, group="g")
                rows = ops.Const(np.full((s + 1, 2), s, np.int64), f"rows{s}")
                ops.Allgather([rows], [f"all{s}"], shards=3, shard=s, group="g")
    LocalSession().run(group)
    for s in range(3):
        np.testing.assert_allclose(workspace.FetchBlob(f"sum{s}"), [111.0, 222.0])
        np.testing.assert_allclose(workspace.FetchBlob(f"mean{s}"), [37.0, 74.0])
        for out in (f"a{s}", f"c{s}"):  # 2 replicas x the 3 shards' v
            np.testing.assert_allclose(workspace.FetchBlob(out), [222.0, 444.0])
        for out in (f"b{s}", f"d{s}"):  # 2 x ([[1, 2], [3, 4]] x 3 + 0 + 1 + 2)
            np.testing.assert_array_equal(workspace.FetchBlob(out), [[12, 18], [24, 30]])
        np.testing.assert_array_equal(workspace.FetchBlob(f"root{s}"), [10.0, 20.0])
        np.testing.assert_array_equal(workspace.FetchBlob(f"all{s}"), [[0, 0], [1, 1], [1, 1], [2, 2], [2, 2], [2, 2]])


@pytest.mark.slow
def test_a_missing_shard_is_a_located_error_not_a_hang():
    workspace.ResetWorkspace()
    with Cluster(), TaskGroup() as group:
        with Node("n0"), Task():
            v = ops.Const(np.ones(2, np.float32), "v")
            ops.Allreduce([v], ["s"], shards=2, shard=0, group="lonely")
    with pytest.raises(DSLError) as err:
        LocalSession().run(group)
    text = str(err.value)
    assert "collective group 'lonely'" in text and "all 2 shards" in text
    assert "test_data_parallel_shards.py" in text


def test_a_missing_shard_times_out_outside_a_watched_run(monkeypatch):
    """Code with no stuck-run watch (a Ray node's run) waits DSLC_COLLECTIVE_TIMEOUT_S."""
    monkeypatch.setenv("DSLC_COLLECTIVE_TIMEOUT_S", "0.2")
    with pytest.raises(collectives.CollectiveError, match=r"shard\(s\) \[1\] of 2 did not arrive within 0.2 s"):
        collectives.allreduce(np.ones(2), shards=2, shard=0, group="alone")
    # the group starts afresh: a later round of both shards meets
    import threading
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(1, collectives.allreduce(np.ones(2), shards=2, shard=1,
                                                                                  group="alone")))
    t.start()
    mine = collectives.allreduce(np.full(2, 3.0), shards=2, shard=0, group="alone")
    t.join()
    np.testing.assert_array_equal(mine, [4.0, 4.0])
    np.testing.assert_array_equal(got[1], [4.0, 4.0])


def test_a_bad_timeout_setting_is_named(monkeypatch):
    monkeypatch.setenv("DSLC_COLLECTIVE_TIMEOUT_S", "soon")
    with pytest.raises(collectives.CollectiveError, match="DSLC_COLLECTIVE_TIMEOUT_S='soon' is not a number"):
        collectives.allreduce(np.ones(2), shards=2, shard=0, group="impatient")


def test_rendezvous_mistakes_are_located_errors():
    model = ModelHelper(name="bad")
    for rendezvous, words in ((dict(shard_id=2, num_shards=2), "shard_id=2 of num_shards=2"),
                              (dict(shard_id=0, num_shards=2, port=5), "unknown keys ['port']"),
                              (dict(num_shards=2), "shard_id and num_shards")):
        with pytest.raises(DSLError) as err:
            data_parallel_model.Parallelize_CPU(model, feeder(X, LABELS), mlp, optimizer_builder_fun=sgd,
                                                devices=[0], rendezvous=rendezvous)
        assert words in str(err.value) and "test_data_parallel_shards.py" in str(err.value)
    with pytest.raises(DSLError, match="shared_model"):
        data_parallel_model.Parallelize_CPU(model, feeder(X, LABELS), mlp, optimizer_builder_fun=sgd, devices=[0],
                                            shared_model=True, rendezvous=dict(shard_id=0, num_shards=2))
    net = core.Net("bad_shard")
    net.Allreduce(["a"], ["a"], shards=2, shard=3)
    workspace.FeedBlob("a", np.ones(2, np.float32))
    with pytest.raises(DSLError, match="shard=3 of shards=2"):
        workspace.RunNetOnce(net)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_gradients_are_gathered_across_shards_as_rows(backend):
    """An embedding table on 2 shards (each a Node, one replica each): the shards' rows
    (indices, values) are gathered, never made dense, and both tables move as one replica's
    on the whole batch does (the reference: plain SGD on one replica, no collectives)."""
    ids = np.array([[1, 3], [3, 0], [5, 5], [2, 1]], np.int64)
    target = np.linspace(-1, 1, 4 * 3, dtype=np.float32).reshape(4, 3)

    def model_of(name, ids_part, target_part, **kw):
        def inputs(model):
            model.net.GivenTensorInt64Fill([], "ids", values=ids_part.ravel().tolist(), shape=list(ids_part.shape))
            model.net.GivenTensorFill([], "target", values=target_part.ravel().tolist(), shape=list(target_part.shape))

        def build(model, loss_scale):
            model.param_init_net.GaussianFill([], "emb", shape=[6, 3], std=0.5, random_seed=7)
            model.params.append(core.ScopedBlobReference("emb"))
            rows = model.net.Gather(["emb", "ids"], "rows")
            pooled = model.net.ReduceSum(rows, "pooled", axes=[1], keepdims=0)
            dist = model.net.SquaredL2Distance([pooled, "target"], "dist")
            return [model.net.Scale(model.net.AveragedLoss(dist, "loss"), "scaled", scale=loss_scale)]

        model = ModelHelper(name=name)
        data_parallel_model.Parallelize_CPU(model, inputs, build, optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.3),
                                            **kw)
        return model

    workspace.ResetWorkspace()
    whole = model_of("emb_whole", ids, target, devices=[0])
    with LocalSession(backend="interp") as s:  # (the reference semantics; a numba reference compiles one more step)
        s.run(whole.param_init_net)
        start = workspace.FetchBlob("cpu_0/emb")
        s.run(whole.net)
        s.run(whole.net)
    want = workspace.FetchBlob("cpu_0/emb")
    assert np.abs(want - start).max() > 1e-3  # (the rows the ids touch moved)

    workspace.ResetWorkspace()
    models = [model_of(f"emb_{k}", ids[2 * k:2 * k + 2], target[2 * k:2 * k + 2], devices=[k],
                       rendezvous=dict(shard_id=k, num_shards=2)) for k in range(2)]
    init, train = groups(models)
    with warnings.catch_warnings(), LocalSession(backend=backend) as session:
        warnings.simplefilter("ignore")
        session.run(init)
        session.run(train)
        session.run(train)
    for k in range(2):
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_{k}/emb"), want, rtol=1e-6, atol=1e-7)
    types = [op.type for op in models[0].net.Proto().op]
    assert "SparseToDense" not in types and types.count("Allgather") == 2  # (indices and values)
