"""memonger: shared blob names for gradients and activations, with the same answers.

The reference is plain numpy: a 3-layer linear-relu model's loss and first-layer weight
gradient written out by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, memonger, workspace
from dslc.model_helper import ModelHelper
from dslc.proto import caffe2_pb2

DIMS = (5, 4, 3, 2)


def _model(scope="m"):
    model = ModelHelper(name="mem")
    with core.NameScope(scope):
        h = "data"
        for k in range(3):
            h = brew.fc(model, h, f"fc{k}", DIMS[k], DIMS[k + 1],
                        weight_init=("ConstantFill", {"value": 0.1 * (k + 1)}))
            if k < 2:
                h = brew.relu(model, h, f"relu{k}")
        d = model.net.SquaredL2Distance([h, "target"], "dist")
        loss = model.net.AveragedLoss(d, "loss")
    grads = model.AddGradientOperators([loss])
    return model, grads


def _numpy(x, t):
    """Forward and backward by hand: fc weights 0.1 (k + 1), biases 0; loss = mean(|y - t|^2 / 2)."""
    ws = [np.full((DIMS[k + 1], DIMS[k]), 0.1 * (k + 1)) for k in range(3)]
    h0 = x @ ws[0].T
    r0 = np.maximum(h0, 0)
    h1 = r0 @ ws[1].T
    r1 = np.maximum(h1, 0)
    y = r1 @ ws[2].T
    loss = np.mean(0.5 * np.sum((y - t) ** 2, axis=1))
    dy = (y - t) / x.shape[0]
    dr1 = dy @ ws[2]
    dh1 = dr1 * (h1 > 0)
    dr0 = dh1 @ ws[1]
    dh0 = dr0 * (h0 > 0)
    return loss, dh0.T @ x


def _run(net_or_proto, x, t):
    workspace.FeedBlob("m/data", x)
    workspace.FeedBlob("m/target", t)
    workspace.RunNetOnce(net_or_proto)
    return float(workspace.FetchBlob("m/loss")), workspace.FetchBlob("m/fc0_w_grad")


def _count(proto) -> int:
    return len({b for op in proto.op for b in list(op.input) + list(op.output)})


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)


def test_shared_gradients_give_the_same_loss_and_gradient(data):
    x, t = data
    model, grads = _model()
    workspace.RunNetOnce(model.param_init_net)
    want_loss, want_grad = _numpy(x.astype(np.float64), t.astype(np.float64))
    optim = memonger.share_grad_blobs(model.net, ["m/loss"], set(model.param_to_grad.values()), "m/")
    assert isinstance(optim, caffe2_pb2.NetDef)
    assert _count(optim) < _count(model.net.Proto())
    assert any("__m" in b for op in optim.op for b in op.output)
    for net in (model.net, optim):
        loss, grad = _run(net, x, t)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
    # every parameter gradient keeps its name (optimizers read them)
    outputs = {b for op in optim.op for b in op.output}
    assert {str(g) for g in model.param_to_grad.values()} <= outputs


def test_shared_activations_too(data):
    x, t = data
    model, _ = _model()
    workspace.RunNetOnce(model.param_init_net)
    plain = memonger.share_grad_blobs(model.net, ["m/loss"], set(model.param_to_grad.values()), "m/")
    more = memonger.share_grad_blobs(model.net, ["m/loss"], set(model.param_to_grad.values()), "m/",
                                     share_activations=True)
    assert _count(more) <= _count(plain)
    want_loss, want_grad = _numpy(x.astype(np.float64), t.astype(np.float64))
    loss, grad = _run(more, x, t)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)


def test_inference_activations_share_and_the_answer_stays():
    """y = relu(relu(x W0^T) W1^T) W2^T with the weights above: numpy's forward."""
    model = ModelHelper(name="inf")
    h = "x"
    for k in range(3):
        h = brew.fc(model, h, f"f{k}", DIMS[k], DIMS[k + 1], weight_init=("ConstantFill", {"value": 0.1 * (k + 1)}))
        if k < 2:
            h = brew.relu(model, h, f"r{k}")
    model.net.AddExternalOutput(h)
    optim = memonger.optimize_inference_for_dag(model.net, ["x"])
    assert _count(optim) < _count(model.net.Proto())
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    r = x
    for k in range(3):
        r = r @ np.full((DIMS[k + 1], DIMS[k]), 0.1 * (k + 1), dtype=np.float32).T
        r = np.maximum(r, 0) if k < 2 else r
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(optim)
    np.testing.assert_allclose(workspace.FetchBlob("f2"), r, rtol=1e-5)


def test_graph_checks_see_a_changed_graph():
    a = caffe2_pb2.NetDef()
    a.op.add(type="Relu", input=["x"], output=["y"])
    a.op.add(type="Relu", input=["y"], output=["z"])
    renamed = caffe2_pb2.NetDef()
    renamed.CopyFrom(a)
    renamed.op[0].output[0] = renamed.op[1].input[0] = "w"
    assert memonger.verify_graph_equality(a, renamed) and memonger.verify_inplace_blobs(a, renamed)
    rewired = caffe2_pb2.NetDef()
    rewired.CopyFrom(a)
    rewired.op[1].input[0] = "x"  # reads the net's input, not the first op's output
    assert not memonger.verify_graph_equality(a, rewired)
    inplace = caffe2_pb2.NetDef()
    inplace.CopyFrom(a)
    inplace.op[1].output[0] = "y"
    assert not memonger.verify_inplace_blobs(a, inplace)


def test_greedy_assignment_by_hand():
    """b1 [1, 3] and b4 [5, 7] (size 10) share; b2 [3, 4] cannot follow b1 (3 is not after 3),
    so it takes a name of its own that b3 [5, 6] (size 1) then shares: 10 + 1 bytes."""
    R = memonger.LiveRange
    ranges = [("b1", R(1, 3, 10)), ("b2", R(3, 4, 1)), ("b3", R(5, 6, 1)), ("b4", R(5, 7, 10))]
    got = memonger.compute_assignments_greedy(ranges, None)
    assert got == [[ranges[0], ranges[3]], [ranges[1], ranges[2]]]
    assert memonger.get_memory_usage(got) == 11
    assert memonger.get_memory_usage(memonger.compute_assignments_dp(ranges, None)) == 11


def test_release_blobs_when_used_frees_each_made_blob_after_its_last_read():
    from dslc import brew, memonger, model_helper
    m = model_helper.ModelHelper(name="frees")
    x = brew.fc(m, "data", "x", dim_in=2, dim_out=2)
    y = brew.fc(m, x, "y", dim_in=2, dim_out=2)
    z = brew.fc(m, x, "z", dim_in=2, dim_out=2)
    u = brew.fc(m, y, "u", dim_in=2, dim_out=2)
    m.net.Alias(["u"], ["u_alias"])
    brew.sum(m, [z, u], "out")
    net = memonger.release_blobs_when_used(m.net.Proto(), {"data"})
    types = [(op.type, list(op.input)) for op in net.op]
    # x is last read by z's FC, y by u's, z by the Sum; u is aliased, out never read
    assert types.index(("Free", ["x"])) == [t for t, _ in types].index("FC") + 3
    assert sorted(i[0] for t, i in types if t == "Free") == ["x", "y", "z"]
    for k, (t, ins) in enumerate(types):
        if t == "Free":
            assert all(ins[0] not in later for _, later in types[k + 1:])
    workspace.FeedBlob("data", np.ones((1, 2), np.float32))
    workspace.RunNetOnce(m.param_init_net)
    workspace.RunNetOnce(core.Net(net))
    assert workspace.FetchBlob("x").size == 0 and workspace.FetchBlob("out").shape == (1, 2)


@pytest.mark.parametrize("build, refused", [
    # Caffe2's answers (/tmp/caffe2-venv, memonger.optimize_inference_for_dag(net, ["A"], "")):
    # RuntimeError "did not pass schema checking" for the first two, a NetDef for the others
    (lambda n: (n.IndexFreeze("A", "B"), n.Sum(["B", "B"], "C")), True),
    (lambda n: (n.SparseAdagrad(["A", "M", "I", "G", "LR"], ["P2", "M"]), n.Relu("P2", "Q")), True),
    (lambda n: (n.SparseAdagrad(["A", "M", "I", "G", "LR"], ["A", "M"]), n.Relu("A", "Q")), False),
    (lambda n: (n.IndexFreeze("A", "A"), n.Relu("A", "Q")), False),
    (lambda n: (n.Relu("A", "B"), n.Relu("B", "C")), False),
])
def test_an_op_its_schema_makes_in_place_must_be_named_in_place(build, refused):
    m = ModelHelper()
    build(m.net)
    if refused:
        with pytest.raises(RuntimeError, match="must be the same blob"):
            memonger.optimize_inference_for_dag(m.net, ["A"], "")
    else:
        assert isinstance(memonger.optimize_inference_for_dag(m.net, ["A"], ""), caffe2_pb2.NetDef)
