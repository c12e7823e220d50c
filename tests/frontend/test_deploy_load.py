"""Deploy models: an init_net of weights loaded as arrays (from bytes or a message), and
a net's unknown operators reported together.

The weights are random arrays made here; each test checks that the blobs the init net
makes are those arrays, bit for bit, whichever way the net reached dslc (the wire form
is protobuf's own serializer's, and a hand-made packed form protobuf itself parses).
"""
from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import UnknownOperatorError
from dslc.driver import runner
from dslc.predictor import runner as predictor_runner
from dslc.proto import caffe2_pb2
from dslc.trace import netdef_wire
from dslc.trace.netdef import ProtoError, varint_bytes

import paths

RNG = np.random.default_rng(41)
W = RNG.standard_normal((50, 400)).astype(np.float32)  # 80 KB: above the bulk threshold
B = RNG.standard_normal(50).astype(np.float32)
IDS = RNG.integers(-2**40, 2**40, 30000)  # negative ones are 10-byte varints
MASK = RNG.integers(0, 2, 70000).astype(bool)


def _fill(net, op_type, name, values, shape, values_field="floats"):
    op = net.op.add(type=op_type, output=[name])
    op.arg.add(name="shape", ints=list(shape))
    getattr(op.arg.add(name="values"), values_field).extend(values.reshape(-1).tolist())
    return op


def _init_net() -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="deploy_init")
    _fill(net, "GivenTensorFill", "fc_w", W, W.shape)
    _fill(net, "GivenTensorFill", "fc_b", B, B.shape)  # (small: read by protobuf)
    _fill(net, "GivenTensorInt64Fill", "ids", IDS, IDS.shape, "ints")
    _fill(net, "GivenTensorBoolFill", "mask", MASK.astype(np.int64), MASK.shape, "ints")
    net.op.add(type="ConstantFill", output=["one"], arg=[caffe2_pb2.Argument(name="value", f=1.0),
                                                         caffe2_pb2.Argument(name="shape", ints=[1])])
    return net


def _fetched():
    return {n: workspace.FetchBlob(n) for n in ("fc_w", "fc_b", "ids", "mask", "one")}


def _check(got):
    assert got["fc_w"].dtype == np.float32 and np.array_equal(got["fc_w"], W)
    assert np.array_equal(got["fc_b"], B)
    assert got["ids"].dtype == np.int64 and np.array_equal(got["ids"], IDS)
    assert got["mask"].dtype == np.bool_ and np.array_equal(got["mask"], MASK)
    assert got["one"].tolist() == [1.0]


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_the_wire_reader_takes_the_fills_out_as_arrays():
    msg, bulk = netdef_wire.split(_init_net().SerializeToString(), None)
    assert sorted(bulk) == [(0, "values"), (2, "values"), (3, "values")]
    assert np.array_equal(bulk[0, "values"], W.reshape(-1)) and np.array_equal(bulk[2, "values"], IDS)
    assert [a.name for a in msg.op[0].arg] == ["shape"] and len(msg.op[1].arg[1].floats) == 50
    assert msg.op[4].type == "ConstantFill" and msg.name == "deploy_init"


@pytest.mark.parametrize("how", ["bytes", "message", "created", "predictor", "net"])
def test_an_init_net_loads_its_weights_every_way(how, monkeypatch):
    # (this net's 0.4 MB count as a model's weights: the paths a VGG's 700 MB take)
    monkeypatch.setattr(runner, "HEAVY", 1 << 16)
    monkeypatch.setattr(predictor_runner, "_HEAVY", 1 << 16)
    net = _init_net()
    if how == "bytes":
        workspace.RunNetOnce(net.SerializeToString())
    elif how == "message":
        workspace.RunNetOnce(net)
    elif how == "created":
        workspace.CreateNet(net.SerializeToString())
        workspace.RunNet("deploy_init")
    elif how == "net":
        workspace.RunNetOnce(core.Net(net))
    else:
        predict = caffe2_pb2.NetDef(name="p", external_input=["x", "fc_w", "fc_b"], external_output=["y"])
        predict.op.add(type="FC", input=["x", "fc_w", "fc_b"], output=["y"])
        x = RNG.standard_normal((2, 400)).astype(np.float32)
        p = workspace.Predictor(net.SerializeToString(), predict.SerializeToString())
        (y,) = p.run([x])
        np.testing.assert_allclose(y, x @ W.T + B, rtol=1e-5, atol=1e-5)
        return
    _check(_fetched())


def test_the_net_of_a_message_gives_its_weights_back_in_proto():
    net = core.Net(_init_net())
    proto = net.Proto()
    values = {op.output[0]: next(a for a in op.arg if a.name == "values") for op in proto.op if op.type.startswith("GivenTensor")}
    assert np.array_equal(np.array(values["fc_w"].floats, np.float32), W.reshape(-1))
    assert list(values["ids"].ints) == IDS.tolist()
    workspace.RunNetOnce(proto)
    _check(_fetched())


def _packed(values: np.ndarray) -> bytes:
    """A NetDef of one GivenTensorFill whose values are in protobuf's packed form."""
    body = values.astype("<f4").tobytes()
    arg = caffe2_pb2.Argument(name="values").SerializeToString() + bytes([5 << 3 | 2]) + varint_bytes(len(body)) + body
    op = caffe2_pb2.OperatorDef(type="GivenTensorFill", output=["w"]).SerializeToString()
    op += caffe2_pb2.OperatorDef(arg=[caffe2_pb2.Argument(name="shape", ints=list(values.shape))]).SerializeToString()
    op += bytes([5 << 3 | 2]) + varint_bytes(len(arg)) + arg
    return bytes([2 << 3 | 2]) + varint_bytes(len(op)) + op


def test_packed_values_load_as_protobuf_reads_them():
    data = _packed(W)
    assert np.array_equal(np.array(caffe2_pb2.NetDef.FromString(data).op[0].arg[1].floats, np.float32), W.reshape(-1))
    workspace.RunNetOnce(data)
    assert np.array_equal(workspace.FetchBlob("w"), W)


@pytest.mark.parametrize("cut", ["truncated", "length past the end", "endless varint"])
def test_bytes_that_are_no_netdef_are_a_located_error(cut):
    data = _init_net().SerializeToString()
    if cut == "truncated":
        data = data[:-9]
    elif cut == "length past the end":
        data = _packed(W)[:-4]
    else:
        data = bytes([2 << 3 | 2]) + b"\xff" * 20 + data
    with pytest.raises(ProtoError) as e:
        workspace.RunNetOnce(data)
    assert "test_deploy_load.py" in str(e.value) and "not a serialized NetDef" in str(e.value)


def test_every_unknown_operator_is_listed_with_its_index_and_name():
    net = caffe2_pb2.NetDef(name="converted", external_input=["x"])
    net.op.add(type="Relu", input=["x"], output=["a"])
    net.op.add(type="NoSuchPad", input=["a"], output=["b"], name="pad1")
    net.op.add(type="Relu", input=["b"], output=["c"])
    net.op.add(type="NoSuchOp", input=["c"], output=["d"])
    net.op.add(type="NoSuchPad", input=["d"], output=["e"])
    workspace.FeedBlob("x", np.ones(3, np.float32))
    for attempt in (lambda: workspace.CreateNet(net), lambda: workspace.RunNetOnce(net.SerializeToString()),
                    lambda: workspace.Predictor(caffe2_pb2.NetDef(), net).run([np.ones(3, np.float32)])):
        with pytest.raises(UnknownOperatorError) as e:
            attempt()
        assert e.value.unknown == [(1, "NoSuchPad", "pad1"), (3, "NoSuchOp", ""), (4, "NoSuchPad", "")]
        text = str(e.value)
        assert "test_deploy_load.py" in text and "#1 NoSuchPad ('pad1'), #3 NoSuchOp, #4 NoSuchPad" in text


@pytest.mark.slow
def test_an_init_net_from_bytes_takes_the_memory_of_its_weights(tmp_path):
    """bench/netdef_load.py's deploy measure at a fifth of VGG-19's widths (5.9M weights,
    24 MB) in a fresh process: the peak above the baseline is at most 1.3x the weights
    (16x when fills went through Python lists)."""
    bench = paths.load(paths.BENCH / "netdef_load.py", "netdef_load")
    path = str(tmp_path / "init.pb")
    n = bench.write_init_net(path, bench.vgg19_shapes(0.2))
    got = bench.measure_deploy(sys.executable, path, "bytes")
    assert got["weights"] == 4 * n
    assert got["peak"] <= 1.3 * got["weights"], got


def test_an_init_net_message_allocates_its_weights_once():
    """numpy's allocations while a message of 4M weights (16 MB) runs, traced: one array
    of them, not a list, a key of their bytes or a second copy (14x before)."""
    big = RNG.standard_normal((2000, 2000)).astype(np.float32)
    msg = caffe2_pb2.NetDef.FromString(_packed(big))
    workspace.RunNetOnce(_init_net())  # (the modules and kernels a first run loads)
    tracemalloc.start()
    try:
        workspace.RunNetOnce(msg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(workspace.FetchBlob("w"), big)
    assert peak <= 1.3 * big.nbytes, peak / big.nbytes


def test_large_constants_merge_only_when_their_bytes_are_equal():
    """cse keys a large constant by a sample of its elements (not a copy of its bytes): equal
    fills still share one constant, and fills that differ where no sample looks (one element,
    or 0.0 against -0.0) stay apart."""
    base = RNG.standard_normal(5000).astype(np.float32)
    base[1] = 0.0
    other, signed = base.copy(), base.copy()
    other[1001] += 1.0  # (not one of the 64 elements sampled every 78)
    signed[1] = -0.0
    net = caffe2_pb2.NetDef(name="consts")
    for name, values in (("a", base), ("same", base), ("other", other), ("signed", signed)):
        _fill(net, "GivenTensorFill", name, values, values.shape)
    workspace.RunNetOnce(net)
    for name, values in (("a", base), ("same", base), ("other", other), ("signed", signed)):
        got = workspace.FetchBlob(name)
        assert got.tobytes() == values.tobytes(), name
