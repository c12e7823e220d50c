"""Bad training programs fail before anything runs, naming the user's line."""
import inspect

import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.autodiff.gradients import GradientError
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.optimizer import OptimizerError
from dslc.session import LocalSession


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def test_fc_with_the_wrong_k_fails_before_running(backend):
    workspace.FeedBlob("data", np.zeros((4, 6), np.float32))
    model = ModelHelper(name="m")
    brew.fc(model, "data", "fc", dim_in=5, dim_out=3); line = here()  # noqa: E702  (K is 6, not 5)
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        with pytest.raises(DSLError) as e:
            s.run(model.net)
    assert f"test_training_errors.py:{line}" in str(e.value.loc)
    assert "K" in str(e.value) and "6 vs 5" in str(e.value)
    assert not workspace.HasBlob("fc")


def test_labels_of_the_wrong_length(backend):
    workspace.FeedBlob("p", np.full((4, 3), 1 / 3, np.float32))
    workspace.FeedBlob("label", np.zeros(5, np.int32))
    net = core.Net("n")
    net.LabelCrossEntropy(["p", "label"], "xent"); line = here()  # noqa: E702
    with pytest.raises(DSLError) as e:
        LocalSession(backend=backend).run(net)
    assert f"test_training_errors.py:{line}" in str(e.value.loc)
    assert "labels' length" in str(e.value) and "(5 vs 4)" in str(e.value)


def test_softmax_with_loss_labels_wrong_length(backend):
    workspace.FeedBlob("x", np.zeros((4, 3), np.float32))
    workspace.FeedBlob("label", np.zeros((3,), np.int32))
    net = core.Net("n")
    net.SoftmaxWithLoss(["x", "label"], ["p", "loss"]); line = here()  # noqa: E702
    with pytest.raises(DSLError) as e:
        LocalSession(backend=backend).run(net)
    assert f"test_training_errors.py:{line}" in str(e.value.loc)


def _loss_nothing_computes(net):
    net.Relu(["x"], "y")


def _loss_from_a_metric(net):
    net.Accuracy(["p", "label"], "acc")
    net.Scale(["acc"], "loss", scale=2.0)


@pytest.mark.parametrize("build,message", [(_loss_nothing_computes, "computes 'loss'"),
                                           (_loss_from_a_metric, "no input")])
def test_gradient_of_a_blob_no_loss_depends_on(build, message):
    net = core.Net("n")
    build(net)
    line = here() + 2
    with pytest.raises(GradientError) as e:
        net.AddGradientOperators(["loss"])
    assert f"test_training_errors.py:{line}" in str(e.value.loc)
    assert message in str(e.value)


def test_op_without_gradient_on_the_loss_path_names_its_line():
    net = core.Net("n")
    net.RowWiseArgMax(["x"], "am")  # declared without gradient: no error, it is skipped
    net.LT(["x", "y"], "c"); line = here()  # noqa: E702
    net.Cast(["c"], "cf", to=core.DataType.FLOAT, from_type=core.DataType.BOOL)
    net.SumElements(["cf"], "loss")
    with pytest.raises(GradientError) as e:
        net.AddGradientOperators(["loss"])
    assert f"test_training_errors.py:{line}" in str(e.value.loc)
    assert "LT has no gradient" in str(e.value)


def test_casts_gradient_needs_from_type_at_its_line():
    net = core.Net("n")
    net.Cast(["x"], "c", to=core.DataType.FLOAT); line = here()  # noqa: E702
    net.SumElements(["c"], "loss")
    with pytest.raises(DSLError) as e:
        net.AddGradientOperators(["loss"])
    assert f"test_training_errors.py:{line}" in str(e.value.loc) and "from_type" in str(e.value)


def test_overwritten_input_is_refused_at_the_overwriting_line():
    net = core.Net("n")
    net.FC(["x", "w", "b"], "y"); fc_line = here()  # noqa: E702
    net.Relu(["x"], "x"); relu_line = here()  # noqa: E702  (FC's gradient needs the old x)
    net.Add(["y", "x"], "z")
    net.SumElements(["z"], "loss")
    with pytest.raises(GradientError) as e:
        net.AddGradientOperators(["loss"])
    assert f"test_training_errors.py:{fc_line}" in str(e.value.loc)
    assert f"test_training_errors.py:{relu_line}" in str(e.value)


# Caffe2 (torch 1.10.2's caffe2.python, /tmp/caffe2-venv): core.GradientRegistry.GetGradientForOp(
# core.CreateOperator("Softsign", ["x"], ["x"]), ["x_grad"]) raises "[enforce fail at softsign_op.cc:136]
# I(0) != O(0). Cannot compute softsign gradient if you choose to do an in-place calculation.", and so
# does AddGradientOperators; it gives Log's and Sqr's, whose gradients then read the output: a = [1, 2]
# copied to x, then Log(x) -> x and SumElements, AddGradientOperators and RunNetOnce gave a_grad
# [inf, 1.4427] (1/log a) for 1/a = [1, 0.5], and Sqr's [2, 8] (2 a^2) for 2a = [2, 4]. dslc refuses them all.
@pytest.mark.parametrize("op", ["Softsign", "Log", "Sqr"])
def test_an_op_writing_over_the_input_its_gradient_reads_is_refused(op):
    net = core.Net("n")
    net.Copy(["a"], "x")
    getattr(net, op)(["x"], ["x"]); line = here()  # noqa: E702
    net.SumElements(["x"], "loss")
    with pytest.raises(GradientError) as e:
        net.AddGradientOperators(["loss"])
    assert f"test_training_errors.py:{line}" in str(e.value.loc) and isinstance(e.value, RuntimeError)
    assert f"the gradient of {op} reads its input 'x', but {op} writes its output over 'x'" in str(e.value)
    with pytest.raises(GradientError) as e:
        line = here() + 1
        core.GradientRegistry.GetGradientForOp(core.CreateOperator(op, ["x"], ["x"]), ["x_grad"])
    assert f"test_training_errors.py:{line}" in str(e.value.loc)


def _in_place(name, a, b):
    """(a's gradient, b's) through ``name`` written over a in place (b: the second input, if any)."""
    workspace.FeedBlob("a", a)
    net = core.Net("n")
    net.Copy(["a"], "x")
    if b is not None:
        workspace.FeedBlob("b", b)
        getattr(net, name)(["x", "b"], ["x"])
    else:
        getattr(net, name)(["x"], ["x"])
    net.SumElements(["x"], "loss")
    grads = net.AddGradientOperators(["loss"])
    workspace.RunNetOnce(net)
    return [workspace.FetchBlob(str(grads[k])) for k in ("a", "b") if k in grads]


@pytest.mark.parametrize("name,b,want", [
    # (by hand, at a = [-1, 2] and b = [4, 0.5]: the gradients read only the output or a's shape)
    ("Relu", None, [[0.0, 1.0]]),
    ("Sigmoid", None, [[np.exp(-1) / (1 + np.exp(-1)) ** 2, np.exp(-2) / (1 + np.exp(-2)) ** 2]]),
    ("Add", [4.0, 0.5], [[1.0, 1.0], [1.0, 1.0]]),
    ("Div", [4.0, 0.5], [[0.25, 2.0], [1 / 16, -8.0]]),  # 1/b, -a/b^2
])
def test_an_op_writing_over_an_input_its_gradient_does_not_read_keeps_its_gradient(name, b, want):
    got = _in_place(name, np.array([-1.0, 2.0], np.float32), None if b is None else np.array(b, np.float32))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("into", ["a", "b"])
def test_an_elementwise_op_in_place_may_not_broadcast_its_operand_up(backend, into):
    """Add's gradient reads an operand's shape from its name, so writing the sum over an
    operand broadcasting stretches would give that operand a gradient of the sum's shape.
    Caffe2 refuses it when the net runs (real Caffe2, Add([a, b]) -> a with a [1, 3] and
    b [2, 3]: "[enforce fail at elementwise_ops.h:189] C_dims_int == A_dims. 2 3 vs 1 3";
    -> b with a [2, 3], b [1, 3]: line 191, "C_dims_int == B_dims"); so does dslc, at the
    op's line. The same op over the operand that keeps its shape runs (by hand: 2s)."""
    small, large = np.ones((1, 3), np.float32), np.ones((2, 3), np.float32)
    workspace.FeedBlob("a", small if into == "a" else large)
    workspace.FeedBlob("b", large if into == "a" else small)
    net = core.Net("n")
    net.Add(["a", "b"], [into]); line = here()  # noqa: E702
    with pytest.raises(DSLError) as e:
        LocalSession(backend=backend).run(net)
    assert f"test_training_errors.py:{line}" in str(e.value.loc)
    assert f"Add writes its output over its input {'ab'.index(into)} ('{into}') in place" in str(e.value)
    assert "[2, 3] where" in str(e.value) and workspace.FetchBlob(into).shape == (1, 3)
    net = core.Net("m")
    net.Add(["a", "b"], ["b" if into == "a" else "a"])
    LocalSession(backend=backend).run(net)
    np.testing.assert_array_equal(workspace.FetchBlob("b" if into == "a" else "a"), np.full((2, 3), 2.0))


def test_weighted_sum_in_place_needs_its_first_input_only_for_the_weights_gradient():
    """WeightedSum's gradient reads its X operands for their shapes alone, unless grad_on_w:
    then dw0 = sum(dY x0) needs x0's value, which WeightedSum(x0, ...) -> x0 wrote over."""
    for name, value in (("a", [-1.0, 2.0]), ("w0", [3.0]), ("y", [5.0, 7.0]), ("w1", [0.5])):
        workspace.FeedBlob(name, np.array(value, np.float32))
    net = core.Net("n")
    net.Copy(["a"], "x")
    net.WeightedSum(["x", "w0", "y", "w1"], ["x"])
    net.SumElements(["x"], "loss")
    grads = net.AddGradientOperators(["loss"])
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["a"])), [3.0, 3.0])  # w0, by hand
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["y"])), [0.5, 0.5])  # w1
    net = core.Net("n")
    net.WeightedSum(["x", "w0", "y", "w1"], ["x"], grad_on_w=1)
    net.SumElements(["x"], "loss")
    with pytest.raises(GradientError, match="reads its input 'x'"):
        net.AddGradientOperators(["loss"])


def test_optimizer_before_gradients():
    model = ModelHelper(name="m")
    brew.fc(model, "data", "fc", dim_in=2, dim_out=2)
    with pytest.raises(OptimizerError, match="AddGradientOperators"):
        optimizer.build_sgd(model, 0.1)


def test_gradients_twice():
    model = ModelHelper(name="m")
    fc = brew.fc(model, "data", "fc", dim_in=2, dim_out=2)
    model.net.AveragedLoss(fc, "loss")
    model.AddGradientOperators(["loss"])
    with pytest.raises(DSLError, match="already"):
        model.AddGradientOperators(["loss"])
