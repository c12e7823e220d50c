"""data_parallel_model: replicas of one model, their gradients combined by Allreduce.

The reference for every replicated run is the same model on one replica with the whole
batch (the replicas' loss scale 1 / n makes their summed gradients the whole batch's),
or numpy written here."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, data_parallel_model, optimizer, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]
RNG = np.random.RandomState(3)
X = RNG.randn(16, 8).astype(np.float32)
LABELS = RNG.randint(0, 4, size=16).astype(np.int32)


def _mlp(model, loss_scale):
    h = brew.relu(model, brew.fc(model, "data", "h", dim_in=8, dim_out=16), "h_relu")
    logits = brew.fc(model, h, "logits", dim_in=16, dim_out=4)
    _, loss = model.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
    return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]


def _train(devices, backend, steps=3, shared=False):
    """The MLP on ``devices``, each replica fed its share of X; the first replica's weights
    and every step's losses."""
    workspace.ResetWorkspace()
    model = ModelHelper(name=f"mlp{len(devices)}")
    data_parallel_model.Parallelize_CPU(
        model, input_builder_fun=lambda m: None, forward_pass_builder_fun=_mlp,
        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.5, momentum=0.9), devices=devices,
        shared_model=shared)
    per = len(X) // len(devices)
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        losses = []
        for _ in range(steps):
            for k, d in enumerate(devices):
                workspace.FeedBlob(f"cpu_{d}/data", X[k * per:(k + 1) * per])
                workspace.FeedBlob(f"cpu_{d}/label", LABELS[k * per:(k + 1) * per])
            s.run(model.net)
            losses.append(float(np.mean([workspace.FetchBlob(f"cpu_{d}/loss") for d in devices])))
    first = f"cpu_{devices[0]}/"
    return {p: workspace.FetchBlob(first + p) for p in ("h_w", "h_b", "logits_w", "logits_b")}, losses, model


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_replicas_train_as_one_with_the_whole_batch(backend):
    one, losses_one, _ = _train([0], backend)
    two, losses_two, model = _train([0, 1], backend)
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_1/{name}"), two[name], rtol=0, atol=0)
    np.testing.assert_allclose(losses_two, losses_one, rtol=1e-5)
    assert losses_one[-1] < losses_one[0]
    ops = [op.type for op in model.net.Proto().op]
    assert ops.count("Allreduce") == 4  # one per parameter's gradient
    four, _, _ = _train([0, 1, 2, 3], backend)
    np.testing.assert_allclose(four["logits_w"], one["logits_w"], rtol=1e-5, atol=1e-7)


def test_a_shared_model_updates_one_set_of_parameters():
    one, _, _ = _train([0], "interp")
    shared, _, model = _train([0, 5], "interp", shared=True)  # (the first replica's initial values: cpu_0's)
    assert {str(p) for p in model.params} == {f"cpu_0/{p}" for p in ("h_w", "h_b", "logits_w", "logits_b")}
    assert not workspace.HasBlob("cpu_5/h_w")
    np.testing.assert_allclose(shared["logits_w"], one["logits_w"], rtol=1e-5, atol=1e-7)


def test_allreduce_adds_in_replica_order_and_shows_in_the_ir():
    net = core.Net("ar")
    net.Allreduce(["a", "b", "c"], ["a", "b", "c"], group="cpu")
    a, b, c = (np.array([1.0, 2.0], np.float32) * k for k in (1, 10, 100))
    for name, v in zip("abc", (a, b, c)):
        workspace.FeedBlob(name, v)
    workspace.RunNetOnce(net)
    for name in "abc":
        np.testing.assert_array_equal(workspace.FetchBlob(name), [111.0, 222.0])
    mean = core.Net("mean")
    mean.Allreduce(["a", "b"], ["m0", "m1"], reduce="mean")
    workspace.RunNetOnce(mean)
    np.testing.assert_array_equal(workspace.FetchBlob("m1"), [111.0, 222.0])  # (a and b now hold the sums)
    from dslc.ir import print_module
    from dslc.ir.types import TensorType
    from dslc.lower import lower_group
    text = print_module(lower_group(LocalSession.as_group(net), "", {n: TensorType("f32", (2,)) for n in "abc"}))
    assert '%a_1, %b_1, %c_1 = Allreduce(%a, %b, %c) {group = "cpu"}' in text  # (sum: the default)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_gradients_are_reduced_as_rows(backend):
    """An embedding table on 2 replicas: each replica's rows (indices, values) are
    concatenated, never densified, and the table moves as on one replica."""
    ids = np.array([[1, 3], [3, 0], [5, 5], [2, 1]], np.int64)
    target = np.linspace(-1, 1, 4 * 3, dtype=np.float32).reshape(4, 3)

    def build(model, loss_scale):
        model.param_init_net.GaussianFill([], "emb", shape=[6, 3], std=0.5, random_seed=7)
        model.params.append(core.ScopedBlobReference("emb"))
        rows = model.net.Gather(["emb", "ids"], "rows")
        pooled = model.net.ReduceSum(rows, "pooled", axes=[1], keepdims=0)
        dist = model.net.SquaredL2Distance([pooled, "target"], "dist")
        return [model.net.Scale(model.net.AveragedLoss(dist, "loss"), "scaled", scale=loss_scale)]

    tables = {}
    for devices in ([0], [0, 1]):
        workspace.ResetWorkspace()
        model = ModelHelper(name=f"emb{len(devices)}")
        data_parallel_model.Parallelize_CPU(model, input_builder_fun=lambda m: None, forward_pass_builder_fun=build,
                                            optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.3),
                                            devices=devices)
        per = len(ids) // len(devices)
        with LocalSession(backend=backend) as s:
            s.run(model.param_init_net)
            for k, d in enumerate(devices):
                workspace.FeedBlob(f"cpu_{d}/ids", ids[k * per:(k + 1) * per])
                workspace.FeedBlob(f"cpu_{d}/target", target[k * per:(k + 1) * per])
            s.run(model.net)
        tables[len(devices)] = workspace.FetchBlob("cpu_0/emb")
        types = [op.type for op in model.net.Proto().op]
        assert "SparseToDense" not in types and ("Concat" in types) == (len(devices) == 2)
    np.testing.assert_allclose(tables[2], tables[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(workspace.FetchBlob("cpu_1/emb"), tables[2], rtol=0, atol=0)


def test_replicas_batch_norm_uses_every_replicas_batch():
    """combine_spatial_bn: each replica normalizes with the statistics of both batches."""
    x = [RNG.rand(3, 2, 2, 2).astype(np.float32) for _ in range(2)]

    def build(model, loss_scale):
        brew.spatial_bn(model, "data", "bn", 2, epsilon=1e-3, is_test=False)
        return [model.net.SumElements(model.net.Sqr("bn", "sq"), "loss")]

    model = ModelHelper(name="bn")
    data_parallel_model.Parallelize_CPU(model, input_builder_fun=lambda m: None, forward_pass_builder_fun=build,
                                        optimizer_builder_fun=lambda m: optimizer.build_sgd(m, 0.1),
                                        devices=[0, 1], combine_spatial_bn=True)
    for d in (0, 1):
        workspace.FeedBlob(f"cpu_{d}/data", x[d])
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    both = np.concatenate(x).astype(np.float64)
    mean, var = both.mean(axis=(0, 2, 3)), both.var(axis=(0, 2, 3))
    for d in (0, 1):
        want = (x[d] - mean.reshape(1, 2, 1, 1)) / np.sqrt(var.reshape(1, 2, 1, 1) + 1e-3)
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_{d}/bn"), want, rtol=1e-4, atol=1e-5)
    assert "ChannelStats" in [op.type for op in model.net.Proto().op]


def test_checkpoint_params_are_the_first_replicas_and_finalize_copies_them():
    _, _, model = _train([0, 1], "interp", steps=1)
    params = {str(b) for b in data_parallel_model.GetCheckpointParams(model)}
    assert "cpu_0/h_w" in params and "cpu_0/h_w_momentum" in params and "optimizer_iteration" in params
    assert not any(p.startswith("cpu_1/") for p in params)
    workspace.FeedBlob("cpu_0/h_b", np.full(16, 7.0, np.float32))  # (as if loaded from a checkpoint)
    data_parallel_model.FinalizeAfterCheckpoint(model)
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_1/h_b"), np.full(16, 7.0, np.float32))
    assert data_parallel_model.GetLearningRateBlobNames(model) == ["SgdOptimizer_0_lr_cpu"]


def test_what_is_not_supported_is_a_located_error():
    model = ModelHelper(name="x")
    with pytest.raises(DSLError) as err:
        data_parallel_model.Parallelize(model, lambda m: None, _mlp, devices=[0, 1],
                                        rendezvous={"num_shards": 2}, cpu_device=True)
    assert "rendezvous" in str(err.value) and "test_data_parallel.py" in str(err.value)
    with pytest.raises(DSLError) as err:
        data_parallel_model.Parallelize_GPU(model, lambda m: None, _mlp, devices=[0])
    assert "GPU" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_multi_batch_batch_norm_ops_match_numpy(backend):
    """ChannelStats, SpatialBN over num_batches batches' sums, ChannelBackpropStats and the
    multi-batch SpatialBNGradient, against numpy of the batches joined."""
    from dslc import hypothesis_test_util as hu
    do = hu.device_options[BACKENDS.index(backend)]
    x = [RNG.randn(2, 3, 2, 2).astype(np.float32) for _ in range(2)]
    scale, bias = np.array([1.0, 2.0, 0.5], np.float32), np.array([0.1, -0.2, 0.3], np.float32)
    sums = [hu.runOpOnInput(do, core.CreateOperator("ChannelStats", ["x"], ["s", "q"]), [xi]) for xi in x]
    s, q = (sums[0][k] + sums[1][k] for k in (0, 1))
    both = np.concatenate(x).astype(np.float64)
    np.testing.assert_allclose(s, both.sum(axis=(0, 2, 3)), rtol=1e-5)
    op = core.CreateOperator("SpatialBN", ["x", "scale", "bias", "rm", "rv", "s", "q"],
                             ["y", "rm", "rv", "mean", "rstd"], num_batches=2, epsilon=1e-3, is_test=0)
    y, rm, rv, mean, rstd = hu.runOpOnInput(do, op, [x[1], scale, bias, np.zeros(3, np.float32),
                                                     np.ones(3, np.float32), s, q])
    mu, var = both.mean(axis=(0, 2, 3)), both.var(axis=(0, 2, 3))
    np.testing.assert_allclose(mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(var + 1e-3), rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * var * 16 / 15, rtol=1e-5)  # (unbiased over both batches)
    want = (x[1] - mu.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-3) * scale.reshape(1, 3, 1, 1) \
        + bias.reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    dy = [RNG.randn(2, 3, 2, 2).astype(np.float32) for _ in range(2)]
    stats = [hu.runOpOnInput(do, core.CreateOperator("ChannelBackpropStats", ["x", "m", "r", "dy"], ["ds", "db"]),
                             [xi, mean, rstd, dyi]) for xi, dyi in zip(x, dy)]
    ds, db = (stats[0][k] + stats[1][k] for k in (0, 1))
    xhat = (both - mu.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-3)
    dy_all = np.concatenate(dy).astype(np.float64)
    np.testing.assert_allclose(db, dy_all.sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ds, (dy_all * xhat).sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-5)
    op = core.CreateOperator("SpatialBNGradient", ["x", "scale", "dy", "mean", "rstd", "ds", "db"],
                             ["dx", "ds_out", "db_out"], num_batches=2, epsilon=1e-3)
    dx, _, _ = hu.runOpOnInput(do, op, [x[1], scale, dy[1], mean, rstd, ds, db])
    n = both.size // 3  # the whole batch's count per channel: the gradient of BN over both batches
    sc, r = scale.reshape(1, 3, 1, 1), (1 / np.sqrt(var + 1e-3)).reshape(1, 3, 1, 1)
    want = sc * r / n * (n * dy[1] - dy_all.sum(axis=(0, 2, 3)).reshape(1, 3, 1, 1)
                         - xhat[2:] * (dy_all * xhat).sum(axis=(0, 2, 3)).reshape(1, 3, 1, 1))
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)
