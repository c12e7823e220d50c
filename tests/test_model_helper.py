"""ModelHelper: two nets and a parameter list, as Caffe2's model_helper has them."""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.model_helper import ModelError, ModelHelper, ParameterTags


def test_nets_and_names():
    model = ModelHelper(name="mlp")
    assert model.name == "mlp" and model.get_name() == "mlp"
    assert model.net.Name() == "mlp"
    assert model.param_init_net.Name() == "mlp_init"
    assert model.params == [] and model.GetParams() == []
    assert ModelHelper().name == "model"


def test_add_parameter_and_tags():
    model = ModelHelper(name="m")
    w = model.param_init_net.ConstantFill([], "w", shape=[2, 3], value=1.5)
    b = model.param_init_net.ConstantFill([], "b", shape=[3], value=0.0)
    model.AddParameter(w, ParameterTags.WEIGHT)
    model.AddParameter(b, [ParameterTags.BIAS])
    model.AddParameter(core.BlobReference("iter"), ParameterTags.COMPUTED_PARAM)
    assert model.params == ["w", "b"]
    assert model.weights == ["w"] and model.biases == ["b"]
    assert model.GetComputedParams("") == ["iter"]
    assert model.GetAllParams("") == ["w", "b", "iter"]
    assert all(isinstance(p, core.BlobReference) for p in model.GetParams())


def test_get_params_by_namescope():
    model = ModelHelper(name="m")
    with core.NameScope("enc"):
        model.AddParameter(model.param_init_net.ConstantFill([], "w", shape=[1], value=1.0))
    with core.NameScope("dec"):
        model.AddParameter(model.param_init_net.ConstantFill([], "w", shape=[1], value=2.0))
        assert model.GetParams() == ["dec/w"]  # the current NameScope by default
    assert model.GetParams("enc") == ["enc/w"]
    assert model.GetParams("enc/") == ["enc/w"]
    assert model.GetParams("") == ["enc/w", "dec/w"]
    assert model.GetParams() == ["enc/w", "dec/w"]


def test_init_net_runs_and_params_are_in_the_workspace():
    model = ModelHelper(name="m")
    w = model.param_init_net.ConstantFill([], "w", shape=[2, 2], value=3.0)
    model.AddParameter(w)
    model.net.Add([w, w], "y")  # ModelHelper.__getattr__ records into net as well
    model.Scale([w], "z", scale=0.5)
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    np.testing.assert_array_equal(workspace.FetchBlob("w"), np.full((2, 2), 3.0, np.float32))
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.full((2, 2), 6.0, np.float32))
    np.testing.assert_array_equal(workspace.FetchBlob("z"), np.full((2, 2), 1.5, np.float32))


def test_param_model_shares_parameters():
    train = ModelHelper(name="train")
    train.AddParameter(train.param_init_net.ConstantFill([], "w", shape=[1], value=1.0))
    test = ModelHelper(name="test", param_model=train)
    assert test.param_init_net is train.param_init_net
    assert test.params is train.params and test.GetParams() == ["w"]
    assert test.net is not train.net


def test_duplicate_parameter_is_refused():
    model = ModelHelper(name="m")
    model.AddParameter(core.BlobReference("w"))
    model.AddParameter(core.BlobReference("w"))
    with pytest.raises(ModelError, match="duplicate parameters.*'w'"):
        model.Validate()


def test_param_to_grad_before_gradients_is_an_error():
    model = ModelHelper(name="m")
    with pytest.raises(ModelError, match="AddGradientOperators"):
        model.get_param_to_grad(model.params)


def test_unknown_attribute():
    with pytest.raises(AttributeError):
        ModelHelper().NoSuchThing


def test_a_complete_net_splits_back_into_init_and_training_nets():
    from dslc import brew, model_helper
    model = model_helper.ModelHelper(name="whole")
    brew.fc(model, "x", "y", dim_in=3, dim_out=2)
    model.net.Proto().type = "dag"
    complete = model.GetCompleteNet()
    assert [op.type for op in complete.Proto().op] == ["XavierFill", "ConstantFill", "FC"]
    again = model_helper.ModelHelper(name="again")
    again.ConstructInitTrainNetfromNet(complete)
    assert [op.type for op in again.param_init_net.Proto().op] == ["XavierFill", "ConstantFill"]
    assert [op.type for op in again.net.Proto().op] == ["FC"]
    assert again.net.Proto().type == "dag"  # (the training net's execution type travels with it)
    assert sorted(again.net.Proto().external_input) == ["x", "y_b", "y_w"]
