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


# --- the op helpers Caffe2's ModelHelper has as methods (issue 37). Caffe2's answers: the same
# calls on the real Caffe2's model_helper.ModelHelper (/tmp/caffe2-venv), its nets' protos printed

def test_tensor_protos_db_input_makes_its_reader_in_the_init_net():
    model = ModelHelper(name="reader")
    data, label = model.TensorProtosDBInput([], ["data", "label"], batch_size=4, db="/tmp/d.db", db_type="lmdb")
    assert (str(data), str(label)) == ("data", "label")
    init, op = model.param_init_net.Proto().op[-1], model.net.Proto().op[-1]
    assert (init.type, list(init.output)) == ("CreateDB", ["dbreader_/tmp/d.db"])
    assert {a.name: a.s for a in init.arg} == {"db": b"/tmp/d.db", "db_type": b"lmdb"}
    assert (op.type, list(op.input), list(op.output)) == ("TensorProtosDBInput", ["dbreader_/tmp/d.db"],
                                                          ["data", "label"])
    assert [(a.name, a.i) for a in op.arg] == [("batch_size", 4)]
    with pytest.raises(ModelError, match="takes no input blobs"):  # (Caffe2: an AssertionError)
        model.TensorProtosDBInput(["r"], ["a"], batch_size=2, db="d", db_type="minidb")


def test_create_db_and_the_devices_and_gpu_helpers():
    model = ModelHelper(name="m")
    reader = model.CreateDB("reader", db="/tmp/x.db", db_type="minidb")
    op = model.param_init_net.Proto().op[-1]
    assert str(reader) == "reader" and op.type == "CreateDB" and [a.name for a in op.arg] == ["db", "db_type"]
    with pytest.raises(ModelError, match="no devices"):  # (Caffe2: an AssertionError)
        model.GetDevices()
    model.RunAllOnGPU()  # (recorded: dslc runs on the CPU whatever the option says)
    assert model.net.Proto().device_option.device_type == 1 and model.param_init_net.Proto().device_option.device_type == 1


def test_get_optimization_param_info():
    from dslc import brew, core
    model = ModelHelper(name="m")
    fc = brew.fc(model, "x", "y", dim_in=3, dim_out=2)
    model.net.SparseLengthsSum(["emb", "ids", "lens"], "pooled")
    model.AddParameter(core.BlobReference("emb"))
    loss = model.net.AveragedLoss(model.net.Add([fc, "pooled"], "s"), "loss")
    with pytest.raises(ModelError, match="AddGradientOperators"):
        model.GetOptimizationParamInfo()
    model.AddGradientOperators([loss])
    infos = model.GetOptimizationParamInfo()
    # Caffe2: y_w (y_w_grad), y_b (y_b_grad), emb (a GradientSlice)
    assert [str(i.blob) for i in infos] == ["y_w", "y_b", "emb"]
    assert str(infos[0].grad) == "y_w_grad" and isinstance(infos[2].grad, core.GradientSlice)
    assert [str(i.blob) for i in model.GetOptimizationParamInfo([model.params[0]])] == ["y_w"]
    model.skip_sparse_optim = True
    assert [str(i.blob) for i in model.GetOptimizationParamInfo()] == ["y_w", "y_b"]


def test_operators_model_helper_does_not_list_warn_or_are_refused(caplog):
    model = ModelHelper(name="m")
    with caplog.at_level("WARNING"):
        model.Sigmoid("a", "b")  # (listed: no warning)
        assert not caplog.records
        model.Unique("a", "c")  # (Caffe2 logs "You are creating an op that the ModelHelper does not recognize")
    assert len(caplog.records) == 1 and "Unique" in caplog.records[0].getMessage()
    assert [op.type for op in model.net.Proto().op] == ["Sigmoid", "Unique"]
    strict = ModelHelper(name="strict", allow_not_known_ops=False)
    strict.Sigmoid("a", "b")
    with pytest.raises(AttributeError, match="Relu"):  # (Caffe2: "Operator Relu is not known to be safe")
        strict.Relu("a", "b")
    assert "Print" in dir(strict) and "Unique" not in dir(strict)
