"""Caffe2's small operators its hypothesis_test reaches for: RowMul (+ its gradient, through
ReduceTailSum), HasElements, EnsureDense (+ gradient), MultiClassAccuracy, AccumulateHistogram,
ConstantFill with a value input, StatRegistryExport.

The CAFFE2 figures were printed by the real Caffe2 (torch 1.10.2's caffe2.python, the
/tmp/caffe2-venv of shared/tools/caffe2-ref): each test says which net; the rest are computed
here by numpy or by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.runtime.resources import STATS

f32 = np.float32
X = np.arange(6, dtype=f32).reshape(3, 2) - 2  # [[-2, -1], [0, 1], [2, 3]]
W = np.array([1, 2, 3], f32)


def _run(net, backend="interp", **feeds):
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.current().run(net, backend=backend)


def test_row_mul_and_its_gradient_are_caffe2s(backend):
    """Caffe2: RowMul(X, w) with AddGradientOperators([Y]) (dY = 1s): Y, X_grad, w_grad."""
    net = core.Net("row_mul")
    net.RowMul(["X", "w"], ["Y"])
    grads = net.AddGradientOperators(["Y"])
    _run(net, backend, X=X, w=W)
    np.testing.assert_array_equal(workspace.FetchBlob("Y"), [[-2, -1], [0, 2], [6, 9]])
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["X"])), [[1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["w"])), [-3, 1, 5])


def test_row_mul_gradient_matches_finite_differences():
    """A 3-D X (rows of [2, 2]) under loss = sum(RowMul(X, w) * c)."""
    rng = np.random.RandomState(3)
    x, w, c = rng.randn(3, 2, 2).astype(np.float64), rng.randn(3).astype(np.float64), rng.randn(3, 2, 2)
    net = core.Net("row_mul_fd")
    net.RowMul(["X", "w"], ["Y"])
    net.AddGradientOperators({"Y": "C"})
    _run(net, X=x, w=w, C=c)

    def loss(x_, w_):
        return float((x_ * w_[:, None, None] * c).sum())
    eps = 1e-6
    dw = [(loss(x, w + eps * e) - loss(x, w - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(workspace.FetchBlob("w_grad"), dw, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("X_grad"), c * w[:, None, None], rtol=1e-12)


def test_row_mul_needs_one_weight_per_row():
    net = core.Net("row_mul_bad")
    net.RowMul(["X", "w"], ["Y"])
    with pytest.raises(DSLError, match="w has 2 elements for X's 3 rows"):
        _run(net, X=X, w=np.ones(2, f32))


def test_has_elements_and_ensure_dense(backend):
    """Caffe2: HasElements of (X), (e), (e, X), (e, e) with e a [0, 3] tensor: True, False,
    True, False, bool scalars; of a scalar: True. EnsureDense(X) is X, and its gradient passes
    dY on as dX."""
    empty = np.zeros((0, 3), f32)
    net = core.Net("has")
    for i, ins in enumerate([["X"], ["e"], ["e", "X"], ["e", "e"], ["s"]]):
        net.HasElements(ins, [f"h{i}"])
    net.EnsureDense(["X"], ["d"])
    net.AddGradientOperators({"d": "dd"})
    _run(net, backend, X=X, e=empty, s=np.array(1.0, f32), dd=X * 3)
    got = [workspace.FetchBlob(f"h{i}") for i in range(5)]
    assert [bool(h) for h in got] == [True, False, True, False, True]
    assert all(np.asarray(h).dtype == np.bool_ and np.shape(h) == () for h in got)
    np.testing.assert_array_equal(workspace.FetchBlob("d"), X)
    np.testing.assert_array_equal(workspace.FetchBlob("X_grad"), X * 3)


P = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]], f32)


def test_multi_class_accuracy_is_caffe2s():
    """Caffe2: MultiClassAccuracy(P, [1, 2, 2, 0]) -> [1, 1, 0.5] (float32), [1, 1, 2] (int32):
    the tie in the last row goes to column 0; an empty batch gives zeros."""
    net = core.Net("mca")
    net.MultiClassAccuracy(["P", "L"], ["acc", "amt"])
    _run(net, P=P, L=np.array([1, 2, 2, 0], np.int32))
    acc, amt = workspace.FetchBlob("acc"), workspace.FetchBlob("amt")
    assert acc.dtype == f32 and amt.dtype == np.int32
    np.testing.assert_array_equal(acc, [1, 1, 0.5])
    np.testing.assert_array_equal(amt, [1, 1, 2])
    _run(net, P=np.zeros((0, 3), f32), L=np.zeros(0, np.int32))
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), [0, 0, 0])
    np.testing.assert_array_equal(workspace.FetchBlob("amt"), [0, 0, 0])


def test_multi_class_accuracy_refuses_a_label_outside_the_classes():
    """(Caffe2 writes past its arrays: label 2 of 2 classes gave [0, 0] there)"""
    net = core.Net("mca_bad")
    net.MultiClassAccuracy(["P", "L"], ["acc", "amt"])
    with pytest.raises(DSLError, match="label 3 is not one of the 3 classes"):
        _run(net, P=P, L=np.array([1, 3, 2, 0], np.int32))


H = np.array([[0.05, 0.1, 0.3], [0.5, 0.89, 0.9], [1.5, -1, 0.7]], f32)


def test_accumulate_histogram_adds_up_over_the_runs_of_a_created_net():
    """Caffe2: AccumulateHistogram(H) {lower_bound=0.1, upper_bound=0.9, num_buckets=4} in a
    created net run 3 times: cur [2 1 1 1 2 2] each time, acc 1x, 2x, 3x that (int64)."""
    workspace.FeedBlob("H", H)
    net = core.Net("hist")
    net.AccumulateHistogram(["H"], ["cur", "acc"], lower_bound=0.1, upper_bound=0.9, num_buckets=4)
    workspace.CreateNet(net)
    cur = np.array([2, 1, 1, 1, 2, 2])
    for k in (1, 2, 3):
        workspace.RunNet(net.Name())
        c, a = workspace.FetchBlob("cur"), workspace.FetchBlob("acc")
        assert c.dtype == np.int64 and a.dtype == np.int64
        np.testing.assert_array_equal(c, cur)
        np.testing.assert_array_equal(a, k * cur)


def test_accumulate_histogram_bounds():
    """By hand: below lower_bound first (so with lower > upper everything under lower is
    bucket 0, as Caffe2 counts: [5 0 2]); defaults 0, 1, one bucket (Caffe2: [1 4 2])."""
    x = np.array([0.1, 0.9, 0.5, 0.0, 1.0, -5.0, 7.0], f32)
    for args, want in [({}, [1, 4, 2]), ({"lower_bound": 1.0, "upper_bound": 0.5}, [5, 0, 2])]:
        workspace.ResetWorkspace()
        net = core.Net("bounds")
        net.AccumulateHistogram(["x"], ["cur", "acc"], **args)
        _run(net, x=x)
        np.testing.assert_array_equal(workspace.FetchBlob("cur"), want)
    net = core.Net("nan")
    net.AccumulateHistogram(["x"], ["cur", "acc"])
    with pytest.raises(DSLError, match="NaN"):
        _run(net, x=np.array([np.nan], f32))


def test_constant_fill_takes_its_value_from_a_second_input(backend):
    """Caffe2: ConstantFill([X, V]) with X [2, 3]: V's one element fills X's shape in dtype
    (value= ignored); extra_shape appends dims; with input_as_shape X's values are the shape."""
    net = core.Net("fill2")
    net.ConstantFill(["X", "V"], ["Y"], dtype=core.DataType.INT64, value=3)
    net.ConstantFill(["X", "V"], ["Z"], dtype=core.DataType.INT64, extra_shape=[4])
    net.ConstantFill(["S", "F"], ["Q"], dtype=core.DataType.FLOAT, input_as_shape=1)
    net.ConstantFill(["X", "B"], ["R"], dtype=core.DataType.BOOL)
    _run(net, backend, X=np.zeros((2, 3), np.int32), V=np.array([5], np.int64), S=np.array([4, 1], np.int64),
         F=np.array(7, f32), B=np.array([True]))
    y, z, q, r = (workspace.FetchBlob(n) for n in "YZQR")
    assert (y.dtype, y.shape, z.shape, q.dtype, q.shape, r.dtype) == (np.int64, (2, 3), (2, 3, 4), f32, (4, 1), np.bool_)
    assert (y == 5).all() and (z == 5).all() and (q == 7).all() and r.all()


def test_constant_fill_value_input_errors():
    """Caffe2 refuses both: a value of another type than dtype, a value of two elements."""
    net = core.Net("fill_bad")
    net.ConstantFill(["X", "V"], ["Y"])  # (dtype: float by default)
    with pytest.raises(DSLError, match="value input is i32, not the f32"):
        _run(net, X=X, V=np.array([5], np.int32))
    net = core.Net("fill_two")
    net.ConstantFill(["X", "V"], ["Y"], dtype=core.DataType.FLOAT)
    with pytest.raises(DSLError, match="must hold one element, got 2"):
        _run(net, X=X, V=np.array([5, 6], f32))


def test_stat_registry_export_counts_atomic_iter():
    """Caffe2 (a created net of AtomicIter([mutex, it], [it]) run 3 times, then
    StatRegistryExport twice, then once more after one run with reset=0, twice): keys
    [b'atomic_iter/stats/it/num_iter'], values [3] then [0] (reset by the export), [1], [1];
    int64 values and timestamps (ns since the epoch)."""
    STATS.export(reset=True)  # (the registry is the process's: start this test's count at 0)
    init = core.Net("init")
    mutex = init.CreateMutex([], ["m"])
    workspace.FeedBlob("it", np.array([0], np.int64))
    workspace.RunNetOnce(init)
    net = core.Net("count")
    net.AtomicIter([mutex, "it"], ["it"])
    workspace.CreateNet(net)
    for _ in range(3):
        workspace.RunNet(net.Name())
    export = core.Net("export")
    export.StatRegistryExport([], ["k", "v", "t"])
    keep = core.Net("keep")
    keep.StatRegistryExport([], ["k", "v", "t"], reset=0)

    def exported(which):
        workspace.RunNetOnce(which)
        keys, values = list(workspace.FetchBlob("k")), workspace.FetchBlob("v")
        assert values.dtype == np.int64 and workspace.FetchBlob("t").dtype == np.int64
        return values[keys.index(b"atomic_iter/stats/it/num_iter")]
    assert [exported(export), exported(export)] == [3, 0]
    workspace.RunNet(net.Name())
    assert [exported(keep), exported(keep)] == [1, 1]
    assert workspace.FetchBlob("it")[0] == 4
