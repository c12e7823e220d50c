"""Sparse gradients: Gather's gradient is a GradientSlice (indices, rows), kept sparse to the
optimizer, made dense only where a dense gradient is needed; the sparse updates.

Kernel figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2,
the same inputs through workspace.RunOperatorOnce, printed with .tolist()); training
runs are checked against a numpy loop written here.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, optimizer, workspace
from dslc import hypothesis_test_util as hu
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]

W = np.arange(8, dtype=np.float32).reshape(4, 2)
IDX = np.array([1, 3, 1], np.int64)
G = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)


def _run_op(do, op_type, inputs: dict, outputs, **args):
    workspace.ResetWorkspace()
    for k, v in inputs.items():
        workspace.FeedBlob(k, v)
    op = core.CreateOperator(op_type, list(inputs), outputs, device_option=do, **args)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o).tolist() for o in outputs]


@pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
def test_sparse_updates_match_caffe2(do):
    one, half, lr = (np.array([v], np.float32) for v in (1.0, 0.5, -0.1))
    got = _run_op(do, "ScatterWeightedSum", {"w": W, "one": one, "idx": IDX, "g": G, "lr": lr}, ["w"])
    np.testing.assert_allclose(got[0], [[0.0, 1.0], [1.4, 2.2], [4.0, 5.0], [5.7, 6.6]], rtol=1e-6)  # Caffe2
    # every occurrence scales the row by w0 first (row 1 twice: 0.25), then the slices add
    got = _run_op(do, "ScatterWeightedSum", {"w": W, "half": half, "idx": IDX, "g": G, "lr": lr}, ["w"])
    np.testing.assert_allclose(got[0], [[0.0, 1.0], [-0.1, -0.05], [4.0, 5.0], [2.7, 3.1]], rtol=1e-5,
                               atol=1e-7)  # Caffe2
    h = np.full((4, 2), 0.5, np.float32)
    w, h = _run_op(do, "SparseAdagrad", {"w": W, "h": h, "idx": IDX, "g": G, "lr": lr}, ["w", "h"], epsilon=1e-5)
    np.testing.assert_allclose(w, [[0.0, 1.0], [1.8212226629257202, 2.811438798904419], [4.0, 5.0],
                                   [5.90266752243042, 6.901526927947998]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(h, [[0.5, 0.5], [26.5, 40.5], [0.5, 0.5], [9.5, 16.5]])  # Caffe2
    h1 = np.full((4,), 0.5, np.float32)
    w, h1 = _run_op(do, "RowWiseSparseAdagrad", {"w": W, "h1": h1, "idx": IDX, "g": G, "lr": lr}, ["w", "h1"],
                    epsilon=1e-5)
    np.testing.assert_allclose(w, [[0.0, 1.0], [1.8558785915374756, 2.7808666229248047], [4.0, 5.0],
                                   [5.916795253753662, 6.8890604972839355]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(h1, [0.5, 33.5, 0.5, 13.0])  # Caffe2


@pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
@pytest.mark.parametrize("op_type", ["SparseAdagrad", "RowWiseSparseAdagrad"])
def test_sparse_adagrad_of_a_vector_matches_caffe2(do, op_type):
    """A 1-D table (a row is one number): both give Caffe2's values (read off the real Caffe2)."""
    p, m = np.array([0.5, -1.0, 2.0, 3.0], np.float32), np.full(4, 0.5, np.float32)
    got = _run_op(do, op_type, {"p": p, "m": m, "i": IDX, "g": np.array([1., 2., 3.], np.float32),
                                "lr": np.array([-0.1], np.float32)}, ["p", "m"], epsilon=1e-5)
    np.testing.assert_allclose(got[0], [0.5, -1.174230694770813, 2.0, 2.905719518661499], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(got[1], [0.5, 10.5, 0.5, 4.5], rtol=1e-6)  # Caffe2


@pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
def test_sparse_adadelta_and_ftrl_match_caffe2(do):
    """Row 1 appears twice: updated once per occurrence, in order, as Caffe2 does."""
    ms, d, lr = np.full((4, 2), 0.5, np.float32), np.full((4, 2), 0.25, np.float32), np.array([-0.1], np.float32)
    w, ms, d = _run_op(do, "SparseAdadelta", {"w": W, "ms": ms, "d": d, "idx": IDX, "g": G, "lr": lr},
                       ["w", "ms", "d"], epsilon=1e-5, decay=0.9)
    np.testing.assert_allclose(w, [[0.0, 1.0], [1.782325029373169, 2.723424196243286], [4.0, 5.0],
                                   [5.870898246765137, 6.860311508178711]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(ms, [[0.5, 0.5], [2.9950003623962402, 4.3650007247924805], [0.5, 0.5],
                                    [1.3500001430511475, 2.0500004291534424]], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(d, [[0.25, 0.25], [0.46917349100112915, 0.5909912586212158], [0.25, 0.25],
                                   [0.39167213439941406, 0.42012882232666016]], rtol=1e-6)  # Caffe2
    nz = np.zeros((4, 2, 2), np.float32)
    nz[..., 0], nz[..., 1] = 0.5, -0.2
    w, nz = _run_op(do, "SparseFtrl", {"w": W, "nz": nz, "idx": IDX, "g": G}, ["w", "nz"], alpha=0.5, beta=0.1,
                    lambda1=0.2, lambda2=0.05)
    np.testing.assert_allclose(w, [[0.0, 1.0], [-0.039623819291591644, 0.9812107682228088], [4.0, 5.0],
                                   [3.9756088256835938, 5.131188869476318]], rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(np.array(nz)[[1, 3]], [[[26.5, 0.6178581118583679], [40.5, -12.934076309204102]],
                                                      [[9.5, -25.701202392578125], [16.5, -43.16877365112305]]],
                               rtol=1e-5)  # Caffe2
    np.testing.assert_array_equal(np.array(nz, np.float32)[[0, 2]], np.broadcast_to(np.float32([0.5, -0.2]), (2, 2, 2)))


@pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
@pytest.mark.parametrize("op_type", ["SparseAdagrad", "RowWiseSparseAdagrad", "ScatterWeightedSum", "SparseAdam",
                                     "SparseFtrl", "SparseAdadelta"])
def test_a_sparse_update_of_an_empty_batch_changes_nothing(do, op_type):
    """No indices (a batch whose bags are all empty): the table and its moments stay as they were."""
    idx, g, lr = np.zeros(0, np.int64), np.zeros((0, 2), np.float32), np.array([-0.1], np.float32)
    m = np.full((4,) if op_type == "RowWiseSparseAdagrad" else (4, 2), 0.5, np.float32)
    inputs = {"SparseAdagrad": {"w": W, "m": m, "idx": idx, "g": g, "lr": lr},
              "RowWiseSparseAdagrad": {"w": W, "m": m, "idx": idx, "g": g, "lr": lr},
              "ScatterWeightedSum": {"w": W, "one": np.array([1.0], np.float32), "idx": idx, "g": g, "lr": lr},
              "SparseAdam": {"w": W, "m": m, "m2": m, "idx": idx, "g": g, "lr": lr, "it": np.array([0], np.int64)},
              "SparseFtrl": {"w": W, "nz": np.full((4, 2, 2), 0.5, np.float32), "idx": idx, "g": g},
              "SparseAdadelta": {"w": W, "m": m, "m2": m, "idx": idx, "g": g, "lr": lr}}[op_type]
    outputs = [k for k in inputs if k in ("w", "m", "m2", "nz")]
    got = _run_op(do, op_type, inputs, outputs)
    for name, value in zip(outputs, got):
        np.testing.assert_array_equal(value, inputs[name])


def test_gathers_gradient_is_a_slice_and_no_op():
    net = core.Net("g")
    net.Gather(["w", "idx"], "rows")
    net.SumElements(["rows"], "loss")
    grads = net.AddGradientOperators(["loss"])
    assert grads["w"] == core.GradientSlice("idx", "rows_grad")
    assert all(op.type != "SparseToDense" for op in net.Proto().op)
    ops, g_input = core.GradientRegistry.GetGradientForOp(core.CreateOperator("Gather", ["w", "i"], ["y"]),
                                                          ["y_grad"])
    assert ops == [] and g_input == [core.GradientSlice("i", "y_grad"), None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_readers_add_up_densely(backend):
    """loss = sum(w[i1]) + sum(w * 2): d/dw = 2 everywhere, plus 1 per occurrence in i1."""
    net = core.Net("two")
    net.Gather(["w", "i1"], "a")
    net.Scale(["w"], "b", scale=2.0)
    net.SumElements(["a"], "sa")
    net.SumElements(["b"], "sb")
    net.Add(["sa", "sb"], "loss")
    grads = net.AddGradientOperators(["loss"])
    assert isinstance(grads["w"], core.BlobReference)
    workspace.FeedBlob("w", W)
    workspace.FeedBlob("i1", np.array([0, 2, 0], np.int64))
    with LocalSession(backend=backend) as s:
        s.run(net)
    want = np.full((4, 2), 2.0, np.float32)
    want[0] += 2
    want[2] += 1
    np.testing.assert_array_equal(workspace.FetchBlob(grads["w"]), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gather_of_a_computed_tensor_is_made_dense_for_its_maker(backend):
    """t = 3 x; loss = sum(t[i]^2): d/dx = 3 * 2 t[i] summed at i = 18 x[i] per occurrence."""
    net = core.Net("chain")
    net.Scale(["x"], "t", scale=3.0)
    net.Gather(["t", "i"], "rows")
    net.Sqr(["rows"], "sq")
    net.SumElements(["sq"], "loss")
    grads = net.AddGradientOperators(["loss"])
    assert any(op.type == "SparseToDense" for op in net.Proto().op)
    x = np.array([[1.0, -1.0], [2.0, 0.5], [0.25, 4.0]], np.float32)
    i = np.array([2, 0, 2], np.int64)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("i", i)
    with LocalSession(backend=backend) as s:
        s.run(net)
    want = np.zeros_like(x)
    for r in i:
        want[r] += 18 * x[r]
    np.testing.assert_allclose(workspace.FetchBlob(grads["x"]), want, rtol=1e-6)


def _embedding_model(opt):
    model = ModelHelper(name=f"emb_{opt}")
    w = model.param_init_net.ConstantFill([], "emb", shape=[6, 3], value=0.5)
    model.AddParameter(w)
    rows = model.net.Gather([w, "ids"], "rows")
    pooled = model.net.ReduceSum(rows, "pooled", axes=[1], keepdims=0)  # [batch, 3]: bags of 2 ids
    d = model.net.SquaredL2Distance([pooled, "target"], "d")
    loss = model.net.AveragedLoss(d, "loss")
    model.AddGradientOperators([loss])
    assert isinstance(model.param_to_grad[w], core.GradientSlice)
    if opt == "sgd":
        optimizer.build_sgd(model, base_learning_rate=0.1)
    elif opt == "momentum":
        optimizer.build_sgd(model, base_learning_rate=0.1, momentum=0.9, nesterov=0)
    elif opt == "adam":
        optimizer.build_adam(model, base_learning_rate=0.1, epsilon=1e-5)
    else:
        optimizer.build_adagrad(model, base_learning_rate=0.1, epsilon=1e-4)
    assert not any(op.type in ("SparseToDense", "WeightedSum", "Adagrad", "Adam", "MomentumSGDUpdate")
                   for op in model.net.Proto().op)
    return model


def _numpy_training(opt, ids_steps, targets, steps):
    w = np.full((6, 3), 0.5, np.float64)
    h, m1, m2 = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for s in range(steps):
        ids, t = ids_steps[s], targets[s]
        pooled = w[ids].sum(axis=1)
        dpooled = (pooled - t) / ids.shape[0]
        flat, rows = ids.reshape(-1), np.repeat(dpooled, ids.shape[1], axis=0)
        for r, g in zip(flat, rows):  # per occurrence, in order (as the sparse updates run)
            if opt == "sgd":
                w[r] -= 0.1 * g
            elif opt == "momentum":  # (m = 0.9 m + lr g; w -= m)
                h[r] = 0.9 * h[r] + 0.1 * g
                w[r] -= h[r]
            elif opt == "adam":  # t = the iteration counter after this step's Iter, + 1
                t = s + 2
                m1[r] = 0.9 * m1[r] + 0.1 * g
                m2[r] = 0.999 * m2[r] + 0.001 * g * g
                w[r] -= 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m1[r] / (np.sqrt(m2[r]) + 1e-5)
            else:
                h[r] += g * g
                w[r] -= 0.1 * g / (np.sqrt(h[r]) + 1e-4)
    return w


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opt", ["sgd", "adagrad", "momentum", "adam"])
def test_embedding_training_touches_only_the_rows_read(backend, opt):
    rng = np.random.default_rng(7)
    steps = 6
    ids_steps = [rng.integers(0, 5, size=(4, 2)).astype(np.int64) for _ in range(steps)]  # row 5 never read
    targets = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(steps)]
    model = _embedding_model(opt)
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        for k in range(steps):
            workspace.FeedBlob("ids", ids_steps[k])
            workspace.FeedBlob("target", targets[k])
            s.run(model.net)
    got = workspace.FetchBlob("emb")
    np.testing.assert_allclose(got, _numpy_training(opt, ids_steps, targets, steps), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[5], [0.5, 0.5, 0.5])


def test_harness_checks_a_sparse_gradient():
    """The gradient checker densifies a GradientSlice (np.add.at) before comparing."""
    case = hu.HypothesisTestCase()
    data = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    for gc in hu.device_options:
        case.assertGradientChecks(gc, core.CreateOperator("Gather", ["D", "I"], ["Y"]),
                                  [data.copy(), np.array([3, 0, 3], np.int64)], 0, [0])


def test_updates_write_in_place_yet_never_change_a_value_someone_holds():
    """From the second step on the table is updated where it lies (only the rows read are
    touched); an array the user fetched keeps its values, and so does the init net's."""
    model = _embedding_model("sgd")
    ids = np.array([[0, 1], [1, 2], [2, 3], [3, 4]], np.int64)
    target = np.zeros((4, 3), np.float32)
    seen = []
    with LocalSession() as s:
        s.run(model.param_init_net)
        for k in range(4):
            workspace.FeedBlob("ids", ids)
            workspace.FeedBlob("target", target)
            s.run(model.net)
            seen.append(id(workspace.current().lookup("emb").v))
        held = workspace.FetchBlob("emb")
        before = held.copy()
        s.run(model.net)
        np.testing.assert_array_equal(held, before)  # the user's array is not written into
        assert not np.array_equal(workspace.FetchBlob("emb"), before)
        s.run(model.param_init_net)  # the init net's fill is still 0.5 everywhere
        np.testing.assert_array_equal(workspace.FetchBlob("emb"), np.full((6, 3), 0.5, np.float32))
    assert len(set(seen[1:])) == 1  # one array from the second step on
