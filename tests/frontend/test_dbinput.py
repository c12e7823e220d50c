"""Training data from an lmdb of TensorProtos records (CreateDB, TensorProtosDBInput, brew.db_input)."""
from __future__ import annotations

import lmdb
import numpy as np
import pytest

from dslc import brew, optimizer, utils, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.proto import caffe2_pb2
from dslc.session import LocalSession


def _write(path, records):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, tensors in enumerate(records):
            tp = caffe2_pb2.TensorProtos()
            tp.protos.extend([utils.NumpyArrayToCaffe2Tensor(t) for t in tensors])
            txn.put(f"{i:05d}".encode(), tp.SerializeToString())
    env.close()


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_batches_in_key_order_going_round(tmp_path, backend):
    _write(tmp_path / "db", [(np.full((1, 2, 2), i, np.float32), np.array(i, np.int32)) for i in range(5)])
    model = ModelHelper(name=f"read_{backend}")
    brew.db_input(model, ["data", "label"], batch_size=3, db=str(tmp_path / "db"), db_type="lmdb")
    labels = []
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        for _ in range(3):
            s.run(model.net)
            data, label = workspace.FetchBlob("data"), workspace.FetchBlob("label")
            assert data.shape == (3, 1, 2, 2) and data.dtype == np.float32 and label.dtype == np.int32
            np.testing.assert_array_equal(data[:, 0, 0, 0], label)
            labels.append(label.tolist())
    assert labels == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]


def test_a_record_that_is_not_tensor_protos_is_a_located_error(tmp_path):
    env = lmdb.open(str(tmp_path / "bad"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"0", b"\xff\xfe not a protobuf")
    env.close()
    model = ModelHelper(name="bad")
    brew.db_input(model, ["data"], batch_size=1, db=str(tmp_path / "bad"), db_type="lmdb")
    workspace.RunNetOnce(model.param_init_net)
    with pytest.raises(DSLError) as e:
        workspace.RunNetOnce(model.net)
    assert "not a serialized TensorProtos" in str(e.value) and e.value.loc.file.endswith("test_dbinput.py")


def test_a_tutorial_shaped_model_trains_from_the_db(tmp_path):
    """Images whose label is 1 when their left half is brighter: conv, pool, fc, softmax, SGD."""
    rng = np.random.default_rng(0)
    records = []
    for _ in range(32):
        img = rng.random((1, 8, 8)).astype(np.float32)
        records.append((img, np.array(int(img[0, :, :4].sum() > img[0, :, 4:].sum()), np.int32)))
    _write(tmp_path / "train", records)
    model = ModelHelper(name="mnist_like")
    data, label = brew.db_input(model, ["data", "label"], batch_size=16, db=str(tmp_path / "train"), db_type="lmdb")
    conv = brew.relu(model, brew.conv(model, data, "conv", dim_in=1, dim_out=4, kernel=3), "r")
    pool = brew.max_pool(model, conv, "pool", kernel=2, stride=2)
    fc = brew.fc(model, pool, "fc", dim_in=4 * 3 * 3, dim_out=2)
    softmax = brew.softmax(model, fc, "softmax")
    xent = model.net.LabelCrossEntropy([softmax, label], "xent")
    loss = model.net.AveragedLoss(xent, "loss")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=0.5)
    losses = []
    with LocalSession() as s:
        s.run(model.param_init_net)
        for _ in range(60):
            s.run(model.net)
            losses.append(float(workspace.FetchBlob("loss")))
    assert np.mean(losses[-6:]) < 0.7 * np.mean(losses[:6]), losses
