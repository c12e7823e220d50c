"""LengthsTile, L1Distance, MarginRankingCriterion and StumpFunc (with their gradients): the ops
the layer library's ranking and Huber losses and label smoothing record.

Expected values were read off the real Caffe2 (torch 1.10.2's caffe2.python, through
shared/tools/caffe2-ref/run.sh) on these inputs; the comments give the hand figures."""
from __future__ import annotations

import numpy as np

from dslc import core, workspace


def _run(backend, op_type, inputs, outputs, **args):
    net = core.Net("ops")
    net.Proto().op.extend([core.CreateOperator(op_type, inputs, outputs, **args)])
    workspace.current().run(net, backend=backend)
    return [workspace.FetchBlob(o).tolist() for o in outputs]


def test_lengths_tile_and_its_gradient(backend):
    workspace.FeedBlob("d", np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32))
    workspace.FeedBlob("l", np.array([2, 0, 1], np.int32))
    assert _run(backend, "LengthsTile", ["d", "l"], ["t"]) == [[[1., 2.], [1., 2.], [5., 6.]]]
    net = core.Net("g")
    net.LengthsTile(["d", "l"], ["t"])
    net.SumElements(["t"], ["s"])
    net.AddGradientOperators(["s"])
    workspace.RunNetOnce(net)
    assert workspace.FetchBlob("d_grad").tolist() == [[2., 2.], [0., 0.], [1., 1.]]  # each row's copies


def test_l1_distance_and_gradient(backend):
    workspace.FeedBlob("a", np.array([[1., -2.], [0., 3.]], np.float32))
    workspace.FeedBlob("b", np.array([[0., 1.], [2., 3.]], np.float32))
    workspace.FeedBlob("dd", np.array([2., 3.], np.float32))
    assert _run(backend, "L1Distance", ["a", "b"], ["dist"]) == [[4., 2.]]  # 1 + 3, 2 + 0
    ga, gb = _run(backend, "L1DistanceGradient", ["a", "b", "dd"], ["ga", "gb"])
    assert ga == [[2., -2.], [-3., 0.]] and gb == [[-2., 2.], [3., 0.]]
    assert not np.signbit(workspace.FetchBlob("gb")[1, 1])  # +0 where a == b, as Caffe2


def test_margin_ranking_criterion_and_gradient(backend):
    workspace.FeedBlob("x1", np.array([.5, .1, 2.], np.float32))
    workspace.FeedBlob("x2", np.array([.2, .3, 0.], np.float32))
    workspace.FeedBlob("y", np.array([1, 1, -1], np.int32))
    workspace.FeedBlob("dl", np.array([1., 2., 3.], np.float32))
    (loss,) = _run(backend, "MarginRankingCriterion", ["x1", "x2", "y"], ["loss"], margin=0.5)
    np.testing.assert_allclose(loss, [.2, .7, 2.5], rtol=1e-6)  # max(0, -y (x1 - x2) + 0.5)
    g1, g2 = _run(backend, "MarginRankingCriterionGradient", ["x1", "x2", "y", "dl"], ["g1", "g2"], margin=0.5)
    assert g1 == [-1., -2., 3.] and g2 == [1., 2., -3.]


def test_stump_func(backend):
    workspace.FeedBlob("s", np.array([.2, .5, .7], np.float32))
    (out,) = _run(backend, "StumpFunc", ["s"], ["so"], threshold=0.5, low_value=0.1, high_value=0.9)
    np.testing.assert_allclose(out, [.1, .1, .9], rtol=1e-7)  # <= threshold: low


def test_weighted_sum_gradient_reaches_the_weights_with_grad_on_w(backend):
    # Caffe2 records WeightedSumGradient(dY, a, wa, b, wb) -> (da, db[, dwa, dwb]); figures read off it
    workspace.FeedBlob("a", np.array([[1., 2.], [3., 4.]], np.float32))
    workspace.FeedBlob("b", np.array([[.5, .5], [1., 0.]], np.float32))
    workspace.FeedBlob("wa", np.array([2.], np.float32))
    workspace.FeedBlob("wb", np.array([-1.], np.float32))
    for grad_on_w in (False, True):
        net = core.Net("ws")
        net.WeightedSum(["a", "wa", "b", "wb"], "y", grad_on_w=grad_on_w)
        net.SumElements(["y"], "s")
        net.AddGradientOperators(["s"])
        assert list(net.Proto().op[-1].output) == ["a_grad", "b_grad"] + (["wa_grad", "wb_grad"] if grad_on_w else [])
        workspace.current().run(net, backend=backend)
        assert workspace.FetchBlob("a_grad").tolist() == [[2., 2.], [2., 2.]]   # wa dY
        assert workspace.FetchBlob("b_grad").tolist() == [[-1., -1.], [-1., -1.]]
        if grad_on_w:
            assert workspace.FetchBlob("wa_grad").tolist() == [10.]  # sum(a)
            assert workspace.FetchBlob("wb_grad").tolist() == [2.]   # sum(b)


def test_normalize_and_gradient(backend):
    # (figures read off Caffe2; a zero vector stays zero)
    workspace.FeedBlob("x", np.array([[[3., 4.], [0., 0.]], [[1., 2.], [2., 2.]]], np.float32))
    workspace.FeedBlob("dy", np.array([[[1., 0.], [1., 1.]], [[0., 1.], [2., -1.]]], np.float32))
    (y,) = _run(backend, "Normalize", ["x"], ["y"])
    np.testing.assert_allclose(y, [[[.6, .8], [0., 0.]], [[.4472136, .8944272], [.7071068, .7071068]]], rtol=1e-6)
    (dx,) = _run(backend, "NormalizeGradient", ["x", "dy"], ["dx"], axis=1)
    np.testing.assert_allclose(dx, [[[0., 0.], [1 / 3, .25]], [[-.357771, .353553], [.178885, -.353553]]],
                               rtol=1e-5, atol=1e-6)


def test_copy_rows_to_tensor_and_merge_id_lists(backend):
    workspace.FeedBlob("t", np.zeros((3, 2), np.float32))
    workspace.FeedBlob("i", np.array([2, 0], np.int64))
    workspace.FeedBlob("r", np.array([7., 8.], np.float32))
    assert _run(backend, "CopyRowsToTensor", ["t", "i", "r"], ["t"]) == [[[7., 8.], [0., 0.], [7., 8.]]]
    workspace.FeedBlob("l1", np.array([2, 1, 0], np.int32))
    workspace.FeedBlob("v1", np.array([5, 3, 7], np.int64))
    workspace.FeedBlob("l2", np.array([1, 2, 1], np.int32))
    workspace.FeedBlob("v2", np.array([3, 1, 7, 2], np.int64))
    # each example's ids once, ascending: {5, 3} | {3}, {7} | {1, 7}, {} | {2}
    assert _run(backend, "MergeIdLists", ["l1", "v1", "l2", "v2"], ["ol", "ov"]) == [[2, 2, 1], [3, 5, 1, 7, 2]]


def test_layer_norm_and_its_gradient(backend):
    x = np.array([[1., 2., 4.], [0., 0., 3.]], np.float32)
    workspace.FeedBlob("x", x)
    y, mean, std = _run(backend, "LayerNorm", ["x"], ["y", "m", "s"], axis=1, epsilon=1e-4)
    sd = np.sqrt(x.var(1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(y, (x - x.mean(1, keepdims=True)) / sd, rtol=1e-5)
    np.testing.assert_allclose(mean, x.mean(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(std, sd, rtol=1e-6)
    net = core.Net("g")
    net.LayerNorm(["x"], ["y", "m", "s"], axis=1, epsilon=1e-4)
    net.Mul(["y", "x"], "yx")
    net.SumElements(["yx"], "t")
    net.AddGradientOperators(["t"])
    workspace.RunNetOnce(net)
    # d/dx sum(y * x) by central differences
    eps, num = 1e-3, np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        for sign in (1, -1):
            xp = x.astype(np.float64).copy()
            xp[idx] += sign * eps
            yp = (xp - xp.mean(1, keepdims=True)) / np.sqrt(xp.var(1, keepdims=True) + 1e-4)
            num[idx] += sign * (yp * xp).sum() / (2 * eps)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), num, rtol=1e-3, atol=1e-3)


def test_unique_uniform_fill_draws_distinct_ids_outside_the_avoided(backend):
    workspace.FeedBlob("shape", np.array([14], np.int64))
    workspace.FeedBlob("avoid", np.array([3, 10, 11, 15, 19, 0], np.int32))
    (out,) = _run(backend, "UniqueUniformFill", ["shape", "avoid"], ["u"], min=0, max=19, input_as_shape=1)
    # 20 ids in [0, 19], 6 of them avoided: the 14 drawn are exactly the other 14, in some order
    assert sorted(out) == sorted(set(range(20)) - {3, 10, 11, 15, 19, 0})
    assert workspace.FetchBlob("u").dtype == np.int32


def test_sparse_lengths_weighted_sum_gradient_reaches_the_weights_with_grad_on_weights(backend):
    # a PositionWeighted SparseLookup trains its position weights through this; Caffe2 gives
    # y = [[4.5, 7, 9.5], [-9, -10, -11]] and dw = [430, 52, -604] for d/dw sum(y^2)
    workspace.FeedBlob("d", np.arange(12, dtype=np.float32).reshape(4, 3))
    workspace.FeedBlob("w", np.array([.5, 2., -1.], np.float32))
    workspace.FeedBlob("i", np.array([3, 0, 3], np.int64))
    workspace.FeedBlob("l", np.array([2, 1], np.int32))
    net = core.Net("slws")
    net.SparseLengthsWeightedSum(["d", "w", "i", "l"], "y", grad_on_weights=1)
    net.Mul(["y", "y"], "yy")
    net.SumElements(["yy"], "s")
    net.AddGradientOperators(["s"])
    workspace.current().run(net, backend=backend)
    assert workspace.FetchBlob("y").tolist() == [[4.5, 7., 9.5], [-9., -10., -11.]]
    assert workspace.FetchBlob("w_grad").tolist() == [430., 52., -604.]  # 2 <y[seg], d[id]>
