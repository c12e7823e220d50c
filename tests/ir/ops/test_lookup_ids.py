"""Lookup ops at their edge ids (-1, 0, the last row, one past it, empty batches), on every
backend and both pipelines, against Caffe2's answers or its errors.

Each figure marked "Caffe2:" was obtained by running the same operator on the same inputs
with ``workspace.RunOperatorOnce`` in the real Caffe2 (torch 1.10.2's caffe2.python,
/work/shared/tools/caffe2-ref) and copying the printed result or the enforce that failed.
Where Caffe2 has no answer (it writes outside the tensor: ScatterWeightedSum, the sparse
optimizers) or refuses a gradient dslc can give, the figure is by hand and the difference is
listed in docs/differences.md.
"""
import warnings

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession

T = np.arange(12, dtype=np.float32).reshape(3, 4)  # 3 rows, 4 columns


def i64(*v):
    return np.array(v, np.int64)


@pytest.fixture(params=["default", "none"])
def passes(request):
    return request.param


def run(backend, passes, build, feeds, outs):
    """``build(net)`` records ops reading ``feeds``; the values of ``outs`` after one run."""
    ws = workspace.Workspace()
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    net = core.Net("lookups")
    build(net)
    LocalSession(ws, backend=backend, passes=passes).run(net)
    return [ws.fetch_blob(o) for o in outs]


def fails(backend, passes, build, feeds, part):
    """Running ``build`` fails with ``part`` in the message, located at ``build``'s line."""
    with pytest.raises(DSLError) as e:
        run(backend, passes, build, feeds, [])
    assert part in e.value.message, e.value.message
    assert e.value.loc is not None and e.value.loc.file.endswith("test_lookup_ids.py"), e.value.loc
    assert e.value.loc.line == build.__code__.co_firstlineno
    return e.value


# ----------------------------------------------------------------------------- BatchGather
def test_batch_gather_refuses_a_negative_id_and_so_does_its_gradient(backend, passes):
    # Caffe2: BatchGather(T, [-1]) and BatchGatherGradient(T, [-1], ones[3, 1]) both fail
    # "INDICES element is out of DATA bounds, id=-1 axis_dim=4" (dslc wrapped it to column 3)
    feeds = {"d": T, "i": i64(-1), "g": np.ones((3, 1), np.float32)}
    fails(backend, passes, lambda n: n.BatchGather(["d", "i"], "y"), feeds,
          "BatchGather: id -1 is outside the 4 entries of DATA's axis 1")
    fails(backend, passes, lambda n: n.BatchGatherGradient(["d", "i", "g"], "dd"), feeds,
          "BatchGatherGradient: id -1 is outside the 4 entries of DATA's axis 1")
    fails(backend, passes, lambda n: n.BatchGather(["d", "far"], "y"), {"d": T, "far": i64(4)},
          "BatchGather: id 4 is outside the 4 entries of DATA's axis 1")


def test_batch_gather_at_its_edge_ids_and_its_gradient(backend, passes):
    g = np.arange(9, dtype=np.float32).reshape(3, 3)
    y, dd = run(backend, passes, lambda n: (n.BatchGather(["d", "i"], "y"), n.BatchGatherGradient(["d", "i", "g"], "dd")),
                {"d": T, "i": i64(3, 0, 3), "g": g}, ["y", "dd"])
    # Caffe2: [[3, 0, 3], [7, 4, 7], [11, 8, 11]] and [[1, 0, 0, 2], [4, 0, 0, 8], [7, 0, 0, 14]]
    np.testing.assert_array_equal(y, [[3, 0, 3], [7, 4, 7], [11, 8, 11]])
    np.testing.assert_array_equal(dd, [[1, 0, 0, 2], [4, 0, 0, 8], [7, 0, 0, 14]])


def test_batch_gather_of_an_empty_batch_checks_nothing(backend, passes):
    # Caffe2: BatchGather(zeros[0, 4], [7]) is float32[0, 1], its gradient float32[0, 4]: no
    # value moves, so no id is checked
    y, dd = run(backend, passes, lambda n: (n.BatchGather(["d", "i"], "y"), n.BatchGatherGradient(["d", "i", "g"], "dd")),
                {"d": np.zeros((0, 4), np.float32), "i": i64(7), "g": np.zeros((0, 1), np.float32)}, ["y", "dd"])
    assert y.shape == (0, 1) and dd.shape == (0, 4)


def test_batch_gather_ignores_axis_as_caffe2_does(backend, passes):
    d = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with warnings.catch_warnings():  # (dslc says it ignores the argument)
        warnings.simplefilter("ignore")
        (y,) = run(backend, passes, lambda n: n.BatchGather(["d", "i"], "y", axis=2), {"d": d, "i": i64(1)}, ["y"])
    np.testing.assert_array_equal(y, d[:, [1], :])  # Caffe2: shape (2, 1, 4) for axis 0, 2 or none


def test_batch_gather_gradient_through_add_gradient_operators(backend, passes):
    def build(n):
        n.BatchGather(["d", "i"], "y")
        n.SumElements(["y"], "loss")
        n.AddGradientOperators(["loss"])
    (dd,) = run(backend, passes, build, {"d": T, "i": i64(3, 3, 0)}, ["d_grad"])
    np.testing.assert_array_equal(dd, [[1, 0, 0, 2]] * 3)  # (by hand: column 3 read twice, 0 once)


# ----------------------------------------------------------------------------- Gather
def test_gather_wraps_a_negative_id_along_axis_0_only(backend, passes):
    # Caffe2: Gather(T, [-3, 2]) = rows 0 and 2; Gather(T, [-4]) fails "out of DATA bounds,
    # id=-1 axis_dim=3"; along axis 1, or with wrap_indices=0, -1 fails as out of DATA bounds
    (y,) = run(backend, passes, lambda n: n.Gather(["d", "i"], "y"), {"d": T, "i": i64(-3, 2)}, ["y"])
    np.testing.assert_array_equal(y, T[[0, 2]])
    fails(backend, passes, lambda n: n.Gather(["d", "i"], "y"), {"d": T, "i": i64(-4)},
          "Gather: id -4 is outside DATA's 3 rows")
    fails(backend, passes, lambda n: n.Gather(["d", "i"], "y", axis=1), {"d": T, "i": i64(-1)},
          "Gather: id -1 is outside the 4 entries of DATA's axis 1")
    fails(backend, passes, lambda n: n.Gather(["d", "i"], "y", wrap_indices=0), {"d": T, "i": i64(-1)},
          "Gather: id -1 is outside DATA's 3 rows")


def test_gather_wrap_indices_along_axis_1_and_its_gradient(backend, passes):
    def build(n):
        n.Gather(["d", "i"], "y", axis=1, wrap_indices=1)
        n.SumElements(["y"], "loss")
        n.AddGradientOperators(["loss"])
    y, dd = run(backend, passes, build, {"d": T, "i": i64(-1, 0)}, ["y", "d_grad"])
    np.testing.assert_array_equal(y, [[3, 0], [7, 4], [11, 8]])  # Caffe2: [[3, 0], [7, 4], [11, 8]]
    # (by hand: columns 3 and 0 each read once. Caffe2's gradient refuses the -1, id=-1 out
    # of DATA bounds: docs/differences.md)
    np.testing.assert_array_equal(dd, [[1, 0, 0, 1]] * 3)


def test_a_negative_ids_sparse_gradient_lands_on_the_row_it_read(backend, passes):
    def build(n):
        n.Gather(["d", "i"], "y")
        n.SumElements(["y"], "loss")
        grads = n.AddGradientOperators(["loss"])
        # the sparse gradient applied as SGD applies it, and made dense
        n.ScatterWeightedSum(["d", "one", grads["d"].indices, grads["d"].values, "lr"], "d")
        n.SparseToDense([grads["d"].indices, grads["d"].values, "d"], "dense", wrap_indices=1)
    one, lr = np.ones(1, np.float32), np.array([-0.5], np.float32)
    d, dense = run(backend, passes, build, {"d": T, "i": i64(-1, 0, -1), "one": one, "lr": lr}, ["d", "dense"])
    want = np.zeros_like(T)
    want[2], want[0] = 2, 1  # (by hand: row 2 read twice, as -1, row 0 once)
    np.testing.assert_array_equal(dense, want)
    np.testing.assert_array_equal(d, T - 0.5 * want)


def test_gather_with_dense_gradient(backend, passes):
    def build(n):
        n.Gather(["d", "i"], "y", dense_gradient=1)
        n.SumElements(["y"], "loss")
        grads = n.AddGradientOperators(["loss"])
        assert grads["d"] == "d_grad"  # (Caffe2: a dense 'd_grad', SparseToDense's output)
    (dd,) = run(backend, passes, build, {"d": T, "i": i64(2, 0, 2)}, ["d_grad"])
    np.testing.assert_array_equal(dd, [[1] * 4, [0] * 4, [2] * 4])  # Caffe2: [[1..], [0..], [2..]]
    # (a -1 lands on the last row; Caffe2's SparseToDense refuses it, "idx >= 0")
    (dd,) = run(backend, passes, build, {"d": T, "i": i64(-1, 0, 2)}, ["d_grad"])
    np.testing.assert_array_equal(dd, [[1] * 4, [0] * 4, [2] * 4])


def test_gather_from_an_empty_table(backend, passes):
    # Caffe2: Gather(zeros[0, 4], []) is float32[0, 4]; an id into no rows is refused here
    # (Caffe2 gives float32[0, 4] for any ids: docs/differences.md)
    empty = np.zeros((0, 4), np.float32)
    (y,) = run(backend, passes, lambda n: n.Gather(["d", "i"], "y"), {"d": empty, "i": i64()}, ["y"])
    assert y.shape == (0, 4)
    fails(backend, passes, lambda n: n.Gather(["d", "i"], "y"), {"d": empty, "i": i64(0)},
          "Gather: id 0 is outside DATA's 0 rows")


# ----------------------------------------------------------------------------- SparseLengthsWeightedSum
def test_sparse_lengths_weighted_sum_takes_one_weight_per_id(backend, passes):
    d = T
    build = lambda n: n.SparseLengthsWeightedSum(["d", "w", "i", "l"], "y")  # noqa: E731
    # Caffe2: 2 weights for 3 ids fails "weightInput.numel() == indices_size. 2 vs 3. Weight
    # should have the same length as indices" (dslc spread one weight over every id; 2 failed
    # only at numpy's broadcast)
    for w in (np.array([2], np.float32), np.array([1, 2], np.float32)):
        with pytest.raises(DSLError, match=f"{w.size} weights for 3 ids") as e:
            run(backend, passes, build, {"d": d, "w": w, "i": i64(2, 0, 1), "l": np.array([3], np.int32)}, [])
        assert e.value.loc.line == build.__code__.co_firstlineno
    # ... and a 2-D WEIGHTS: "WEIGHT must be a vector"
    with pytest.raises(DSLError, match="WEIGHTS must be a vector"):
        run(backend, passes, build, {"d": d, "w": np.ones((1, 3), np.float32), "i": i64(2, 0, 1),
                                     "l": np.array([3], np.int32)}, [])
    # Caffe2: weights [1, -1, 2], ids [2, 0, 2], lengths [1, 0, 2] give [[8, 9, 10, 11], 0, [16, 17, 18, 19]]
    (y,) = run(backend, passes, build, {"d": d, "w": np.array([1, -1, 2], np.float32), "i": i64(2, 0, 2),
                                        "l": np.array([1, 0, 2], np.int32)}, ["y"])
    np.testing.assert_array_equal(y, [[8, 9, 10, 11], [0, 0, 0, 0], [16, 17, 18, 19]])


def test_a_weight_count_known_only_when_run(backend, passes):
    # (the weights' length comes from LengthsToWeights: 4 weights for 3 ids)
    fails(backend, passes, lambda n: n.SparseLengthsWeightedSum(["d", n.LengthsToWeights(["l4"]), "i", "l"], "y"),
          {"d": T, "l4": np.array([3, 1], np.int32), "i": i64(2, 0, 1), "l": np.array([3], np.int32)},
          "WEIGHTS has shape [4], but there are 3 ids")


def test_bags_refuse_negative_and_past_the_end_ids(backend, passes):
    # Caffe2: "Index 0 is out of bounds: -1, range 0 to 3" (and 3 likewise) for every bag op
    feeds = {"d": T, "w": np.ones(1, np.float32), "l": np.array([1], np.int32)}
    for bad in (-1, 3):
        feeds["i"] = i64(bad)
        for build in (lambda n: n.SparseLengthsSum(["d", "i", "l"], "y"),
                      lambda n: n.SparseLengthsMean(["d", "i", "l"], "y"),
                      lambda n: n.SparseLengthsWeightedSum(["d", "w", "i", "l"], "y")):
            fails(backend, passes, build, feeds, f"id {bad} is outside DATA's 3 rows")


# ----------------------------------------------------------------------------- SparseToDense
def test_sparse_to_dense_with_two_inputs(backend, passes):
    s2d = lambda **kw: lambda n: n.SparseToDense(["i", "v"], "y", **kw)  # noqa: E731
    v = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    (y,) = run(backend, passes, s2d(), {"i": i64(3, 1, 3), "v": v}, ["y"])
    np.testing.assert_array_equal(y, [[0, 0], [3, 4], [0, 0], [6, 8]])  # Caffe2: the largest id + 1 rows
    (y,) = run(backend, passes, s2d(), {"i": i64(1, 4), "v": np.array([1, 2], np.int64)}, ["y"])
    assert y.dtype == np.int64 and y.tolist() == [0, 1, 0, 0, 2]  # Caffe2: int64 [0, 1, 0, 0, 2]
    (y,) = run(backend, passes, s2d(output_first_dim=6), {"i": i64(1, 4), "v": np.ones((2, 2), np.float32)}, ["y"])
    np.testing.assert_array_equal(y, [[0, 0], [1, 1], [0, 0], [0, 0], [1, 1], [0, 0]])  # Caffe2: 6 rows
    (y,) = run(backend, passes, s2d(), {"i": i64(), "v": np.zeros((0, 4), np.float32)}, ["y"])
    assert y.shape == (0, 4)  # Caffe2: float32[0, 4]
    # Caffe2: "idx < output_first_dim. 4 vs 3" and "idx >= 0. -1 vs 0"
    fails(backend, passes, s2d(output_first_dim=3), {"i": i64(1, 4), "v": np.ones((2, 2), np.float32)},
          "SparseToDense: id 4 is outside the output's 3 rows")
    fails(backend, passes, s2d(), {"i": i64(2, -1), "v": np.ones((2, 2), np.float32)},
          "SparseToDense: id -1 is outside the output's 3 rows")
    # (rows from the largest id: a huge one is refused before anything is allocated)
    fails(backend, passes, s2d(), {"i": i64(10**12), "v": np.ones((1, 2), np.float32)},
          "SparseToDense: a float32[1000000000001, 2] tensor needs")


def test_sparse_to_dense_with_three_inputs(backend, passes):
    s2d = lambda n: n.SparseToDense(["i", "v", "d"], "y")  # noqa: E731
    # Caffe2: int32 values and float DATA give int32 [[1, 1], [1, 1], [0, 0]] (DATA gives only its rows)
    (y,) = run(backend, passes, s2d, {"i": i64(0, 1), "v": np.ones((2, 2), np.int32), "d": np.zeros(3, np.float32)},
               ["y"])
    assert y.dtype == np.int32 and y.tolist() == [[1, 1], [1, 1], [0, 0]]
    # Caffe2: "idx >= 0. -1 vs 0" (dslc wrapped it to the last row), "idx < output_first_dim. 3 vs 3"
    for bad in (-1, 3):
        fails(backend, passes, s2d, {"i": i64(0, bad), "v": np.ones((2, 4), np.float32), "d": T},
              f"SparseToDense: id {bad} is outside the output's 3 rows")
    # Caffe2: "InputSize() == 2. 3 vs 2" with output_first_dim and DATA both
    with pytest.raises(DSLError, match="output_first_dim only without a third input"):
        run(backend, passes, lambda n: n.SparseToDense(["i", "v", "d"], "y", output_first_dim=6),
            {"i": i64(0), "v": np.ones((1, 4), np.float32), "d": T}, [])


# ----------------------------------------------------------------------------- Shape
@pytest.mark.parametrize("axes, want", [([0, 0], [2, 2]), ([1, 0], [3, 2]), ([1, 1, 0], [3, 3, 2]),
                                        ([2, 0, 2], [5, 2, 5]), ([], [2, 3, 5])])
def test_shape_at_axes(backend, passes, axes, want):
    # Caffe2: Shape(zeros[2, 3, 5], axes) gives the dims at axes, repeats repeated
    (y,) = run(backend, passes, lambda n: n.Shape(["x"], "y", axes=axes), {"x": np.zeros((2, 3, 5), np.float32)}, ["y"])
    assert y.dtype == np.int64 and y.tolist() == want


@pytest.mark.parametrize("axes", [[-1], [3], [0, -3]])
def test_shape_refuses_an_axis_outside_the_rank(backend, passes, axes):
    # Caffe2: "axis >= 0. -1 vs 0. Each axis should be non-negative", "axis < numDims. 3 vs 3"
    with pytest.raises(DSLError, match=f"Shape axis {[a for a in axes if not 0 <= a < 3][0]} is outside"):
        run(backend, passes, lambda n: n.Shape(["x"], "y", axes=axes), {"x": np.zeros((2, 3, 5), np.float32)}, [])


# ----------------------------------------------------------------------------- sparse updates
UPDATES = {  # op, its inputs (the ids "i"), the output checked, the row update of one gradient row of ones by hand
    "ScatterWeightedSum": (["d", "one", "i", "g", "lr"], "d", lambda row: row - 0.5),
    "ScatterAssign": (["d", "i", "g"], "d", lambda row: np.ones_like(row)),
    "SparseAdagrad": (["d", "m", "i", "g", "lr"], "d", lambda row: row - 0.5 / (1 + np.float32(1e-5))),
}


@pytest.mark.parametrize("op", sorted(UPDATES))
def test_sparse_updates_at_edge_ids(backend, passes, op):
    """-1 is the last row (Caffe2 writes before the tensor: no answer there); 3, one past
    the end, is refused before any row changes (Caffe2 writes past it)."""
    inputs, out, update = UPDATES[op]
    feeds = {"d": T, "m": np.zeros_like(T), "one": np.ones(1, np.float32), "g": np.ones((1, 4), np.float32),
             "lr": np.array([-0.5], np.float32)}
    build = lambda n: getattr(n, op)(inputs, [out, "m"][:1 if op != "SparseAdagrad" else 2])  # noqa: E731
    for good, row in ((-1, 2), (0, 0), (2, 2), (-3, 0)):
        (got,) = run(backend, passes, build, dict(feeds, i=i64(good)), [out])
        want = T.copy()
        want[row] = update(T[row])
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{op} at id {good}")
    for bad in (3, -4):
        fails(backend, passes, build, dict(feeds, i=i64(bad)), f"{op}: id {bad} is outside")


# ----------------------------------------------------------------------------- lengths and segment ids
def test_segment_ids_to_lengths_wants_sorted_ids(backend, passes):
    # Caffe2: [0, 2, 1] fails "Segment ids must be sorted: 2 vs 1"; [1, 1, 2] gives [0, 2, 1]
    fails(backend, passes, lambda n: n.SegmentIdsToLengths(["s"], "y"), {"s": np.array([0, 2, 1], np.int32)},
          "segment ids must be sorted")
    (y,) = run(backend, passes, lambda n: n.SegmentIdsToLengths(["s"], "y"), {"s": np.array([1, 1, 2], np.int32)}, ["y"])
    assert y.tolist() == [0, 2, 1]


def test_a_negative_length_is_named(backend, passes):
    # Caffe2: LengthsToWeights fails "unexpected negative length value"; LengthsToSegmentIds
    # and LengthsSumGradient crash on one (dslc reported numpy's "repeats may not contain
    # negative values")
    feeds = {"l": np.array([2, -1], np.int32), "g": np.ones((2, 4), np.float32)}
    for build in (lambda n: n.LengthsToSegmentIds(["l"], "y"), lambda n: n.LengthsToWeights(["l"], "y"),
                  lambda n: n.LengthsSumGradient(["g", "l"], "y")):
        fails(backend, passes, build, feeds, "LENGTHS holds a negative length (-1)")


def test_the_weighted_bag_gradients_take_caffe2s_input_order(backend, passes):
    # Caffe2: LengthsWeightedSumGradient(w=[1, 2, 3], dY=[[1, 2], [3, 4]], lengths=[2, 1])
    # = [[1, 2], [2, 4], [9, 12]]; SparseLengthsIndicesInGradientWeightedSumGradient(w, dY,
    # lengths, ids) the same
    feeds = {"w": np.array([1, 2, 3], np.float32), "g": np.array([[1, 2], [3, 4]], np.float32),
             "l": np.array([2, 1], np.int32), "i": i64(0, 2, 1)}
    a, b = run(backend, passes, lambda n: (n.LengthsWeightedSumGradient(["w", "g", "l"], "a"),
                                           n.SparseLengthsIndicesInGradientWeightedSumGradient(["w", "g", "l", "i"], "b")),
               feeds, ["a", "b"])
    np.testing.assert_array_equal(a, [[1, 2], [2, 4], [9, 12]])
    np.testing.assert_array_equal(b, [[1, 2], [2, 4], [9, 12]])


def test_row_wise_counter_counts_only_with_a_half_life(backend, passes):
    # Caffe2: prev_iter [0, 2, 0], counter [0, 1.5, 0], ids [1, 0], iter 5: unchanged without
    # counter_halflife (dslc counted); with counter_halflife=2 and ids [1, 0, 1]:
    # prev_iter [5, 5, 0], counter [1.0, 2.5303300858899105, 0.0]
    feeds = {"p": np.array([0, 2, 0], np.int64), "c": np.array([0, 1.5, 0]), "it": i64(5)}
    p, c = run(backend, passes, lambda n: n.RowWiseCounter(["p", "c", "i", "it"], ["p", "c"]), dict(feeds, i=i64(1, 0)),
               ["p", "c"])
    assert p.tolist() == [0, 2, 0] and c.tolist() == [0, 1.5, 0]
    p, c = run(backend, passes, lambda n: n.RowWiseCounter(["p", "c", "i", "it"], ["p", "c"], counter_halflife=2),
               dict(feeds, i=i64(1, 0, 1)), ["p", "c"])
    assert p.tolist() == [5, 5, 0]
    np.testing.assert_allclose(c, [1.0, 2.5303300858899105, 0.0], rtol=1e-12)


def test_bags_of_a_float16_table_add_in_float32(backend, passes):
    # Caffe2: a float16 table [[0, .25, .5, .75], ...] (arange(12) / 4), ids [2, 0, 2], lengths
    # [1, 2], weights [1, 2, .5]: float32 sums [[2, 2.25, 2.5, 2.75], [2, 2.5, 3, 3.5]], means
    # [.., [1, 1.25, 1.5, 1.75]], weighted [.., [1, 1.625, 2.25, 2.875]] (dslc gave float16, and
    # its numba backend failed on float16 with a bare NotImplementedError)
    d = (np.arange(12).reshape(3, 4) / 4).astype(np.float16)
    feeds = {"d": d, "i": i64(2, 0, 2), "l": np.array([1, 2], np.int32), "w": np.array([1, 2, 0.5], np.float32)}
    s, m, w = run(backend, passes, lambda n: (n.SparseLengthsSum(["d", "i", "l"], "s"),
                                              n.SparseLengthsMean(["d", "i", "l"], "m"),
                                              n.SparseLengthsWeightedSum(["d", "w", "i", "l"], "w_")), feeds, ["s", "m", "w_"])
    assert s.dtype == m.dtype == w.dtype == np.float32
    np.testing.assert_array_equal(s, [[2, 2.25, 2.5, 2.75], [2, 2.5, 3, 3.5]])
    np.testing.assert_array_equal(m, [[2, 2.25, 2.5, 2.75], [1, 1.25, 1.5, 1.75]])
    np.testing.assert_array_equal(w, [[2, 2.25, 2.5, 2.75], [1, 1.625, 2.25, 2.875]])


def test_a_float16_sparse_update(backend, passes):
    # (Caffe2 refuses float16 here, "Unsupported type of tensor X_0: c10::Half"; dslc updates
    # it, on numba as on the interpreter. By hand: rows 2 (twice) and 0 move by -0.5 each time)
    h = np.float16
    d = (np.arange(12).reshape(3, 4) / 4).astype(h)
    (got,) = run(backend, passes, lambda n: n.ScatterWeightedSum(["d", "one", "i", "g", "lr"], "d"),
                 {"d": d, "one": np.ones(1, h), "i": i64(2, 0, 2), "g": np.ones((3, 4), h), "lr": np.array([-0.5], h)},
                 ["d"])
    assert got.dtype == h
    np.testing.assert_array_equal(got, d + np.array([[-0.5], [0], [-1]], h))
