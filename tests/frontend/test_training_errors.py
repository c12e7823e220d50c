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
