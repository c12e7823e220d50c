"""predictor_exporter: a trained model saved with its parameters into one db and loaded
back for inference; the predictions are checked against numpy of the saved parameters."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.predictor import predictor_exporter as pe
from dslc.predictor import predictor_py_utils as utils
from dslc.predictor_constants import predictor_constants as pc
from dslc.proto import caffe2_pb2, metanet_pb2


def _model():
    model = ModelHelper(name="clf")
    hidden = brew.relu(model, brew.fc(model, "data", "h", dim_in=4, dim_out=8), "h_relu")
    brew.softmax(model, brew.fc(model, hidden, "logits", dim_in=8, dim_out=3), "prob")
    return model


def test_an_exported_model_predicts_what_its_parameters_say(tmp_path):
    model = _model()
    workspace.RunNetOnce(model.param_init_net)
    params = {str(p): workspace.FetchBlob(p) for p in model.params}
    meta = pe.PredictorExportMeta(predict_net=model.net, parameters=model.params, inputs=["data"],
                                  outputs=["prob"], shapes={"data": (1, 4), "prob": (1, 3)})
    db = str(tmp_path / "clf.minidb")
    pe.save_to_db("minidb", db, meta)
    workspace.ResetWorkspace()
    predict = pe.prepare_prediction_net(db, "minidb")
    x = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -0.5, 3.0]], np.float32)
    workspace.FeedBlob("data", x)
    workspace.RunNet(predict)
    h = np.maximum(x @ params["h_w"].T + params["h_b"], 0)
    z = h @ params["logits_w"].T + params["logits_b"]
    want = np.exp(z - z.max(axis=1, keepdims=True))
    np.testing.assert_allclose(workspace.FetchBlob("prob"), want / want.sum(axis=1, keepdims=True), rtol=1e-5)


def test_the_meta_net_def_serializes_as_caffe2s():
    m = metanet_pb2.MetaNetDef()
    m.nets.add(key="k", value=caffe2_pb2.NetDef(name="n"))
    utils.AddBlobs(m, "b", ["x", "y"])
    m.modelInfo.project = "p"
    # the same message built with the real Caffe2's metanet_pb2, serialized there
    assert m.SerializeToString().hex() == "0a090a016212017812017912080a016b12030a016e1a030a0170"


def test_the_nets_and_blob_lists_of_an_export(tmp_path):
    model = _model()
    workspace.RunNetOnce(model.param_init_net)
    meta = pe.PredictorExportMeta(predict_net=model.net, parameters=model.params, inputs=["data"],
                                  outputs=["prob"], shapes={"data": (1, 4), "prob": (1, 3)}, net_type="dag")
    db = str(tmp_path / "m.minidb")
    pe.save_to_db("minidb", db, meta)
    workspace.ResetWorkspace()
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 1)):
        meta_net_def = pe.load_from_db(db, "minidb")
    assert list(utils.GetBlobs(meta_net_def, pc.PARAMETERS_BLOB_TYPE)) == [str(p) for p in model.params]
    assert list(utils.GetBlobs(meta_net_def, pc.INPUTS_BLOB_TYPE)) == ["data"]
    predict = utils.GetNet(meta_net_def, pc.PREDICT_NET_TYPE)
    assert predict.type == "dag" and [op.type for op in predict.op] == ["FC", "Relu", "FC", "Softmax"]
    init = utils.GetNet(meta_net_def, pc.GLOBAL_INIT_NET_TYPE)
    assert [op.type for op in init.op] == ["Load"] and all(op.device_option.device_id == 1 for op in init.op)


def test_what_an_export_refuses(tmp_path):
    model = _model()
    with pytest.raises(DSLError):  # parameters that are also inputs
        pe.PredictorExportMeta(predict_net=model.net, parameters=model.params, inputs=["data", "h_w"],
                               outputs=["prob"])
    meta = pe.PredictorExportMeta(predict_net=model.net, parameters=model.params, inputs=["data"],
                                  outputs=["prob"], shapes={"data": (1, 4), "prob": (1, 3)})
    with pytest.raises(DSLError) as err:  # (the init net never ran: no parameters to save)
        pe.save_to_db("minidb", str(tmp_path / "none.minidb"), meta)
    assert "h_w" in str(err.value) or "parameter" in str(err.value)


def test_a_damaged_description_is_a_located_error(tmp_path):
    db = str(tmp_path / "bad.minidb")
    workspace.FeedBlob(pc.META_NET_DEF, b"\xff\xff not a protobuf")
    workspace.RunOperatorOnce(core.CreateOperator("Save", [pc.META_NET_DEF], [], absolute_path=True, db=db,
                                                  db_type="minidb"))
    workspace.ResetWorkspace()
    with pytest.raises(DSLError) as err:
        pe.load_from_db(db, "minidb")
    assert "predictor" in str(err.value) and "test_predictor_exporter.py" in str(err.value)


def test_load_from_a_reader_reads_its_db(tmp_path):
    db = str(tmp_path / "ck.minidb")
    workspace.FeedBlob("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["w"], [], absolute_path=True, db=db, db_type="minidb"))
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("CreateDB", [], ["reader"], db=db, db_type="minidb"))
    workspace.RunOperatorOnce(core.CreateOperator("Load", ["reader"], ["w"]))
    np.testing.assert_array_equal(workspace.FetchBlob("w"), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_workspace_predictor_serves_a_model_from_its_own_workspace():
    """y = W x + b with W all ones [2, 4] and b = [0, 1]: x = [1, 3, 256, 256] gives
    [516, 517] (by hand); the caller's workspace is left alone."""
    workspace.ResetWorkspace()
    m = ModelHelper(name="served")
    y = brew.fc(m, "data", "y", dim_in=4, dim_out=2, weight_init=("ConstantFill", {"value": 1.0}),
                bias_init=("GivenTensorFill", {"values": [0.0, 1.0]}), axis=0)
    m.net.AddExternalOutput(y)
    p = workspace.Predictor(m.param_init_net.Proto().SerializeToString(), m.net.Proto().SerializeToString())
    assert p.input_names == ["data"]
    x = np.array([1, 3, 256, 256], np.float32)
    (out,) = p.run([x])
    assert out.tolist() == [516.0, 517.0]
    (out,) = p.run({"data": 2 * x})
    assert out.tolist() == [1032.0, 1033.0]
    assert not workspace.HasBlob("y_w")
    with pytest.raises(RuntimeError, match="takes 1 inputs"):
        p.run([x, x])
