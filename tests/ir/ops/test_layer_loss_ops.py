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
