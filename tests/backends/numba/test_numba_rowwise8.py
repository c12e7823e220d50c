"""The numba backend's 8-bit row-wise bags (backends/numba/kernels_embedding.py): the fused
(uint8 rows with their scale and bias in the last 8 bytes) and unfused (uint8 rows and a
SCALE_BIAS table) SparseLengths{Sum,Mean,WeightedSum} compile and give the interpreter's
answers bit for bit (the interpreter's are Caffe2's: tests/ir/ops/test_rowwise_8bit.py,
test_quantized.py); a bad index is the interpreter's error.
"""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession

LENGTHS = np.array([3, 0, 1, 4], np.int32)


def _feeds(ws):
    rng = np.random.default_rng(8)
    table = rng.normal(size=(40, 7)).astype(np.float32)
    ws.feed_blob("table", table)
    ws.feed_blob("ids", np.array([7, 7, 0, 39, 3, 3, 12, 21], np.int64))
    ws.feed_blob("lengths", LENGTHS)
    ws.feed_blob("w", rng.normal(size=8).astype(np.float32))


def _net():
    init, net = core.Net("quantize"), core.Net("bags")
    init.FloatToFused8BitRowwiseQuantized(["table"], "fused")
    init.FloatToRowwiseQuantized8Bits(["table"], ["q", "sb"])
    # (one helper serves all six ops; these three cover its fused / unfused and sum / mean /
    # weighted paths, and keep the compile short)
    net.SparseLengthsMeanFused8BitRowwise(["fused", "ids", "lengths"], "f_Mean")
    net.SparseLengthsSum8BitsRowwise(["q", "ids", "lengths", "sb"], "u_Sum")
    net.SparseLengthsWeightedSumFused8BitRowwise(["fused", "w", "ids", "lengths"], "f_Weighted")
    return init, net


def _run(backend):
    ws = workspace.Workspace()
    _feeds(ws)
    init, net = _net()
    s = LocalSession(ws, backend=backend)
    s.run(init)
    s.run(net)
    return s, net, {n: ws.fetch_blob(n) for n in ("f_Mean", "u_Sum", "f_Weighted")}


def test_rowwise_8bit_bags_compile_and_equal_the_interpreter():
    s, net, got = _run("numba")
    summary = s.compile(net).program.summary()
    assert summary["ops compiled"] == 3, summary["ops interpreted, and why"]
    _, _, want = _run("interp")
    for name, value in want.items():
        assert got[name].dtype == np.float32 and got[name].shape == (4, 7)
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert not got["u_Sum"][1].any()  # (the empty bag)


def test_an_index_outside_the_table_is_the_interpreters_error():
    ws = workspace.Workspace()
    _feeds(ws)
    ws.feed_blob("ids", np.array([7, 7, 0, 40, 3, 3, 12, 21], np.int64))
    init, net = _net()
    s = LocalSession(ws, backend="numba")
    s.run(init)
    with pytest.raises(DSLError, match="40") as e:
        s.run(net)
    assert s.compile(net).program.summary()["ops compiled"] == 3
    assert e.value.loc is not None and e.value.loc.file.endswith("test_numba_rowwise8.py")
