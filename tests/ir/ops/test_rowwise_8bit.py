"""Caffe2's unfused 8-bit row-wise tables (ir/ops/quantized.py): FloatToRowwiseQuantized8Bits,
Rowwise8BitQuantizedToFloat and SparseLengths{Sum,Mean,WeightedSum}8BitsRowwise.

The figures were read off the real Caffe2 (torch 1.10.2's caffe2.python through
shared/tools/caffe2-ref/run.sh) running these ops on the inputs below, printing every output.
By hand: row 2 = [5, 11, 9, -2] has scale 13/255 = 0.050980, bias -2, so 5 -> round(7 / scale) = 137.
"""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError

X = np.float32([[801., 786, 235.2, 2353.3434], [9., 9., 9., 9.], [5., 11., 9., -2.]])
Q = [[68, 66, 0, 255], [0, 0, 0, 0], [137, 255, 216, 0]]
SB = [[8.306445121765137, 235.1999969482422], [1.0, 9.0], [0.05098039284348488, -2.0]]  # constant row: scale 1
DEQ = [[800.0382690429688, 783.4254150390625, 235.1999969482422, 2353.343505859375], [9.0] * 4,
       [4.98431396484375, 11.0, 9.011764526367188, -2.0]]
SUM = [[4.98431396484375, 11.0, 9.011764526367188, -2.0],
       [814.0225830078125, 803.4253540039062, 253.21176147460938, 2360.343505859375], [0.0] * 4]
MEAN = [[4.98431396484375, 11.0, 9.011764526367188, -2.0],
        [271.34088134765625, 267.8084716796875, 84.40392303466797, 786.7811889648438], [0.0] * 4]
WSUM = [[2.492156982421875, 5.5, 4.505882263183594, -1.0],
        [1604.09228515625, 1564.8507080078125, 470.3882141113281, 4717.68701171875], [0.0] * 4]


def test_quantize_dequantize_and_lookups_are_caffe2s(backend):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", X)
    workspace.FeedBlob("i", np.array([2, 0, 1, 2], np.int64))
    workspace.FeedBlob("l", np.array([1, 3, 0], np.int32))
    workspace.FeedBlob("w", np.array([0.5, 2, 1, -1], np.float32))
    net = core.Net("q8")
    net.FloatToRowwiseQuantized8Bits(["x"], ["q", "sb"])
    net.Rowwise8BitQuantizedToFloat(["q", "sb"], ["deq"])
    net.SparseLengthsSum8BitsRowwise(["q", "i", "l", "sb"], ["sum"])
    net.SparseLengthsMean8BitsRowwise(["q", "i", "l", "sb"], ["mean"])
    net.SparseLengthsWeightedSum8BitsRowwise(["q", "w", "i", "l", "sb"], ["wsum"])
    workspace.current().run(net, backend=backend)
    q = workspace.FetchBlob("q")
    assert q.dtype == np.uint8 and q.tolist() == Q
    assert workspace.FetchBlob("sb").tolist() == SB
    assert workspace.FetchBlob("deq").tolist() == DEQ
    assert workspace.FetchBlob("sum").tolist() == SUM
    np.testing.assert_allclose(workspace.FetchBlob("mean"), MEAN, rtol=1e-7)
    assert workspace.FetchBlob("wsum").tolist() == WSUM


def test_a_scale_bias_of_the_wrong_shape_is_a_located_error():
    workspace.ResetWorkspace()
    workspace.FeedBlob("q", np.zeros((3, 4), np.uint8))
    workspace.FeedBlob("sb", np.zeros((3, 3), np.float32))
    with pytest.raises(DSLError, match=r"scale_bias is \[rows, 2\]"):
        workspace.RunOperatorOnce(core.CreateOperator("Rowwise8BitQuantizedToFloat", ["q", "sb"], ["y"]))
