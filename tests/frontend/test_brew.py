"""brew's helper registry and arg scopes, initializers, create_param and CNNModelHelper.

Expected values are worked out from the calls in each test.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, workspace
from dslc.cnn import CNNModelHelper
from dslc.ir.diagnostics import UnknownOperatorError
from dslc.model_helper import ModelError, ModelHelper
from dslc.modeling import initializers
from dslc.modeling.parameter_info import ParameterTags


def scaled(model, value=1.0, **kwargs):
    """A helper of the test's own: returns the value its arguments end up with."""
    return value


@pytest.fixture(autouse=True)
def registered():
    if not brew.has_helper(scaled):
        brew.Register(scaled)


def test_arg_scopes_nest_and_the_call_wins():
    model = ModelHelper(name="m")
    assert brew.scaled(model) == 1.0
    with brew.arg_scope([brew.scaled], value=2.0):
        assert brew.scaled(model) == 2.0
        with brew.arg_scope(brew.scaled, value=3.0):
            assert brew.scaled(model) == 3.0
        assert brew.scaled(model) == 2.0
        assert brew.scaled(model, value=5.0) == 5.0
    assert brew.scaled(model) == 1.0


def test_the_models_arg_scope_reaches_helpers_that_take_the_argument():
    model = ModelHelper(name="m", arg_scope={"value": 7.0})
    assert brew.scaled(model) == 7.0


def test_registry():
    assert brew.has_helper("fc") and brew.has_helper(brew.conv) and not brew.has_helper("nothing_here")
    with pytest.raises(AttributeError):
        brew.Register(scaled)
    with pytest.raises(AttributeError):
        brew.nothing_here


def test_fc_makes_its_parameters_with_initializers_and_runs():
    """Weights filled with 0.5 and bias with 1: y = x W^T + b = [1 + 0.5 (1 + 2 + 3)] = [4, 4]."""
    model = ModelHelper(name="fc_model")
    y = brew.fc(model, "x", "y", dim_in=3, dim_out=2, weight_init=("ConstantFill", {"value": 0.5}),
                BiasInitializer=initializers.Initializer, bias_init=("ConstantFill", {"value": 1.0}))
    assert [str(p) for p in model.params] == ["y_w", "y_b"]
    assert [str(p) for p in model.weights] == ["y_w"] and [str(p) for p in model.biases] == ["y_b"]
    assert model.get_param_info("y_w").shape == [2, 3] and model.get_param_info("y_w").size == 6
    workspace.FeedBlob("x", np.array([[1.0, 2.0, 3.0]], dtype=np.float32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(y)), [[4.0, 4.0]])


def test_create_param_twice_gives_the_same_blob_and_a_new_shape_is_refused():
    model = ModelHelper(name="p")
    init = initializers.Initializer("ConstantFill")
    a = model.create_param("w", [2, 2], init, ParameterTags.WEIGHT)
    assert model.create_param("w", [2, 2], init) is a and len(model.params) == 1
    with pytest.raises(ModelError):
        model.create_param("w", [3, 2], init)
    with core.NameScope("layer"):
        assert str(model.create_param("w", [1], init)) == "layer/w"


def test_external_initializer_records_no_fill():
    model = ModelHelper(name="ext", init_params=False)
    brew.fc(model, "x", "y", 3, 2)
    assert len(model.param_init_net.Proto().op) == 0 and [str(p) for p in model.params] == ["y_w", "y_b"]


def test_validate_names_duplicates():
    model = ModelHelper(name="v")
    model.params += ["a", "b", "c", "b", "a", "b"]
    assert model._Validate() == ["a", "b"]
    with pytest.raises(ModelError):
        model.Validate()


def test_cnn_model_helper_layers_are_brew_helpers():
    model = CNNModelHelper(order="NHWC", name="cnn")
    assert model.arg_scope["order"] == "NHWC"
    out = model.FC("x", "f", 4, 2)
    assert str(out) == "f" and [str(p) for p in model.params] == ["f_w", "f_b"]
    assert [op.type for op in model.net.Proto().op] == ["FC"]


def test_a_helper_whose_op_dslc_lacks_stops_at_the_users_line():
    model = ModelHelper(name="bmm")
    with pytest.raises(UnknownOperatorError) as e:
        brew.arg_min(model, "x", "y")
    assert "ArgMin" in str(e.value) and e.value.loc.file.endswith("test_brew.py")


def test_the_model_scope_names_the_cudnn_engine_as_caffe2s_does():
    """Caffe2's ModelHelper defaults to use_cudnn=True, so brew.conv's op says engine CUDNN
    (its CPU build runs the default engine); an engine contradicting use_cudnn is a ValueError."""
    model = ModelHelper(name="eng")
    assert model.arg_scope["use_cudnn"] is True
    brew.conv(model, "x", "c", 3, 4, 3)
    brew.max_pool(model, "c", "p", kernel=2)
    brew.fc(model, "p", "f", 4, 2)
    ops = model.net.Proto().op
    assert [op.engine for op in ops] == ["CUDNN", "CUDNN", ""]
    assert brew.conv(model, "x", "c2", 3, 4, 3, use_cudnn=False, engine="") == "c2"
    with pytest.raises(ValueError):
        brew.conv(model, "x", "c3", 3, 4, 3, use_cudnn=False, engine="CUDNN")
    with pytest.raises(ValueError):
        brew.conv(model, "x", "c4", 3, 4, 3, engine="")  # (use_cudnn from the model scope)


def test_the_model_scope_switches_are_not_reported_as_unused(recwarn):
    model = ModelHelper(name="quiet")
    brew.sum(model, ["a", "b"], "s")  # (Sum gets order, use_cudnn... from the scope, as in Caffe2)
    from dslc.ir.diagnostics import UnusedArgumentWarning
    from dslc.ir.opdef import OPS
    assert OPS["Sum"].unused_attrs({"order": "NCHW", "use_cudnn": True, "cudnn_exhaustive_search": False}) == []
    assert OPS["Sum"].unused_attrs({"ordre": "NCHW"}) == ["ordre"]  # a misspelling still is
    assert not [w for w in recwarn if issubclass(w.category, UnusedArgumentWarning)]
