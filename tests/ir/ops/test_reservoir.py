"""ReservoirSampling (ir/ops/collect.py) and CreateMap; the ReservoirSampling layer
(dslc/layers/sampling.py), Caffe2's ReservoirSamplingWithID when given object ids.

Which rows a full reservoir keeps is random (Caffe2's generator is not ours); what is fixed,
and checked: the first num_to_collect rows (objects) go in, in order; num_visited counts the
rows (distinct new objects) seen; kept rows are rows of the data; an object already kept, or
seen earlier in the batch, is not sampled again. Caffe2's layers_test runs the same layer
program (two runs of ids [1, 2, 3, 1, 2]: num_visited 3).
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, layer_model_instantiator as lmi, schema, workspace
from dslc.ir.diagnostics import DSLError
from dslc.layer_model_helper import LayerModelHelper

f32 = np.float32



def _net(with_ids, k=3):
    init, net = core.Net("init"), core.Net("sample")
    init.ConstantFill([], "res", shape=[0])
    init.ConstantFill([], "visited", shape=[], value=0, dtype=core.DataType.INT64)
    init.CreateMutex([], "mutex")
    ins, outs = ["res", "visited", "data", "mutex"], ["res", "visited"]
    if with_ids:
        init.CreateMap([], "to_pos", key_dtype=core.DataType.INT64, value_dtype=core.DataType.INT32)
        init.ConstantFill([], "to_obj", shape=[0], value=0, dtype=core.DataType.INT64)
        ins, outs = ins + ["ids", "to_pos", "to_obj"], outs + ["to_pos", "to_obj"]
    net.ReservoirSampling(ins, outs, num_to_collect=k)
    return init, net


def test_the_first_rows_go_in_and_every_row_counts(backend):
    init, net = _net(False)
    data = np.arange(10, dtype=f32).reshape(5, 2)
    workspace.FeedBlob("data", data)
    workspace.current().run(init, backend=backend)
    workspace.current().run(net, backend=backend)
    res = workspace.FetchBlob("res")
    assert int(workspace.FetchBlob("visited")) == 5 and res.shape == (3, 2)
    # rows 3 and 4 may each replace one of the first three; every kept row is a data row
    assert all(any((r == d).all() for d in data) for r in res)
    workspace.FeedBlob("data", np.arange(100, 104, dtype=f32).reshape(2, 2))
    workspace.current().run(net, backend=backend)
    assert int(workspace.FetchBlob("visited")) == 7 and workspace.FetchBlob("res").shape == (3, 2)


def test_an_object_is_sampled_once(backend):
    init, net = _net(True)
    workspace.FeedBlob("data", np.arange(10, dtype=f32).reshape(5, 2))
    workspace.FeedBlob("ids", np.array([1, 2, 3, 1, 2], np.int64))
    workspace.current().run(init, backend=backend)
    workspace.current().run(net, backend=backend)
    # three objects, the first rows of each, in order; the repeats of 1 and 2 are skipped
    assert int(workspace.FetchBlob("visited")) == 3
    assert workspace.FetchBlob("res").tolist() == [[0, 1], [2, 3], [4, 5]]
    assert workspace.FetchBlob("to_obj").tolist() == [1, 2, 3]
    workspace.current().run(net, backend=backend)  # (all three kept already: nothing new)
    assert int(workspace.FetchBlob("visited")) == 3
    workspace.FeedBlob("ids", np.array([3, 5, 3, 3, 5], np.int64))
    workspace.current().run(net, backend=backend)  # object 5 is new: counted once, may replace one
    assert int(workspace.FetchBlob("visited")) == 4
    kept = workspace.FetchBlob("to_obj").tolist()
    assert kept == [1, 2, 3] or (sorted(kept) != [1, 2, 3] and 5 in kept and len(set(kept) & {1, 2, 3}) == 2)


def _layer_model():
    """A model of one ReservoirSampling layer (3 slots) over packed records keyed by object id."""
    m = LayerModelHelper("m", schema.Struct(("record", schema.Struct(("dense", schema.Scalar((f32, (2,)))))),
                                            ("object_id", schema.Scalar(np.int64))), schema.Struct())
    f = m.input_feature_schema
    packed = m.PackRecords(f.record, 1, fields=f.record.field_names())
    reservoir = m.ReservoirSampling(schema.Struct(("data", packed), ("object_id", f.object_id)), 3)
    m.output_schema = schema.Struct()
    init, train = lmi.generate_training_nets_forward_only(m)
    return m, f, reservoir, init, train


def _run_twice(f, init, train):
    """Feeds five records (objects 1, 2, 3, 1, 2) and runs the train net twice."""
    schema.FeedRecord(f, [np.arange(10, dtype=f32).reshape(5, 2), np.array([1, 2, 3, 1, 2], np.int64)])
    workspace.RunNetOnce(init)
    workspace.CreateNet(train)
    workspace.RunNet(train.Proto().name, num_iter=2)


def test_the_layer_samples_packed_records_by_object_id():
    m, f, reservoir, init, train = _layer_model()
    assert [op.type for op in train.Proto().op] == ["PackRecords", "ReservoirSampling"]
    _run_twice(f, init, train)
    assert schema.FetchRecord(reservoir.num_visited)().tolist() == 3


# What the real Caffe2 (torch 1.10.2) serialized for the layer's reservoir (3 packed records)
# and mutex after the two runs below (SerializeBlob, hex): per record an empty BlobProto of
# type std::shared_ptr<std::vector<TensorCPU>>, so the reservoir reads back empty
_RECORD = "322d0a0012277374643a3a7368617265645f7074723c7374643a3a766563746f723c54656e736f724350553e3e2200"
CAFFE2_RESERVOIR = bytes.fromhex(
    "0a1c7265736572766f69725f73616d706c696e672f7265736572766f6972120654656e736f721ab9010803100"
    "0" + _RECORD * 3 + "3a1c7265736572766f69725f73616d706c696e672f7265736572766f6972420208005a0408001003")
CAFFE2_MUTEX = bytes.fromhex("0a187265736572766f69725f73616d706c696e672f6d75746578121b7374643a3a756e69717565"
                             "5f7074723c7374643a3a6d757465783e2200")


def test_the_layers_state_round_trips_through_serialization_as_in_caffe2():
    """Caffe2's layers_test (testReservoirSamplingWithID): each parameter serialized and read
    back; the reservoir comes back empty, so the next runs start afresh and count the new
    batch's 2 distinct ids (Caffe2: num_visited 3, then 2); the map and the slots come back whole."""
    m, f, reservoir, init, train = _layer_model()
    _run_twice(f, init, train)
    assert workspace.SerializeBlob("reservoir_sampling/reservoir") == CAFFE2_RESERVOIR
    assert workspace.SerializeBlob("reservoir_sampling/mutex") == CAFFE2_MUTEX
    before = {str(p): workspace.FetchBlob(str(p)) for p in m.params}
    for p in m.params:
        workspace.DeserializeBlob(str(p), workspace.SerializeBlob(str(p)))
    after = {str(p): workspace.FetchBlob(str(p)) for p in m.params}
    assert len(after["reservoir_sampling/reservoir"]) == 0
    assert dict(after["reservoir_sampling/object_to_pos"]) == dict(before["reservoir_sampling/object_to_pos"]) \
        == {1: 0, 2: 1, 3: 2}
    assert type(after["reservoir_sampling/mutex"]) is type(before["reservoir_sampling/mutex"])
    assert after["reservoir_sampling/pos_to_object"].tolist() == [1, 2, 3]
    schema.FeedRecord(f.object_id, [np.array([3, 5, 3, 3, 5], np.int64)])
    workspace.RunNet(train.Proto().name, num_iter=2)
    assert schema.FetchRecord(reservoir.num_visited)().tolist() == 2


def test_a_partial_bookkeeping_is_an_error():
    init, _ = _net(False)
    workspace.FeedBlob("data", np.ones((2, 2), f32))
    workspace.FeedBlob("ids", np.array([1, 2], np.int64))
    workspace.RunNetOnce(init)
    net = core.Net("bad")
    net.ReservoirSampling(["res", "visited", "data", "mutex", "ids"], ["res", "visited"], num_to_collect=2)
    with pytest.raises(DSLError, match="takes \\(reservoir, num_visited, data, mutex\\)"):
        workspace.RunNetOnce(net)
