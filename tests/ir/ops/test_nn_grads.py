"""Every declared gradient against central finite differences (float64, random shapes).

Each case records one op, projects its output on a fixed random tensor R (loss =
sum(y * R)), lets AddGradientOperators derive the backward ops, runs the net on each
backend, and compares every input's gradient with (f(x + h) - f(x - h)) / 2h, where f
is a plain numpy forward of the op written here (not the kernels under test).
"""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.autodiff.gradients import GradientError
from dslc.session import LocalSession

RNG = np.random.default_rng(7)
H = 1e-6


def rand(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float64)


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def numeric_grad(f, inputs, name):
    x = inputs[name]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        saved = x[idx]
        x[idx] = saved + H
        up = f(**inputs)
        x[idx] = saved - H
        down = f(**inputs)
        x[idx] = saved
        g[idx] = (up - down) / (2 * H)
    return g


def check(session, op, inputs, fwd, wrt, attrs=None, n_out=1, out=0, tol=1e-6):
    """Run ``op`` and its derived gradient; compare d sum(y * R) / d input for each of ``wrt``."""
    net = core.Net("grad_check")
    for name, value in inputs.items():
        workspace.FeedBlob(name, value)
    outs = [f"y{k}" for k in range(n_out)]
    getattr(net, op)(list(inputs), outs, **(attrs or {}))
    y_np = np.asarray(fwd(**inputs))
    r = rand(*y_np.shape)
    workspace.FeedBlob("R", r)
    net.Mul([outs[out], "R"], "yr")
    net.SumElements(["yr"], "loss")
    grads = net.AddGradientOperators({"loss": "loss_grad"})
    workspace.FeedBlob("loss_grad", np.float64(1.0))
    session.run(net)
    np.testing.assert_allclose(workspace.FetchBlob(outs[out]), y_np, rtol=1e-12, atol=1e-12)
    projected = lambda **kw: float((np.asarray(fwd(**kw)) * r).sum())  # noqa: E731
    for name in wrt:
        grad = grads[name]
        if isinstance(grad, core.GradientSlice):  # rows of the gradient at indices: made dense here
            got = np.zeros_like(inputs[name])
            np.add.at(got, workspace.FetchBlob(grad.indices).astype(np.int64),
                      workspace.FetchBlob(grad.values))
        else:
            assert grad == f"{name}_grad"
            got = workspace.FetchBlob(grad)
        np.testing.assert_allclose(got, numeric_grad(projected, dict(inputs), name), rtol=tol, atol=tol,
                                   err_msg=f"d/d{name} of {op}")
    return grads


def test_fc(session):
    m, k, n = RNG.integers(2, 5, 3)
    check(session, "FC", {"X": rand(m, k), "W": rand(n, k), "b": rand(n)},
          lambda X, W, b: X @ W.T + b, ["X", "W", "b"])


def test_fc_axis(session):
    x = rand(2, 3, 4)
    check(session, "FC", {"X": x, "W": rand(5, 4), "b": rand(5)},
          lambda X, W, b: X @ W.T + b, ["X", "W", "b"], {"axis": 2})


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_matmul(session, ta, tb):
    a = rand(3, 4) if not ta else rand(4, 3)
    b = rand(4, 2) if not tb else rand(2, 4)
    check(session, "MatMul", {"A": a, "B": b},
          lambda A, B: (A.T if ta else A) @ (B.T if tb else B), ["A", "B"], {"trans_a": ta, "trans_b": tb})


def test_transpose(session):
    check(session, "Transpose", {"X": rand(2, 3, 4)}, lambda X: X.transpose(1, 2, 0), ["X"], {"axes": [1, 2, 0]})


def test_shape_ops(session):
    check(session, "Reshape", {"X": rand(2, 6)}, lambda X: X.reshape(3, 4), ["X"], {"shape": [3, -1]})
    check(session, "Flatten", {"X": rand(2, 3, 2)}, lambda X: X.reshape(2, 6), ["X"])
    check(session, "ExpandDims", {"X": rand(3)}, lambda X: X[None, :, None], ["X"], {"dims": [0, 2]})
    check(session, "Squeeze", {"X": rand(1, 3, 1)}, lambda X: X[0, :, 0], ["X"], {"dims": [0, 2]})


def test_slice(session):
    # Caffe2's end -1 is the dim's end: rows 1..end, columns 0..2
    check(session, "Slice", {"X": rand(4, 5)}, lambda X: X[1:, 0:2], ["X"], {"starts": [1, 0], "ends": [-1, 2]})


def test_gather_repeated_indices(session):
    """Gather's gradient is sparse (the rows of dY at Idx); summed per row it is the dense one."""
    idx = np.array([2, 0, 2], dtype=np.int32)
    grads = check(session, "Gather", {"D": rand(3, 2), "Idx": idx}, lambda D, Idx: D[Idx], ["D"])
    assert grads["D"] == core.GradientSlice("Idx", "y0_grad")


@pytest.mark.parametrize("op,np_fn,attrs", [
    ("SumElements", lambda X: X.sum(), {}),
    ("SumElements", lambda X: X.mean(), {"average": 1}),
    ("ReduceSum", lambda X: X.sum(axis=1, keepdims=True), {"axes": [1]}),
    ("ReduceMean", lambda X: X.mean(axis=(0, 2)), {"axes": [0, 2], "keepdims": 0}),
    ("AveragedLoss", lambda X: X.mean(), {}),
])
def test_reductions(session, op, np_fn, attrs):
    check(session, op, {"X": rand(2, 3, 4)}, np_fn, ["X"], attrs)


@pytest.mark.parametrize("op,np_fn,attrs", [
    ("Sigmoid", lambda X: 1 / (1 + np.exp(-X)), {}),
    ("Tanh", lambda X: np.tanh(X), {}),
    ("Relu", lambda X: np.maximum(X, 0), {}),
    ("Softmax", lambda X: softmax_rows(X), {}),
    ("Clip", lambda X: np.clip(X, -0.5, 0.3), {"min": -0.5, "max": 0.3}),
    ("Exp", lambda X: np.exp(X), {}),
    ("Negative", lambda X: -X, {}),
    ("Scale", lambda X: X * 2.5, {"scale": 2.5}),
    ("Sqr", lambda X: X * X, {}),
])
def test_activations(session, op, np_fn, attrs):
    x = rand(3, 5)
    x[np.abs(x) < 0.05] = 0.2  # keep away from Relu's and Clip's kinks
    x[np.abs(x + 0.5) < 0.01] = 0.1
    x[np.abs(x - 0.3) < 0.01] = 0.1
    check(session, op, {"X": x}, np_fn, ["X"], attrs)


def test_softmax_axis(session):
    x = rand(2, 3, 4)
    check(session, "Softmax", {"X": x}, lambda X: softmax_rows(X.reshape(2, 12)).reshape(2, 3, 4), ["X"], {"axis": 1})


def test_log_and_sqrt(session):
    check(session, "Log", {"X": rand(3, 2, lo=0.5, hi=2)}, lambda X: np.log(X), ["X"])
    check(session, "Sqrt", {"X": rand(3, 2, lo=0.5, hi=2)}, lambda X: np.sqrt(X), ["X"])


@pytest.mark.parametrize("op,np_fn", [("Add", lambda A, B: A + B), ("Sub", lambda A, B: A - B),
                                      ("Mul", lambda A, B: A * B), ("Div", lambda A, B: A / B)])
def test_broadcast_binary(session, op, np_fn):
    check(session, op, {"A": rand(3, 4), "B": rand(4, lo=0.5, hi=1.5)}, np_fn, ["A", "B"])
    check(session, op, {"A": rand(2, 3, 4), "B": rand(3, 1, lo=0.5, hi=1.5)}, np_fn, ["A", "B"])


def test_legacy_broadcast_add(session):
    check(session, "Add", {"A": rand(2, 3, 4), "B": rand(3)}, lambda A, B: A + B[:, None], ["A", "B"],
          {"broadcast": 1, "axis": 1})
    check(session, "Sub", {"A": rand(1, 3, 1), "B": rand(3)}, lambda A, B: A - B[:, None], ["A", "B"],
          {"broadcast": 1, "axis": 1})


@pytest.mark.parametrize("op,np_fn", [("Mul", lambda A, B: A * B[:, None]), ("Div", lambda A, B: A / B[:, None])])
def test_legacy_broadcast_mul_and_div_with_an_axis(session, op, np_fn):
    """B [3] against A [2, 3, 4] at axis 1 (rnn_cell's sequence masks do this): B's gradient
    multiplies dY by A, which already has the output's shape (Mul's used to broadcast A at
    axis 1 again, a type error)."""
    check(session, op, {"A": rand(2, 3, 4), "B": rand(3, lo=0.5, hi=1.5)}, np_fn, ["A", "B"],
          {"broadcast": 1, "axis": 1})
    # (A with outer 1s, [1, 3, 1]: its own gradient used to be aligned at axis 1 as B's is)
    check(session, op, {"A": rand(1, 3, 1), "B": rand(3, lo=0.5, hi=1.5)}, np_fn, ["A", "B"],
          {"broadcast": 1, "axis": 1})


def test_label_cross_entropy(session):
    p = softmax_rows(rand(4, 3))
    lab = np.array([0, 2, 1, 2], dtype=np.int32)
    check(session, "LabelCrossEntropy", {"P": p, "L": lab}, lambda P, L: -np.log(P[np.arange(4), L]), ["P"])


def test_label_cross_entropy_of_rows_of_several_dims_and_column_labels(session):
    # (Caffe2's shapes: X [N, 1, D] is N rows of D, labels [N, 1]; see test_nn_ops)
    p = softmax_rows(rand(4, 3)).reshape(4, 1, 3)
    lab = np.array([[0], [2], [1], [2]], dtype=np.int32)
    check(session, "LabelCrossEntropy", {"P": p, "L": lab},
          lambda P, L: -np.log(P.reshape(4, 3)[np.arange(4), L.reshape(4)]), ["P"])


def test_softmax_with_loss(session):
    x, lab = rand(5, 4), np.array([0, 3, 1, 1, 2], dtype=np.int32)
    check(session, "SoftmaxWithLoss", {"X": x, "L": lab},
          lambda X, L: -np.log(softmax_rows(X)[np.arange(5), L]).mean(), ["X"], n_out=2, out=1)


def test_softmax_with_loss_weighted(session):
    x, lab, w = rand(3, 4), np.array([0, 3, 1], dtype=np.int32), rand(3, lo=0.1, hi=2)

    def fwd(X, L, W):
        return (-np.log(softmax_rows(X)[np.arange(3), L]) * W).sum() / W.sum()
    check(session, "SoftmaxWithLoss", {"X": x, "L": lab, "W": w}, fwd, ["X"], n_out=2, out=1)


def test_squared_l2_distance(session):
    check(session, "SquaredL2Distance", {"X": rand(3, 4), "Y": rand(3, 4)},
          lambda X, Y: 0.5 * ((X - Y) ** 2).sum(axis=1), ["X", "Y"])


def test_dropout_test_mode_and_copy(session):
    check(session, "Dropout", {"X": rand(3, 4)}, lambda X: X, ["X"], {"is_test": 1})
    check(session, "Copy", {"X": rand(3)}, lambda X: X, ["X"])


def test_dropout_training_uses_its_mask(session, backend):
    # random_seed names the op's stream: a fresh workspace draws the same mask again
    x = rand(6, 5)
    ws = workspace.Workspace()
    ws.feed_blob("X", x)
    net = core.Net("mask")
    net.Dropout(["X"], ["Y", "mask"], ratio=0.4, random_seed=5)
    LocalSession(ws, backend=backend).run(net)
    mask = ws.fetch_blob("mask")
    assert mask.dtype == np.bool_ and 0 < mask.sum() < mask.size
    check(session, "Dropout", {"X": x}, lambda X: X * mask / 0.6, ["X"], {"ratio": 0.4, "random_seed": 5},
          n_out=2)


def test_several_consumers_sum_their_gradients(session):
    # loss = sum((x W^T + b) * x W^T ...): x feeds two ops; its gradient is their sum
    x, w = rand(2, 3), rand(3, 3)
    for name, v in (("x", x), ("w", w), ("b", np.zeros(3))):
        workspace.FeedBlob(name, v)
    net = core.Net("two")
    net.FC(["x", "w", "b"], "y")
    net.Mul(["y", "x"], "z")
    net.SumElements(["z"], "loss")
    grads = net.AddGradientOperators({"loss": "loss_grad"})
    workspace.FeedBlob("loss_grad", np.float64(1.0))
    types = [o.type for o in net.ops()]
    assert types.count("Sum") == 1
    session.run(net)
    f = lambda x, w: float(((x @ w.T) * x).sum())  # noqa: E731
    np.testing.assert_allclose(workspace.FetchBlob(grads["x"]), numeric_grad(f, {"x": x.copy(), "w": w}, "x"),
                               rtol=1e-6, atol=1e-6)
    assert grads["x"] == "x_grad"


def test_in_place_relu(session):
    x = rand(3, 4)
    x[np.abs(x) < 0.05] = 0.3
    workspace.FeedBlob("x", x)
    net = core.Net("inplace")
    net.Copy(["x"], "h")
    net.Relu(["h"], "h")
    net.SumElements(["h"], "loss")
    grads = net.AddGradientOperators({"loss": "loss_grad"})
    workspace.FeedBlob("loss_grad", np.float64(1.0))
    session.run(net)
    np.testing.assert_array_equal(workspace.FetchBlob(grads["x"]), (x > 0).astype(np.float64))


def flat(x, axis):
    axis = axis % x.ndim
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


@pytest.mark.parametrize("a_shape, b_shape, attrs", [
    ((2, 3, 4), (4, 5), {"axis_a": 2}),
    ((2, 3, 4), (2, 2, 5), {"axis_a": 2, "axis_b": 2}),
    ((4, 2, 3), (4, 5), {"axis_a": 1, "trans_a": 1}),
    ((2, 3, 4), (5, 2, 2), {"axis_a": 2, "axis_b": 1, "trans_b": 1}),
    ((2, 3, 4), (2, 2, 5), {"axis_a": -1, "axis_b": -1}),
    ((3, 2), (1, 4), {"axis_a": 0, "trans_a": 1, "axis_b": 1}),
])
def test_matmul_axes(session, a_shape, b_shape, attrs):
    # A and B seen as matrices at axis_a / axis_b (Caffe2's MatMul); their gradients come back
    # in their own shapes (Caffe2's own backward fails on these: docs/differences.md)
    ta, tb = attrs.get("trans_a", 0), attrs.get("trans_b", 0)

    def fwd(A, B):
        a2, b2 = flat(A, attrs.get("axis_a", 1)), flat(B, attrs.get("axis_b", 1))
        return (a2.T if ta else a2) @ (b2.T if tb else b2)
    check(session, "MatMul", {"A": rand(*a_shape), "B": rand(*b_shape)}, fwd, ["A", "B"], attrs)


def test_concat(session):
    x, y = rand(2, 3), rand(1, 3)
    check(session, "Concat", {"X": x, "Y": y}, lambda X, Y: np.concatenate([X, Y], 0), ["X", "Y"],
          {"axis": 0}, n_out=2)
    # recorded without its sizes output: the gradient joins the inputs again to learn them
    check(session, "Concat", {"X": rand(2, 3), "Y": rand(2, 2)}, lambda X, Y: np.concatenate([X, Y], 1),
          ["X", "Y"], {"axis": 1})
    check(session, "Concat", {"X": rand(2, 3), "Y": rand(2, 3)}, lambda X, Y: np.stack([X, Y], 1),
          ["X", "Y"], {"axis": 1, "add_axis": 1}, n_out=2)


def test_split_every_part_used(session):
    # loss = sum(p * Rp) + sum(q * Rq) for p, q = Split(x, [2, 3], axis=1)
    x, rp, rq = rand(2, 5), rand(2, 2), rand(2, 3)
    for name, v in (("x", x), ("Rp", rp), ("Rq", rq)):
        workspace.FeedBlob(name, v)
    net = core.Net("split_grad")
    net.Split(["x"], ["p", "q"], split=[2, 3], axis=1)
    net.Mul(["p", "Rp"], "pr")
    net.Mul(["q", "Rq"], "qr")
    net.Sum([net.SumElements(["pr"], "sp"), net.SumElements(["qr"], "sq")], "loss")
    grads = net.AddGradientOperators({"loss": "loss_grad"})
    workspace.FeedBlob("loss_grad", np.float64(1.0))
    session.run(net)
    f = lambda x: float((x[:, :2] * rp).sum() + (x[:, 2:] * rq).sum())  # noqa: E731
    np.testing.assert_allclose(workspace.FetchBlob(grads["x"]), numeric_grad(f, {"x": x.copy()}, "x"),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_unused_part_gets_zeros(session, dtype):
    # y = Split(x, axis 0) into 3 rows; loss = sum(r1 * r1): dx = [0, 2 r1, 0], of x's dtype
    # (Caffe2 fills the unused parts with float32 zeros, and then cannot Concat them with
    # float64 parts: docs/differences.md)
    x = np.array([[1, 2], [3, 4], [5, 6]], dtype)
    workspace.FeedBlob("x", x)
    net = core.Net("split_unused")
    net.Split(["x"], ["r0", "r1", "r2"], axis=0)
    net.SumElements([net.Mul(["r1", "r1"], "sq")], "loss")
    grads = net.AddGradientOperators(["loss"])
    session.run(net)
    dx = workspace.FetchBlob(grads["x"])
    assert dx.dtype == dtype
    np.testing.assert_array_equal(dx, [[0, 0], [6, 8], [0, 0]])


def test_a_python_ops_gradient_is_its_grad_f(session):
    """y = x^2 by a Python op, its grad_f 2 x dy; loss = sum(y * R): d/dx = 2 x R. The second
    input gets no gradient (grad_input_indices=[0])."""
    def square(inputs, outputs):
        outputs[0].feed(inputs[0].data ** 2)

    def square_grad(inputs, outputs):  # inputs: x, unused, y, dy
        outputs[0].feed(2 * inputs[0].data * inputs[3].data)

    x, r = rand(3, 2), rand(3, 2)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("other", x)
    workspace.FeedBlob("R", r)
    net = core.Net("pygrad")
    net.Python(square, grad_f=square_grad, grad_input_indices=[0])(["x", "other"], ["y"])
    net.Mul(["y", "R"], "yr")
    net.SumElements(["yr"], "loss")
    grads = net.AddGradientOperators(["loss"])
    assert "other" not in grads
    session.run(net)
    np.testing.assert_allclose(workspace.FetchBlob(grads["x"]), 2 * x * r, rtol=1e-12)


def test_a_python_op_without_grad_f_has_no_gradient():
    from dslc.ir.diagnostics import DSLError

    def f(inputs, outputs):
        outputs[0].feed(inputs[0].data)

    net = core.Net("nograd")
    net.Python(f)(["x"], ["y"])
    net.SumElements(["y"], "loss")
    with pytest.raises(DSLError) as e:
        net.AddGradientOperators(["loss"])
    assert "has no gradient function" in str(e.value) and e.value.loc.file.endswith("test_nn_grads.py")


def test_cast_gradient_casts_back_to_from_type(session):
    """c = float32(x) for float64 x; loss = sum(c * 3): d/dx = 3, as float64."""
    x = rand(2, 3)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("three", np.full((2, 3), 3.0, np.float32))
    net = core.Net("castgrad")
    net.Cast(["x"], "c", to=core.DataType.FLOAT, from_type=core.DataType.DOUBLE)
    net.Mul(["c", "three"], "m")
    net.SumElements(["m"], "loss")
    grads = net.AddGradientOperators(["loss"])
    session.run(net)
    got = workspace.FetchBlob(grads["x"])
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.full((2, 3), 3.0))


def test_a_gradient_with_several_parts_is_named_as_caffe2_names_it(session):
    """x read twice: the last reader's part is x_grad itself, the other _x_grad_autosplit_0,
    summed into x_grad in place. The real Caffe2's GetBackwardPass of this net gives
    Scale -> x_grad, Scale -> _x_grad_autosplit_0, Sum(x_grad, _x_grad_autosplit_0) -> x_grad
    (its Scales read y_grad directly: its Sum's gradient is a pass-through, ours Copy ops).
    The values: d/dx sum(2x + 3x) = 5."""
    ops = [core.CreateOperator("Scale", ["x"], ["a"], scale=2.0), core.CreateOperator("Scale", ["x"], ["b"], scale=3.0),
           core.CreateOperator("Sum", ["a", "b"], ["y"])]
    grads, grad_map = core.GradientRegistry.GetBackwardPass(ops, {"y": "y_grad"})
    assert [(op.type, list(op.output)) for op in grads][-3:] == [
        ("Scale", ["x_grad"]), ("Scale", ["_x_grad_autosplit_0"]), ("Sum", ["x_grad"])]
    assert list(grads[-1].input) == ["x_grad", "_x_grad_autosplit_0"] and str(grad_map["x"]) == "x_grad"
    net = core.Net("twice")
    net.Scale(["x"], "a", scale=2.0)
    net.Scale(["x"], "b", scale=3.0)
    net.SumElements(net.Sum(["a", "b"], "y"), "loss")
    g = net.AddGradientOperators(["loss"])
    workspace.FeedBlob("x", np.array([1.0, -2.0], np.float32))
    session.run(net)
    np.testing.assert_array_equal(workspace.FetchBlob(g["x"]), [5.0, 5.0])


def test_a_loss_another_loss_reads_gets_both_gradients(session):
    """m1 = x*2, m2 = m1*3, losses [m2, m1]: dm1 = 1 (its own seed) + 3 (through m2), so
    dx = 4 * 2 = 8 (by hand). As the real Caffe2 names them (read off its AddGradientOperators):
    the seed m1_autogen_grad is the sum, _mul_1_grad_autosplit_0 the part through m2."""
    net = core.Net("two_losses")
    m1 = net.Mul(["x", "two"], "mul_1")
    m2 = net.Mul([m1, "three"], "mul_2")
    g = net.AddGradientOperators([m2, m1])
    sums = [op for op in net.Proto().op if op.type == "Sum"]
    assert [(list(op.input), list(op.output)) for op in sums] == [
        (["mul_1_autogen_grad", "_mul_1_grad_autosplit_0"], ["mul_1_autogen_grad"])]
    for name, v in (("x", 1.0), ("two", 2.0), ("three", 3.0)):
        workspace.FeedBlob(name, np.array([v], np.float32))
    session.run(net)
    assert float(workspace.FetchBlob(g["x"])[0]) == 8.0


def test_gradient_map_leaves_out_a_blob_cut_by_stop_gradient_in_place():
    """hidden = x; hidden = StopGradient(hidden); out = hidden: the op list has out -> hidden's
    gradient, but hidden's earliest version gets none, so the map holds out only (as Caffe2's)."""
    ops = [core.CreateOperator("Copy", ["x"], ["hidden"]), core.CreateOperator("StopGradient", ["hidden"], ["hidden"]),
           core.CreateOperator("Copy", ["hidden"], ["out"])]
    grads, grad_map = core.GradientRegistry.GetBackwardPass(ops, {"out": "out_grad"})
    assert {str(k): str(v) for k, v in grad_map.items()} == {"out": "out_grad"}
    assert [list(op.output) for op in grads] == [["hidden_grad"]]


def test_an_op_that_does_not_fit_its_schema_is_refused_when_differentiated():
    net = core.Net("bad")
    m = net.Mul("a", "b")  # (one input: "b" is its output)
    net.SumElements(net.Sub([m, "one"]), "loss")
    with pytest.raises(GradientError, match="schema") as err:
        net.AddGradientOperators(["loss"])
    assert "test_nn_grads.py" in str(err.value)


def test_a_gradient_needing_an_overwritten_value_is_a_runtime_error():
    ops = [core.CreateOperator("Mul", ["x", "x"], ["y"]), core.CreateOperator("Copy", ["y"], ["x"])]
    with pytest.raises(RuntimeError, match="overwrites 'x'"):
        core.GradientRegistry.GetBackwardPass(ops, {"y": "y_grad"})


def test_parameters_filled_in_the_same_net_get_gradients(session):
    """x = GivenTensorFill, y = GivenTensorFill, z = dot(reshape(x), y): dz/dx = y (by hand),
    the fills themselves having no gradient (as in Caffe2)."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2, 1) / 8
    y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    net = core.Net("filled")
    net.GivenTensorFill([], "X", shape=list(x.shape), values=x.reshape(-1).tolist())
    net.GivenTensorFill([], "Y", shape=list(y.shape), values=y.reshape(-1).tolist())
    net.Reshape(["X"], ["X_out", "old_shape"], shape=[1, 8])
    net.DotProduct(["X_out", "Y"], "Z")
    net.AddGradientOperators(["Z"])
    session.run(net)
    np.testing.assert_allclose(workspace.FetchBlob("X_grad"), y.reshape(x.shape), rtol=1e-6)


def test_zero_gradient_gives_a_blob_no_loss_reads_a_zero_gradient(session):
    """y = 2x is no loss's input; ZeroGradient(y) makes its gradient zeros, so x_grad is
    zeros (where without it x would get none)."""
    net = core.Net("zero")
    y = net.Scale("x", "y", scale=2.0)
    net.ZeroGradient(y, [])
    net.SumElements(net.Scale("x", "x3", scale=3.0), "loss")
    grads = net.AddGradientOperators(["loss"])
    workspace.FeedBlob("x", np.array([1.0, -1.0], np.float32))
    session.run(net)
    assert workspace.FetchBlob(str(grads["y"])).tolist() == [0.0, 0.0]
    assert workspace.FetchBlob(str(grads["x"])).tolist() == [3.0, 3.0]  # (3 + 2 * 0)
