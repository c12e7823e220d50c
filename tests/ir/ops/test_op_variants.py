"""Caffe2 operator variants: the cross-entropy flags and its weighted form, Adam's step
output, Caffe2's gradient ops of the binary elementwise ops, Gather along an axis,
BatchGather, RowwiseMax / ColwiseMax, SumElementsInt, LengthsMax's gradient, and the
learning-rate policies.

Figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2): the same
inputs through workspace.RunOperatorOnce, printed with .tolist(). Gradients are checked
against finite differences by the op-test harness on both devices.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from dslc import core
from dslc import hypothesis_test_util as hu
from dslc.ir.diagnostics import DSLError

DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
X = np.array([[-1.0, 0.5, 2.0], [0.0, -3.0, 1.0]], np.float32)
T = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]], np.float32)
W = np.array([[0.5, 2.0, 1.0], [1.5, 1.0, 0.25]], np.float32)
DY = np.array([1.0, -2.0], np.float32)


def _run(do, op_type, inputs, outputs=("y",), **args):
    op = core.CreateOperator(op_type, list(inputs), list(outputs), **args)
    return hu.runOpOnInput(do, op, list(inputs.values()))


@DEVICES
def test_sigmoid_cross_entropy_variants_match_caffe2(do):
    cases = [  # (op, inputs, args, Caffe2's output)
        ("SigmoidCrossEntropyWithLogits", {"x": X, "t": T}, {"log_D_trick": True},
         [-0.23741888999938965, -0.7851467132568359]),
        ("SigmoidCrossEntropyWithLogits", {"x": X, "t": T}, {"unjoined_lr_loss": True},
         [-0.7289127707481384, 0.06840606778860092]),
        ("WeightedSigmoidCrossEntropyWithLogits", {"x": X, "t": T, "w": W}, {},
         [0.4105709493160248, 0.43054115772247314]),
        ("SigmoidCrossEntropyWithLogitsGradient", {"dy": DY, "x": X, "t": T}, {"log_D_trick": True},
         [[0.24368619918823242, -0.12584689259529114, -0.039734307676553726],
          [0.3333333432674408, -0.6350494623184204, 0.0]]),
        ("SigmoidCrossEntropyWithLogitsGradient", {"dy": DY, "x": X, "t": T}, {"unjoined_lr_loss": True},
         [[0.08964714407920837, -0.3333333432674408, -0.3333333432674408],
          [0.6666666865348816, -0.03161725029349327, 0.08964714407920837]]),
        ("WeightedSigmoidCrossEntropyWithLogitsGradient", {"dy": DY, "x": X, "t": T, "w": W}, {},
         [[0.04482357203960419, -0.2516937851905823, -0.039734307676553726],
          [0.5, -0.03161725029349327, -0.03850976377725601]]),
    ]
    for op_type, inputs, args, want in cases:
        (y,) = _run(do, op_type, inputs, **args)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7, err_msg=f"{op_type} {args}")


def test_cross_entropy_refuses_both_flags():
    with pytest.raises(DSLError) as err:
        _run(hu.cpu_do, "SigmoidCrossEntropyWithLogits", {"x": X, "t": T}, log_D_trick=1, unjoined_lr_loss=1)
    assert "log_D_trick" in str(err.value)


@DEVICES
def test_adam_and_sparse_adam_give_their_step_as_a_fourth_output(do):
    p, m1 = np.array([1.0, 2.0, -1.0], np.float32), np.array([0.1, 0.2, 0.3], np.float32)
    m2, g = np.array([0.01, 0.02, 0.5], np.float32), np.array([0.5, -0.5, 1.0], np.float32)
    lr, it = np.array([0.1], np.float32), np.array([3], np.int64)
    got = _run(do, "Adam", {"p": p, "m1": m1, "m2": m2, "g": g, "lr": lr, "it": it}, ("po", "m1o", "m2o", "go"),
               beta1=0.8, beta2=0.95, epsilon=1e-4)
    want = [[1.088468074798584, 2.0246472358703613, -0.9557073712348938],  # Caffe2
            [0.18000000715255737, 0.060000017285346985, 0.4399999976158142],
            [0.02200000360608101, 0.03150000423192978, 0.5249999761581421],
            [0.884681224822998, 0.2464732527732849, 0.442926287651062]]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    P = np.arange(8, dtype=np.float32).reshape(4, 2) / 4
    M1, M2 = np.full((4, 2), 0.1, np.float32), np.full((4, 2), 0.2, np.float32)
    G = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    got = _run(do, "SparseAdam", {"P": P, "M1": M1, "M2": M2, "idx": np.array([2, 0], np.int64), "G": G,
                                  "lr": lr, "it": it}, ("P", "M1", "M2", "go"), beta1=0.8, beta2=0.95, epsilon=1e-4)
    np.testing.assert_allclose(got[0][2], [1.0291730165481567, 1.2321349382400513], rtol=1e-5)  # Caffe2
    np.testing.assert_allclose(got[3], [[0.2917305529117584, -0.17865093052387238],
                                        [0.5606059432029724, 0.2157464623451233]], rtol=1e-5)  # Caffe2


@DEVICES
def test_binary_gradient_ops_match_caffe2(do):
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], np.float32)
    b = np.array([[0.5, 2.0, -1.0], [2.0, -0.5, 3.0]], np.float32)
    dc = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)
    want = {  # Caffe2
        "AddGradient": (dc, dc),
        "SubGradient": (dc, -dc),
        "MulGradient": ([[0.5, 4.0, -3.0], [-2.0, -0.25, 6.0]], [[1.0, -4.0, 9.0], [-4.0, 2.5, -12.0]]),
    }
    for op_type, (da, db) in want.items():
        got = _run(do, op_type, {"dC": dc, "A": a, "B": b}, ("dA", "dB"))
        np.testing.assert_allclose(got[0], da, rtol=1e-6, err_msg=op_type)
        np.testing.assert_allclose(got[1], db, rtol=1e-6, err_msg=op_type)
    # Caffe2's older DivGradient (B, C, dC): dA = dC / B, dB = -dC C / B
    got = _run(do, "DivGradient", {"B": dc, "C": b, "dC": a / b}, ("dA", "dB"))
    np.testing.assert_allclose(got[0], [[2.0, -0.5, -1.0], [-2.0, -20.0, -1.0]], rtol=1e-6)  # Caffe2
    # the 4-input form, with B broadcast along the rows: its gradient sums the rows
    row = np.array([0.5, 2.0, -1.0], np.float32)
    got = _run(do, "DivGradient", {"dC": dc, "A": a, "B": row, "C": a / row}, ("dA", "dB"))
    np.testing.assert_allclose(got[0], dc / row, rtol=1e-6)
    np.testing.assert_allclose(got[1], (-dc * (a / row) / row).sum(axis=0), rtol=1e-6)


@DEVICES
def test_gather_along_an_axis_and_batch_gather_match_caffe2(do):
    d = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    (y,) = _run(do, "BatchGather", {"d": d, "i": np.array([2, 0, 2], np.int32)})
    assert y.tolist() == [[[4.0, 5.0], [0.0, 1.0], [4.0, 5.0]], [[10.0, 11.0], [6.0, 7.0], [10.0, 11.0]]]  # Caffe2
    (y,) = _run(do, "Gather", {"d": d, "i": np.array([[2, 0]], np.int32)}, axis=1)
    assert y.tolist() == [[[[4.0, 5.0], [0.0, 1.0]]], [[[10.0, 11.0], [6.0, 7.0]]]]  # Caffe2
    (y,) = _run(do, "Gather", {"d": d, "i": np.array([[1], [2]], np.int32)}, axis=1, match_outer=1)
    np.testing.assert_array_equal(y, np.stack([d[0, [1]], d[1, [2]]]))  # y[i] = d[i, idx[i]]


@DEVICES
def test_rowwise_colwise_max_and_sum_elements_int_match_caffe2(do):
    m = np.array([[[1.0, 5.0, 2.0], [4.0, -1.0, 0.0]]], np.float32)
    assert _run(do, "RowwiseMax", {"m": m})[0].tolist() == [[5.0, 4.0]]  # Caffe2
    assert _run(do, "ColwiseMax", {"m": m})[0].tolist() == [[4.0, 5.0, 2.0]]  # Caffe2
    (s,) = _run(do, "SumElementsInt", {"i": np.array([1, 2, 3], np.int32)})
    assert s.dtype == np.int32 and int(s) == 6  # Caffe2


class TestVariantGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        x = np.array([[-1.0, 0.5, 2.0], [0.3, -1.5, 1.0]], np.float32)
        for args in ({"log_D_trick": 1}, {"unjoined_lr_loss": 1}):
            op = core.CreateOperator("SigmoidCrossEntropyWithLogits", ["x", "t"], ["y"], **args)
            self.assertGradientChecks(gc, op, [x, T], 0, [0])
        op = core.CreateOperator("WeightedSigmoidCrossEntropyWithLogits", ["x", "t", "w"], ["y"])
        self.assertGradientChecks(gc, op, [x, T, W], 0, [0])
        d = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
        for op_type, args, idx in (("Gather", {"axis": 2}, np.array([3, 0, 3], np.int32)),
                                   ("BatchGather", {}, np.array([2, 2], np.int32)),
                                   ("Gather", {"axis": 1, "match_outer": 1}, np.array([[0, 2], [1, 1]], np.int32))):
            op = core.CreateOperator(op_type, ["d", "i"], ["y"], **args)
            self.assertDeviceChecks(dc, op, [d, idx], [0])
            self.assertGradientChecks(gc, op, [d, idx], 0, [0])
        m = np.array([[[1.0, 5.0, 2.0], [4.0, -1.0, 0.5]], [[0.1, 0.2, 0.3], [3.0, 2.0, 1.0]]], np.float32)
        for op_type in ("RowwiseMax", "ColwiseMax"):
            self.assertGradientChecks(gc, core.CreateOperator(op_type, ["m"], ["y"]), [m], 0, [0])
        data = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25], [2.5, 4.0]], np.float32)
        op = core.CreateOperator("LengthsMax", ["data", "lengths"], ["y"])
        self.assertGradientChecks(gc, op, [data, np.array([1, 3], np.int32)], 0, [0])


def _lr(policy, it, **args):
    (lr,) = _run(hu.cpu_do, "LearningRate", {"it": np.array([it], np.int64)}, base_lr=-0.1, policy=policy, **args)
    return float(lr)


def test_learning_rate_policies_match_caffe2():
    iters = (0, 1, 5, 9, 10, 12, 20, 30)
    cases = [  # Caffe2's learning rates at those iterations (base_lr -0.1)
        ("poly", dict(max_iter=20, power=2.0), [-0.1, -0.09025, -0.05625, -0.03025, -0.025, -0.016, -0.0, -0.025]),
        ("linearWarmup", dict(start_multiplier=0.2, num_iter=10), [-0.02, -0.028, -0.06, -0.092] + [-0.1] * 4),
        ("constantWarmup", dict(multiplier=0.3, num_iter=10), [-0.03] * 4 + [-0.1] * 4),
        ("alter", dict(active_first=True, active_period=3, inactive_period=2), [-0.1, -0.1, -0.1, 0.0] + [-0.1] * 4),
        ("alter", dict(active_first=False, active_period=3, inactive_period=2),
         [0.0, 0.0, 0.0, -0.1, 0.0, -0.1, 0.0, 0.0]),
        ("hill", dict(num_iter=10, start_multiplier=0.1, gamma=0.5, power=0.75, end_multiplier=0.2),
         [-0.01, -0.019, -0.055, -0.091, -0.1, -0.0594603531062603, -0.026084741577506065, -0.02]),
        ("slope", dict(num_iter_1=5, multiplier_1=1.0, num_iter_2=15, multiplier_2=0.2),
         [-0.1, -0.1, -0.1, -0.068, -0.06, -0.044, -0.02, -0.02]),
        ("gate", dict(num_iter=7, multiplier_1=0.5, multiplier_2=2.0), [-0.05] * 3 + [-0.2] * 5),
    ]
    for policy, args, want in cases:
        got = [_lr(policy, it, **args) for it in iters]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=f"{policy} {args}")


def test_a_policy_missing_its_period_is_a_located_error():
    with pytest.raises(DSLError) as err:
        _lr("poly", 3)
    assert "max_iter" in str(err.value) and "test_op_variants.py" in str(err.value)


@DEVICES
def test_row_wise_sparse_adam_matches_caffe2(do):
    P = np.arange(8, dtype=np.float32).reshape(4, 2) / 4
    inputs = {"P": P, "M1": np.full((4, 2), 0.1, np.float32), "M2": np.array([0.2, 0.1, 0.3, 0.4], np.float32),
              "idx": np.array([2, 0], np.int64), "G": np.array([[0.5, -1.0], [2.0, 0.25]], np.float32),
              "lr": np.array([0.1], np.float32), "it": np.array([3], np.int64)}
    p, m1, m2, go = _run(do, "RowWiseSparseAdam", inputs, ("P", "M1", "M2", "go"), beta1=0.8, beta2=0.95,
                         epsilon=1e-4)
    np.testing.assert_allclose(p, [[0.0648355633020401, 0.26755961775779724], [0.5, 0.75],  # Caffe2
                                   [1.0233452320098877, 1.2344365119934082], [1.5, 1.75]], rtol=1e-5)
    np.testing.assert_allclose(m2, [0.2915625274181366, 0.1, 0.3162499964237213, 0.4], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(go, [[0.2334524393081665, -0.15563492476940155],
                                    [0.6483556032180786, 0.17559631168842316]], rtol=1e-5)  # Caffe2


def test_row_wise_adam_keeps_one_second_moment_per_embedding_row():
    from dslc import brew, optimizer, workspace
    from dslc.model_helper import ModelHelper
    model = ModelHelper(name="emb")
    table = model.param_init_net.GaussianFill([], "table", shape=[6, 3], std=0.1)
    model.params.append(core.BlobReference("table"))
    rows = model.net.Gather([table, "ids"], "rows")
    loss = model.net.SumElements(model.net.Sqr(rows), "loss")
    model.AddGradientOperators([loss])
    optimizer.build_adam(model, base_learning_rate=0.1, rowWise=True)
    assert [op.type for op in model.net.Proto().op][-1] == "RowWiseSparseAdam"
    workspace.FeedBlob("ids", np.array([1, 4, 1], np.int64))
    workspace.RunNetOnce(model.param_init_net)
    before = workspace.FetchBlob("table")
    workspace.RunNetOnce(model.net)
    after = workspace.FetchBlob("table")
    assert workspace.FetchBlob("table_avg_second_moment").shape == (6,)
    np.testing.assert_array_equal(after[[0, 2, 3, 5]], before[[0, 2, 3, 5]])  # rows not read stay
    assert not np.allclose(after[[1, 4]], before[[1, 4]])
    del brew


@DEVICES
def test_summarize_and_unique_match_caffe2(do):
    (y,) = _run(do, "Summarize", {"x": np.array([3.0, -1.0, 2.0, 8.0], np.float32)})
    np.testing.assert_allclose(y, [-1.0, 8.0, 3.0, 3.7416574954986572], rtol=1e-6)  # Caffe2
    u, r = _run(do, "Unique", {"i": np.array([5, 3, 5, 1, 3, 9], np.int64)}, ("u", "r"))
    assert u.tolist() == [1, 3, 5, 9] and r.tolist() == [2, 1, 2, 0, 1, 3] and r.dtype == np.int32  # Caffe2
    (u2,) = _run(do, "Unique", {"i2": np.array([2, 2, 7], np.int32)})
    assert u2.tolist() == [2, 7] and u2.dtype == np.int32  # Caffe2
    with pytest.raises(DSLError) as err:
        _run(do, "Summarize", {"e": np.zeros(0, np.float32)})
    assert "empty" in str(err.value)


@DEVICES
def test_pow_of_a_tensor_exponent_matches_caffe2(do):
    (y,) = _run(do, "Pow", {"a": np.array([1.5, 2.0, 0.5], np.float32), "e": np.array([2.0, 0.5, 3.0], np.float32)})
    np.testing.assert_allclose(y, [2.25, 1.4142135381698608, 0.125], rtol=1e-6)  # Caffe2
    (y,) = _run(do, "Pow", {"a": np.array([[1.5, 2.0], [0.5, 3.0]], np.float32), "e": np.array([2.0], np.float32)},
                broadcast=1)
    np.testing.assert_allclose(y, [[2.25, 4.0], [0.25, 9.0]], rtol=1e-6)  # Caffe2


class TestPowGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_both_inputs(self, gc, dc):
        x = np.array([[0.5, 1.5, 2.0], [1.2, 0.8, 3.0]], np.float32)
        for e in (np.array([[2.0, 0.5, 1.5], [3.0, 1.0, 0.25]], np.float32), np.array([1.5, 2.0, 0.5], np.float32)):
            op = core.CreateOperator("Pow", ["x", "e"], ["y"])
            self.assertDeviceChecks(dc, op, [x, e], [0])
            for k in (0, 1):
                self.assertGradientChecks(gc, op, [x, e], k, [0], stepsize=0.005, threshold=0.01)


P3 = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]], np.float32)
G3 = np.array([[0.5, -1.0], [2.0, 0.25], [1.0, 1.0]], np.float32)
ROWS = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
IDX = np.array([2, 0], np.int64)
LR = np.array([-0.1], np.float32)


@DEVICES
def test_wngrad_storm_and_decay_adagrad_match_caffe2(do):
    b = np.array([0.5], np.float32)
    p, bo, e, u = _run(do, "Wngrad", {"p": P3, "b": b, "g": G3, "lr": LR}, ("po", "bo", "e", "u"), epsilon=0.01)
    np.testing.assert_allclose(p[0], [0.9019607901573181, -1.8039215803146362], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose([bo[0], e[0]], [14.838235855102539, -0.19607843458652496], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(u[1], [-0.3921568691730499, -0.04901960864663124], rtol=1e-6)  # Caffe2
    p, bo = _run(do, "SparseWngrad", {"p": P3, "b": b, "i": IDX, "g": ROWS, "lr": LR}, ("p", "b"), epsilon=0.01)
    np.testing.assert_allclose(p, [[0.6078431606292725, -2.0490195751190186], [0.5, 3.0],  # Caffe2
                                   [1.9019607305526733, 1.1960784196853638]], rtol=1e-6)
    np.testing.assert_allclose(bo, [11.125], rtol=1e-6)  # Caffe2: the sparse form divides by b alone
    m, s = np.full((3, 2), 0.2, np.float32), np.array([0.5], np.float32)
    p, mo, so = _run(do, "Storm", {"p": P3, "m": m, "s": s, "g": G3, "lr": LR}, ("po", "mo", "so"), momentum=2.0,
                     beta=0.3)
    np.testing.assert_allclose(p[1], [0.4896026849746704, 2.9900341033935547], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(mo[0], [0.20148609578609467, 0.19405564665794373], rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(so, [7.8125], rtol=1e-6)  # Caffe2
    p, mo, so = _run(do, "SparseStorm", {"p": P3, "m": m, "s": s, "g": ROWS, "i": IDX, "lr": LR}, ("p", "m", "s"),
                     momentum=2.0, beta=0.3)
    np.testing.assert_allclose(p, [[0.988472580909729, -2.0109548568725586], [0.5, 3.0],  # Caffe2
                                   [1.9889633655548096, 0.9894541501998901]], rtol=1e-6)
    np.testing.assert_allclose(so, [5.8125], rtol=1e-6)  # Caffe2
    m1, m2 = np.full((3, 2), 0.1, np.float32), np.full((3, 2), 0.3, np.float32)
    p, m1o, m2o = _run(do, "DecayAdagrad", {"p": P3, "m1": m1, "m2": m2, "g": G3, "lr": LR,
                                            "it": np.array([4], np.int64)}, ("po", "m1o", "m2o"),
                       beta1=0.8, beta2=0.9, epsilon=0.1, weight_decay=0.05, bias_correction_first=True)
    np.testing.assert_allclose(p, [[0.9631887674331665, -1.975607991218567], [0.46465441584587097,  # Caffe2
                                   2.957458972930908], [1.9564186334609985, 0.9614185690879822]], rtol=1e-6)
    np.testing.assert_allclose(m2o[1], [4.300000190734863, 0.36250001192092896], rtol=1e-6)  # Caffe2


@pytest.mark.parametrize("build, rate", [("build_wngrad", 20.0), ("build_storm", 1.0), ("build_decay_adagrad", 0.1)])
def test_the_adaptive_optimizers_train(build, rate):
    """A least-squares fit: each builder's updates bring the loss down."""
    from dslc import brew, optimizer, workspace
    from dslc.model_helper import ModelHelper
    rng = np.random.RandomState(0)
    x = rng.randn(32, 3).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    model = ModelHelper(name=build)
    pred = brew.fc(model, "x", "pred", dim_in=3, dim_out=1)
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([pred, "y"], "d"), "loss")
    model.AddGradientOperators([loss])
    getattr(optimizer, build)(model, rate)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("y", y)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    losses = []
    for _ in range(30):
        workspace.RunNet(model.net)
        losses.append(float(workspace.FetchBlob("loss")))
    assert losses[-1] < 0.5 * losses[0]


@DEVICES
def test_batch_matmul_of_vectors_is_numpys_matmul(do):
    a, m, b = np.array([1.0, 2.0, 3.0], np.float32), np.arange(6, dtype=np.float32).reshape(3, 2), \
        np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    for x, y in ((a, m), (b, a), (a, a)):
        (got,) = _run(do, "BatchMatMul", {"x": x, "y": y}, broadcast=1)
        np.testing.assert_allclose(got, np.matmul(x, y), rtol=1e-6)


class TestVectorBatchMatMulGradients(hu.HypothesisTestCase):
    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_gradients(self, gc, dc):
        a, m = np.array([0.5, -1.0, 2.0], np.float32), np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
        op = core.CreateOperator("BatchMatMul", ["a", "m"], ["y"], broadcast=1)
        for k in (0, 1):
            self.assertGradientChecks(gc, op, [a, m], k, [0])


@DEVICES
def test_bucket_and_segment_one_hots_match_caffe2(do):
    x = np.array([[-1.0, 0.0], [0.5, 2.0], [3.0, 0.0]], np.float32)
    (y,) = _run(do, "BatchBucketOneHot", {"x": x, "lens": np.array([2, 3], np.int32),
                                          "b": np.array([0.0, 1.0, 0.0, 0.0, 2.0], np.float32)})
    assert y.tolist() == [[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0],  # Caffe2
                          [0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]]
    (z,) = _run(do, "SegmentOneHot", {"l": np.array([2, 1], np.int32), "i": np.array([3, 0, 2], np.int64),
                                      "n": np.array(4, np.int64)})
    assert z.dtype == np.float32 and z.tolist() == [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]]  # Caffe2


@DEVICES
def test_nan_check_lengths_gather_and_range(do):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    (y,) = _run(do, "NanCheck", {"x": x, "other": np.array([1.0], np.float32)})
    np.testing.assert_array_equal(y, x)
    with pytest.raises(DSLError) as err:
        _run(do, "NanCheck", {"x": np.array([1.0, np.nan], np.float32)})
    assert "NaN" in str(err.value)
    items = np.arange(10, dtype=np.float32).reshape(5, 2)
    (g,) = _run(do, "LengthsGather", {"items": items, "lengths": np.array([2, 1, 2], np.int32),
                                      "idx": np.array([2, 0, 2], np.int64)})
    np.testing.assert_array_equal(g, items[[3, 4, 0, 1, 3, 4]])  # segments 2, 0, 2: rows 3-4, 0-1, 3-4
    with pytest.raises(DSLError) as err:
        _run(do, "Range", {"a": np.array(0), "b": np.array(10), "c": np.array(0)})
    assert "Step size cannot be 0" in str(err.value)


def test_lengths_to_ranges_infers_one_range_per_length():
    from dslc import workspace
    workspace.FeedBlob("lengths", np.array([2, 0, 3], np.int32))
    net = core.Net("ranges")
    net.LengthsToRanges(["lengths"], ["ranges"])
    shapes, types = workspace.InferShapesAndTypes([net])
    assert shapes["ranges"] == [3, 2] and types["ranges"] == core.DataType.INT32


@DEVICES
def test_spatial_softmax_with_loss_matches_caffe2(do):
    x = (np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2) % 5) / 3.0
    lab = np.array([[[0, 2], [-1, 1]], [[2, 2], [0, -1]]], np.int32)  # (-1: a pixel without a label)
    w = np.array([[[1.0, 0.5], [2.0, 1.5]], [[0.25, 1.0], [1.0, 3.0]]], np.float32)
    p, loss = _run(do, "SpatialSoftmaxWithLoss", {"x": x, "lab": lab, "w": w}, ("p", "loss"))
    np.testing.assert_allclose(float(loss), 1.2575219869613647, rtol=1e-6)  # Caffe2
    np.testing.assert_allclose(p[0, :, 0, 0], [0.13312123715877533, 0.5050177574157715, 0.3618610203266144],
                               rtol=1e-6)  # Caffe2
    op = core.CreateOperator("SpatialSoftmaxWithLoss", ["x", "lab", "w"], ["p", "loss"])
    grads, _ = core.GradientRegistry.GetGradientForOp(op, ["p_grad", "loss_grad"])
    dx = hu.runOpOnInput(do, grads[0], [x, lab, w, p, np.array(1.0, np.float32)])[0]
    np.testing.assert_allclose(dx[0, :, 0, 1], [0.021475110203027725, 0.015387588180601597, -0.03686269745230675],
                               rtol=1e-5)  # Caffe2
    np.testing.assert_array_equal(dx[0, :, 1, 0], [0.0, 0.0, 0.0])  # (the unlabelled pixel)


@DEVICES
def test_softmax_with_loss_along_a_later_axis_takes_a_label_per_position(do):
    x = np.linspace(-1, 1, 2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    lab = np.array([[0, 3, 1], [2, 2, 0]], np.int32)
    p, loss = _run(do, "SoftmaxWithLoss", {"x": x, "lab": lab}, ("p", "loss"), axis=2)
    e = np.exp(x - x.max(axis=2, keepdims=True))
    want = e / e.sum(axis=2, keepdims=True)
    np.testing.assert_allclose(p, want, rtol=1e-6)
    picked = np.take_along_axis(want, lab[..., None].astype(np.int64), axis=2)
    np.testing.assert_allclose(float(loss), float(-np.log(picked).mean()), rtol=1e-6)


@DEVICES
def test_uniform_fills_with_their_bounds_as_inputs(do):
    shape, lo, hi = np.array([4, 3], np.int64), np.array(2, np.int32), np.array(5, np.int32)
    (y,) = _run(do, "UniformIntFill", {"shape": shape, "lo": lo, "hi": hi}, input_as_shape=1)
    assert y.shape == (4, 3) and y.dtype == np.int32 and y.min() >= 2 and y.max() <= 5
    (z,) = _run(do, "UniformIntFill", {"shape": shape, "lo": hi, "hi": lo}, input_as_shape=1)
    assert z.shape == (0, 3)  # (max below min: Caffe2 draws nothing)
    (u,) = _run(do, "UniformFill", {"like": np.zeros((2, 2), np.float32), "lo": np.array(-1.0, np.float32),
                                    "hi": np.array(-0.5, np.float32)})
    assert u.shape == (2, 2) and (u >= -1.0).all() and (u < -0.5).all()


class TestFCTransposed(hu.HypothesisTestCase):
    """FCTransposed keeps its weight [K, N]: Y = X W + b (numpy), gradients by finite differences."""

    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_values_and_gradients(self, gc, dc):
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
        w = np.linspace(0.5, -0.5, 6, dtype=np.float32).reshape(3, 2)
        b = np.array([0.1, -0.2], np.float32)
        op = core.CreateOperator("FCTransposed", ["X", "W", "b"], ["Y"])
        self.assertReferenceChecks(gc, op, [x, w, b], lambda x, w, b: (x @ w + b,))
        for i in range(3):
            self.assertGradientChecks(gc, op, [x, w, b], i, [0])


class TestSplitByLengths(hu.HypothesisTestCase):
    """LENGTHS [1, 2, 0, 3] in 2 groups: parts of 3 and 3 rows (numpy by hand); with
    use_scaling_lengths, lengths [1, 2] over 6 rows scale by 2; the gradient joins the parts."""

    @settings(max_examples=2, deadline=None, derandomize=True)
    @given(**hu.gcs)
    def test_values_and_gradient(self, gc, dc):
        x = np.arange(12, dtype=np.float32).reshape(6, 2)
        op = core.CreateOperator("SplitByLengths", ["X", "L"], ["A", "B"])
        lengths = np.array([1, 2, 0, 3], np.int32)
        self.assertReferenceChecks(gc, op, [x, lengths], lambda x, lengths: (x[:3], x[3:]))
        self.assertGradientChecks(gc, op, [x, lengths], 0, [0, 1])
        scaled = core.CreateOperator("SplitByLengths", ["X", "L"], ["A", "B"], use_scaling_lengths=1)
        self.assertReferenceChecks(gc, scaled, [x, np.array([1, 2], np.int32)], lambda x, lengths: (x[:2], x[2:]))
        bad = np.array([1, 1], np.int32)
        self.assertRunOpRaises(gc, op, [x, bad], exception=Exception, regexp="add up to 2")


@DEVICES
def test_cast_to_string_writes_numbers_as_caffe2(do):
    """Caffe2 (std::to_string): [b'1', b'-20', b'300'], [b'1.500000', b'-0.250000',
    b'10000000000.000000'], [b'1', b'0']."""
    for x, want in ((np.array([1, -20, 300], np.int32), [b"1", b"-20", b"300"]),
                    (np.array([1.5, -0.25, 1e10], np.float32), [b"1.500000", b"-0.250000", b"10000000000.000000"]),
                    (np.array([True, False]), [b"1", b"0"])):
        (got,) = _run(do, "Cast", {"x": x}, to=core.DataType.STRING)
        assert got.tolist() == want
    with pytest.raises(DSLError, match="not parsed"):
        _run(do, "Cast", {"s": np.array(["12"], dtype=object)}, to=core.DataType.INT32)


@DEVICES
def test_float16_uniform_fill_draws_float16_in_its_range(do):
    op = core.CreateOperator("Float16UniformFill", [], ["y"], shape=[200, 50], min=-2.0, max=3.0)
    (y,) = hu.runOpOnInput(do, op, [])
    assert y.dtype == np.float16 and y.shape == (200, 50)
    assert y.min() >= -2.0 and y.max() <= 3.0 and abs(float(y.astype(np.float64).mean()) - 0.5) < 0.1
