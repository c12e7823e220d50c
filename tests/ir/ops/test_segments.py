"""Segment reductions (LengthsSum/Mean, SparseLengthsSum/Mean/WeightedSum) and their
sparse gradients, on both devices.

Figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2: the same
inputs through workspace.RunOperatorOnce, and a net's AddGradientOperators, printed with
.tolist()).
"""
from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from dslc import core, optimizer, workspace
from dslc import hypothesis_test_util as hu
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

D = np.arange(12, dtype=np.float32).reshape(6, 2)
I = np.array([5, 0, 0, 2, 3], np.int64)  # noqa: E741
L = np.array([2, 0, 3], np.int32)
W = np.array([0.5, 2.0, 1.0, -1.0, 3.0], np.float32)
DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])


def _one(do, op_type, inputs):
    workspace.ResetWorkspace()
    for k, v in inputs.items():
        workspace.FeedBlob(k, v)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, list(inputs), ["y"], device_option=do))
    return workspace.FetchBlob("y").tolist()


@DEVICES
def test_values_match_caffe2(do):
    assert _one(do, "SparseLengthsSum", {"d": D, "i": I, "l": L}) == [[10.0, 12.0], [0.0, 0.0], [10.0, 13.0]]
    assert _one(do, "SparseLengthsMean", {"d": D, "i": I, "l": L}) == \
        [[5.0, 6.0], [0.0, 0.0], [3.3333334922790527, 4.333333492279053]]  # Caffe2 (x float32(1/3))
    assert _one(do, "SparseLengthsWeightedSum", {"d": D, "w": W, "i": I, "l": L}) == \
        [[5.0, 7.5], [0.0, 0.0], [14.0, 17.0]]
    l2 = np.array([1, 0, 5], np.int32)
    assert _one(do, "LengthsSum", {"d": D, "l": l2}) == [[0.0, 1.0], [0.0, 0.0], [30.0, 35.0]]
    assert _one(do, "LengthsMean", {"d": D, "l": l2}) == [[0.0, 1.0], [0.0, 0.0], [6.0, 7.0]]


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_the_tables_gradient_is_sparse_and_matches_caffe2(backend):
    net = core.Net("slm")
    net.SparseLengthsMean(["d", "i", "l"], "y")
    net.Sqr("y", "y2")
    net.SumElements("y2", "loss")
    grads = net.AddGradientOperators(["loss"])
    assert isinstance(grads["d"], core.GradientSlice) and grads["d"].indices == "i"
    workspace.FeedBlob("d", D)
    workspace.FeedBlob("i", I)
    workspace.FeedBlob("l", L)
    with LocalSession(backend=backend) as s:
        s.run(net)
    assert workspace.FetchBlob(grads["d"].values).tolist() == [  # Caffe2
        [5.0, 6.0], [5.0, 6.0], [2.222222328186035, 2.8888890743255615],
        [2.222222328186035, 2.8888890743255615], [2.222222328186035, 2.8888890743255615]]


class TestSegmentGradients(hu.HypothesisTestCase):
    @settings(max_examples=4, deadline=None, derandomize=True)
    @given(data=st.data(), **hu.gcs)
    def test_gradients(self, data, gc, dc):
        table = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
        lengths = data.draw(hu.lengths(6, max_segments=4))
        idx = np.array(data.draw(st.lists(st.integers(0, 4), min_size=6, max_size=6)), np.int64)
        w = np.linspace(0.5, 1.5, 6, dtype=np.float32)
        for op_type, ins in [("SparseLengthsSum", [table, idx, lengths]),
                             ("SparseLengthsMean", [table, idx, lengths]),
                             ("SparseLengthsWeightedSum", [table, w, idx, lengths])]:
            names = ["D", "W", "I", "L"] if len(ins) == 4 else ["D", "I", "L"]
            op = core.CreateOperator(op_type, names, ["Y"])
            self.assertDeviceChecks(dc, op, ins, [0])
            self.assertGradientChecks(gc, op, [a.copy() for a in ins], 0, [0])
        op = core.CreateOperator("LengthsMean", ["D", "L"], ["Y"])
        rows = np.linspace(-1, 1, 18, dtype=np.float32).reshape(6, 3)
        self.assertGradientChecks(gc, op, [rows, lengths], 0, [0])


@DEVICES
def test_bad_lengths_and_indices_are_located_errors(do):
    for inputs in ({"d": D, "i": I, "l": np.array([2, 2], np.int32)},  # add up to 4, not 5
                   {"d": D, "i": np.array([0, 6], np.int64), "l": np.array([2], np.int32)}):  # row 6 of 6
        with pytest.raises(DSLError) as e:
            _one(do, "SparseLengthsSum", inputs)
        assert e.value.loc is not None and e.value.loc.file.endswith("test_segments.py")


def _numpy_sgd(table, bags, lengths, targets, lr, steps):
    t = table.astype(np.float64)
    for s in range(steps):
        idx, lens, y = bags[s], lengths, targets[s]
        seg = np.repeat(np.arange(lens.size), lens)
        pooled = np.zeros((lens.size, t.shape[1]))
        np.add.at(pooled, seg, t[idx])
        dpooled = (pooled - y) / lens.size  # AveragedLoss of SquaredL2Distance
        np.add.at(t, idx, -lr * dpooled[seg])
    return t


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_an_sls_embedding_model_trains_as_numpy(backend):
    rng = np.random.default_rng(5)
    steps, lr = 5, 0.2
    lengths = np.array([3, 1, 2, 2], np.int32)
    bags = [rng.integers(0, 7, size=8).astype(np.int64) for _ in range(steps)]
    targets = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(steps)]
    model = ModelHelper(name=f"sls_{backend}")
    table = model.param_init_net.ConstantFill([], "table", shape=[7, 3], value=0.25)
    model.AddParameter(table)
    pooled = model.net.SparseLengthsSum([table, "ids", "lengths"], "pooled")
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([pooled, "target"], "d"), "loss")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, base_learning_rate=lr)
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        for k in range(steps):
            workspace.FeedBlob("ids", bags[k])
            workspace.FeedBlob("lengths", lengths)
            workspace.FeedBlob("target", targets[k])
            s.run(model.net)
    want = _numpy_sgd(np.full((7, 3), 0.25, np.float32), bags, lengths, targets, lr, steps)
    np.testing.assert_allclose(workspace.FetchBlob("table"), want, rtol=1e-5, atol=1e-6)


CAFFE2_UTILITIES = [  # (op, inputs, expected): read off the real Caffe2
    ("LengthsToSegmentIds", {"l": np.array([2, 0, 3, 1], np.int32)}, [0, 0, 2, 2, 2, 3]),
    ("LengthsToRanges", {"l": np.array([2, 0, 3, 1], np.int32)}, [[0, 2], [2, 0], [2, 3], [5, 1]]),
    ("LengthsToOffsets", {"l": np.array([2, 0, 3, 1], np.int32)}, [0, 2, 2, 5]),
    ("SegmentIdsToLengths", {"s": np.array([0, 0, 2, 2, 2, 3], np.int32)}, [2, 0, 3, 1]),
    ("SegmentIdsToRanges", {"s": np.array([0, 0, 2, 2, 2, 3], np.int32)}, [[0, 2], [2, 0], [2, 3], [5, 1]]),
    ("SortedSegmentSum", {"d": D, "s": np.array([0, 0, 1, 1, 1, 2], np.int32)},
     [[2.0, 4.0], [18.0, 21.0], [10.0, 11.0]]),
    ("SortedSegmentMean", {"d": D, "s": np.array([0, 0, 1, 1, 1, 2], np.int32)},
     [[1.0, 2.0], [6.0, 7.0], [10.0, 11.0]]),
    ("UnsortedSegmentSum", {"d": D, "u": np.array([3, 0, 3, 1, 0, 3], np.int32)},
     [[10.0, 12.0], [6.0, 7.0], [0.0, 0.0], [14.0, 17.0]]),
    ("UnsortedSegmentMean", {"d": D, "u": np.array([3, 0, 3, 1, 0, 3], np.int32)},
     [[5.0, 6.0], [6.0, 7.0], [0.0, 0.0], [4.6666669845581055, 5.6666669845581055]]),
    ("LengthsMax", {"d": D, "l": np.array([1, 2, 3], np.int32)}, [[0.0, 1.0], [4.0, 5.0], [10.0, 11.0]]),
    ("DotProduct", {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                    "b": np.arange(6, 12, dtype=np.float32).reshape(2, 3)}, [23.0, 122.0]),
]


@DEVICES
@pytest.mark.parametrize("op_type, inputs, want", CAFFE2_UTILITIES, ids=[c[0] for c in CAFFE2_UTILITIES])
def test_segment_utilities_match_caffe2(do, op_type, inputs, want):
    assert _one(do, op_type, inputs) == want


def test_lengths_to_weights_matches_caffe2():
    workspace.FeedBlob("l", np.array([2, 0, 3, 1], np.int32))
    workspace.RunOperatorOnce(core.CreateOperator("LengthsToWeights", ["l"], ["w"], power=0.5))
    np.testing.assert_array_equal(workspace.FetchBlob("w"), np.array(  # Caffe2
        [0.7071067690849304, 0.7071067690849304, 0.5773502588272095, 0.5773502588272095,
         0.5773502588272095, 1.0], np.float32))


class TestSegmentIdGradients(hu.HypothesisTestCase):
    @settings(max_examples=3, deadline=None, derandomize=True)
    @given(data=st.data(), **hu.gcs)
    def test_gradients(self, data, gc, dc):
        rows = np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)
        ids = np.array(data.draw(st.lists(st.integers(0, 3), min_size=6, max_size=6)), np.int32)
        for op_type in ("UnsortedSegmentSum", "UnsortedSegmentMean"):
            op = core.CreateOperator(op_type, ["D", "S"], ["Y"])
            self.assertGradientChecks(gc, op, [rows.copy(), ids], 0, [0])
        sorted_ids = np.sort(ids)
        sorted_ids = np.cumsum(np.r_[0, np.diff(sorted_ids) > 0]).astype(np.int32)  # no gaps
        for op_type in ("SortedSegmentSum", "SortedSegmentMean"):
            op = core.CreateOperator(op_type, ["D", "S"], ["Y"])
            self.assertGradientChecks(gc, op, [rows.copy(), sorted_ids], 0, [0])
        op = core.CreateOperator("DotProduct", ["A", "B"], ["Y"])
        for i in range(2):
            self.assertGradientChecks(gc, op, [rows.copy(), rows[::-1].copy()], i, [0])


S6 = np.array([0, 0, 1, 1, 1, 2], np.int32)
G3 = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
CAFFE2_MORE = [  # (op, inputs, expected): read off the real Caffe2 (torch 1.10.2's) with these inputs
    ("SortedSegmentRangeSum", {"d": D / 4, "s": S6}, [[0.5, 1.0], [4.5, 5.25], [2.5, 2.75]]),
    ("SortedSegmentRangeMean", {"d": D / 4, "s": S6}, [[0.25, 0.5], [1.5, 1.75], [2.5, 2.75]]),
    ("SortedSegmentRangeMax", {"d": D / 4, "s": S6}, [[0.5, 0.75], [2.0, 2.25], [2.5, 2.75]]),
    ("SortedSegmentRangeLogSumExp", {"d": D / 4, "s": S6},
     [[0.9740769863128662, 1.2240769863128662], [2.680269718170166, 2.930269718170166], [2.5, 2.75]]),
    ("SortedSegmentRangeLogMeanExp", {"d": D / 4, "s": S6},  # (Caffe2: 1.5816572904586792, 1 ulp apart)
     [[0.2809298038482666, 0.5309298038482666], [1.5816572904586792, 1.8316572904586792], [2.5, 2.75]]),
    ("SparseSortedSegmentSum", {"d": D, "i": I, "s": S6[:5]}, [[10.0, 12.0], [10.0, 13.0]]),
    ("SparseSortedSegmentMean", {"d": D, "i": I, "s": S6[:5]}, [[5.0, 6.0], [3.3333334922790527, 4.333333492279053]]),
    ("SparseUnsortedSegmentSum", {"d": D, "i": I, "u": np.array([2, 0, 2, 1, 0], np.int32)},
     [[6.0, 8.0], [4.0, 5.0], [10.0, 12.0]]),
    ("SparseUnsortedSegmentMean", {"d": D, "i": I, "u": np.array([2, 0, 2, 1, 0], np.int32)},
     [[3.0, 4.0], [4.0, 5.0], [5.0, 6.0]]),
    ("SparseLengthsPositionalWeightedSum", {"d": D, "w": np.array([0.5, 2.0, -1.0], np.float32), "i": I, "l": L},
     [[5.0, 7.5], [0.0, 0.0], [2.0, 3.5]]),
    ("SparseLengthsIndicesInGradientSumGradient", {"g": G3, "l": L, "i": I},
     [[1.0, 2.0], [1.0, 2.0], [5.0, 6.0], [5.0, 6.0], [5.0, 6.0]]),
    ("SparseLengthsIndicesInGradientMeanGradient", {"g": G3, "l": L, "i": I},
     [[0.5, 1.0], [0.5, 1.0], [1.6666667461395264, 2.0], [1.6666667461395264, 2.0], [1.6666667461395264, 2.0]]),
    ("SparseLengthsSumGradient", {"g": G3, "l": L}, [[1.0, 2.0], [1.0, 2.0], [5.0, 6.0], [5.0, 6.0], [5.0, 6.0]]),
]


@DEVICES
@pytest.mark.parametrize("op_type, inputs, want", CAFFE2_MORE, ids=[c[0] for c in CAFFE2_MORE])
def test_range_and_sparse_segment_ops_match_caffe2(do, op_type, inputs, want):
    np.testing.assert_allclose(_one(do, op_type, inputs), want, rtol=2e-7)


class TestRangeAndSparseSegmentGradients(hu.HypothesisTestCase):
    """Each gradient against finite differences, on both backends."""

    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        rows = np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)
        rows[3] += 0.3  # (no ties for Max: its gradient is not defined at one)
        for kind in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"):
            op = core.CreateOperator("SortedSegmentRange" + kind, ["D", "S"], ["Y"])
            self.assertGradientChecks(gc, op, [rows.copy(), S6], 0, [0])
        ids = np.array([4, 0, 1, 4, 2], np.int64)  # (a row read twice: its gradient parts add up)
        for op_type, seg in (("SparseSortedSegmentSum", S6[:5]), ("SparseSortedSegmentMean", S6[:5]),
                             ("SparseUnsortedSegmentSum", np.array([1, 0, 1, 2, 0], np.int32)),
                             ("SparseUnsortedSegmentMean", np.array([1, 0, 1, 2, 0], np.int32))):
            op = core.CreateOperator(op_type, ["D", "I", "S"], ["Y"])
            self.assertGradientChecks(gc, op, [rows.copy(), ids, seg], 0, [0])


def test_sparse_segment_gradient_is_a_slice_of_the_rows_read():
    """As Caffe2's: SortedSegmentSumGradient(dY, S) gives the rows' values, at INDICES."""
    op = core.CreateOperator("SparseSortedSegmentSum", ["D", "I", "S"], ["Y"])
    grads, gi = core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
    assert [(g.type, list(g.input)) for g in grads] == [("SortedSegmentSumGradient", ["Y_grad", "S"])]
    assert (gi[0].indices, gi[0].values) == ("I", "D_grad_values") and gi[1:] == [None, None]


@DEVICES
@pytest.mark.parametrize("width", [1, 16])
def test_rows_add_in_turn_as_caffe2_adds_them(do, width):
    # Caffe2 (torch 1.10.2's caffe2, RunOperatorOnce, .tolist()): each op gives [1.0, 1.5] at
    # widths 1 and 16: ((((0 + 1e8) + 1) - 1e8) + 1) is 1 in float32; paired, (1e8 + 1) + (-1e8 + 1)
    # is 0, as numpy's reduceat had it. The ids reversed: [[2.0], [0.0]]; the long bag: [1.0]
    v = np.array([1e8, 1, -1e8, 1, 3e7, -3e7, 0.5, 1], np.float32)
    data = np.repeat(v[:, None], width, axis=1)
    two = np.array([4, 4], np.int32)
    want = [[1.0] * width, [1.5] * width]
    assert _one(do, "SparseLengthsSum", {"d": data, "i": np.arange(8, dtype=np.int64), "l": two}) == want
    assert _one(do, "SparseLengthsSum", {"d": data, "i": np.arange(8, dtype=np.int64)[::-1].copy(),
                                         "l": two}) == [[2.0] * width, [0.0] * width]
    assert _one(do, "LengthsSum", {"d": data, "l": two}) == want
    # one long bag among short ones (the rows added one at a time, not in a padded grid)
    long = np.r_[np.zeros(40, np.float32), v[:4]]
    lengths = np.r_[np.full(40, 0, np.int32), [44], np.zeros(40, np.int32)].astype(np.int32)
    got = _one(do, "LengthsSum", {"d": np.repeat(long[:, None], width, axis=1), "l": lengths})
    assert got[40] == [1.0] * width and got[0] == got[80] == [0.0] * width
    t = np.zeros((2, width), np.float32)
    scatter = {"t": t, "one": np.ones(1, np.float32), "ids": np.array([0, 0, 0, 0, 1, 1, 1, 1], np.int64),
               "d": data, "w": np.ones(1, np.float32)}
    workspace.ResetWorkspace()
    for k, val in scatter.items():
        workspace.FeedBlob(k, val)
    workspace.RunOperatorOnce(core.CreateOperator("ScatterWeightedSum", ["t", "one", "ids", "d", "w"], ["t"],
                                                  device_option=do))
    assert workspace.FetchBlob("t").tolist() == want


@DEVICES
@pytest.mark.parametrize("lengths, last, want", [  # Caffe2's answers (LengthsToOffsets, /tmp/caffe2-venv)
    ([], 0, []), ([], 1, [0]), ([3], 1, [0, 3]), ([2, 0, 4], 0, [0, 2, 2]), ([2, 0, 4], 1, [0, 2, 2, 6])])
def test_lengths_to_offsets_with_the_last_offset_matches_caffe2(do, lengths, last, want):
    workspace.FeedBlob("l", np.array(lengths, np.int32))
    workspace.RunOperatorOnce(core.CreateOperator("LengthsToOffsets", ["l"], ["o"], include_last_offset=last,
                                                  device_option=do))
    got = workspace.FetchBlob("o")
    assert got.dtype == np.int32 and got.tolist() == want


class TestSparseToDenseGradient(hu.HypothesisTestCase):
    # Caffe2's gradient of SparseToDense's VALUES is Gather(dY, INDICES) (GetGradientForOp on the
    # real Caffe2); checked here against finite differences, repeated indices included
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_values_get_the_gathered_rows(self, gc, dc):
        idx = np.array([1, 1, 3, 0], np.int64)
        values = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
        data = np.zeros((5, 2), np.float32)
        op = core.CreateOperator("SparseToDense", ["I", "X", "D"], ["Y"])
        self.assertGradientChecks(gc, op, [idx, values, data], 1, [0])
        ops, grads = core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
        assert [(o.type, list(o.input), list(o.output)) for o in ops] == [("Gather", ["Y_grad", "I"], ["X_grad"])]
        assert grads == [None, "X_grad", None]
