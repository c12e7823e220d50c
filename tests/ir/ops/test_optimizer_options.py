"""Optimizer options against Caffe2: ``sparse_dedup_aggregator`` (repeated ids in a batch),
Adam's ``enableRAdam`` and smart decay, and which parameters ``weight_decay`` decays.

Figures marked "Caffe2" were read off the real Caffe2 (torch 1.10.2's caffe2): the same
program run there through shared/tools/caffe2-ref/run.sh (its imports turned back to
caffe2.python), the blobs printed with .tolist() (rounded to 7 places for the builders).
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]


def _train(backend, build, kwargs, steps=2, bias=True):
    """A [4, 2] table read by ids [1, 1, 2, 1] (row 1 three times), plus a [2] bias (a
    parameter when ``bias``), squared distance to 0.5 averaged; ``steps`` updates by
    ``optimizer.<build>(**kwargs)``. Returns the table and the bias."""
    workspace.ResetWorkspace()
    model = ModelHelper(name="m")
    init = model.param_init_net
    init.GivenTensorFill([], "tbl", shape=[4, 2], values=((np.arange(8) % 5) / 5.0 - 0.4).tolist())
    init.GivenTensorFill([], "b", shape=[2], values=[0.1, 0.2])
    model.AddParameter(core.BlobReference("tbl"))
    if bias:
        model.AddParameter(core.BlobReference("b"))
    workspace.FeedBlob("ids", np.array([1, 1, 2, 1], np.int32))
    workspace.FeedBlob("target", np.full((4, 2), 0.5, np.float32))
    y = model.net.Add([model.net.Gather(["tbl", "ids"], "emb"), "b"], "y", broadcast=1)
    model.net.AveragedLoss(model.net.SquaredL2Distance([y, "target"], "d"), "loss")
    model.AddGradientOperators(["loss"])
    getattr(optimizer, build)(model, **kwargs)
    with LocalSession(backend=backend) as session:
        session.run(model.param_init_net)
        for _ in range(steps):
            session.run(model.net)
    return workspace.FetchBlob("tbl"), workspace.FetchBlob("b")


# (build, its arguments, the aggregator, table row 1 and row 2, bias) after two steps: Caffe2
DEDUP = [
    ("build_sgd", {"base_learning_rate": 0.5}, "mean", [0.075, 0.2078125], [0.38125, -0.2515625],
     [0.30625, 0.371875]),
    ("build_sgd", {"base_learning_rate": 0.5, "momentum": 0.9}, "sum", [0.285375, 0.1528906], [0.3323125, -0.0925156],
     [0.3176875, 0.460375]),
    ("build_sgd", {"base_learning_rate": 0.5, "momentum": 0.9}, "mean", [0.14025, 0.1955781], [0.3323125, -0.0925156],
     [0.4530625, 0.4942188]),
    ("build_adagrad", {"base_learning_rate": 0.5}, "sum", [0.0839563, 0.2024714], [-0.0996002, -0.0968726],
     [0.1566575, 0.2255673]),
    ("build_adagrad", {"base_learning_rate": 0.5}, "mean", [0.0838484, 0.2013009], [-0.0996002, -0.0968726],
     [0.1566988, 0.2256306]),
    ("build_adagrad", {"base_learning_rate": 0.5, "rowWise": True}, "sum", [0.2871339, 0.2717835], [0.4, 0.2999392],
     None),
    ("build_adam", {"base_learning_rate": 0.5}, "sum", [0.3816736, 0.3005379], [0.0805943, 0.2389977],
     [0.4159531, 0.4168209]),
    ("build_adam", {"base_learning_rate": 0.5}, "mean", [0.3816733, 0.3005354], [0.0805943, 0.2389977],
     [0.4159534, 0.4168217]),
    ("build_adam", {"base_learning_rate": 0.5, "rowWise": True}, "mean", [0.7741006, 0.3935252], [0.4, 0.6298338],
     None),
    ("build_adam", {"base_learning_rate": 0.5, "use_smart_decay": True}, "sum", [0.5399436, 0.2994404],
     [0.4, 0.8282113], None),
    ("build_adam", {"base_learning_rate": 0.5, "enableRAdam": True}, "mean", [0.0601573, 0.2150393],
     [0.4, -0.2947247], None),
    ("build_wngrad", {"base_learning_rate": 0.5}, "mean", [0.0009975, 0.2002483], [0.3999981, -0.3982527],
     [0.1029906, 0.2024922]),
    ("build_storm", {"base_learning_rate": 0.5}, "sum", [1.2617213, 0.3754852], [0.3200314, 0.5129716],
     [1.3249909, 1.2950172]),
    ("build_storm", {"base_learning_rate": 0.5}, "mean", [-0.7219734, -0.2929457], [-0.1356324, -1.172457],
     [1.2268283, 1.1390238]),
    ("build_adadelta", {"base_learning_rate": 0.5}, "sum", [0.0431818, 0.2326902], [0.3972563, -0.3571264],
     [0.1429377, 0.2421963]),
    ("build_ftrl", {"alpha": 0.5, "lambda1": 0.0, "lambda2": 0.001}, "mean", [0.0832747, 0.1881171],
     [-0.4881426, -0.0955646], [0.1773887, 0.2252602]),
]


# numba runs every case's model in compiled islands and the sparse updates of SGD and Adagrad
# (plain and row-wise) with kernels of its own; the other updates and the dedup ops are the
# interpreter's kernels there, so those cases run on interp only (the random programs of
# tests/random/test_random_training.py draw them on both)
CASES = [pytest.param(backend, *case, id=f"{case[0][6:]}-{'-'.join(k for k in case[1] if k != 'base_learning_rate')}"
                                           f"-{case[2]}-{backend}")
         for k, case in enumerate(DEDUP) for backend in BACKENDS
         if backend == "interp" or k in (0, 3, 5, 7)]  # (SGD, Adagrad, row-wise Adagrad, Adam)


@pytest.mark.parametrize("backend, build, kwargs, aggregator, row1, row2, bias", CASES)
def test_a_deduplicated_sparse_update_gives_caffe2s_table(backend, build, kwargs, aggregator, row1, row2, bias):
    """With sparse_dedup_aggregator Caffe2 sums (or averages) the three gradients of row 1
    before one update; dslc used to drop the option (into the learning rate's arguments)
    and update row 1 three times. Rows 0 and 3, not read, keep their values."""
    tbl, b = _train(backend, build, dict(kwargs, sparse_dedup_aggregator=aggregator), bias=bias is not None)
    np.testing.assert_allclose(tbl[1:3], [row1, row2], rtol=1e-5, atol=2e-6)  # Caffe2
    np.testing.assert_array_equal(tbl[[0, 3]], np.array([[-0.4, -0.2], [-0.2, 0.0]], np.float32))
    np.testing.assert_allclose(b, bias or [0.1, 0.2], rtol=1e-5, atol=2e-6)  # Caffe2


def test_dedup_records_caffe2s_ops_before_the_update():
    """Read off Caffe2: build_adagrad(..., sparse_dedup_aggregator="mean") on a Gather's
    table records Unique and UnsortedSegmentMean under these names, then SparseAdagrad."""
    model = ModelHelper(name="m")
    model.param_init_net.GivenTensorFill([], "tbl", shape=[4, 2], values=[0.0] * 8)
    model.AddParameter(core.BlobReference("tbl"))
    model.net.AveragedLoss(model.net.SumElements(model.net.Gather(["tbl", "ids"], "emb"), "s"), "loss")
    model.AddGradientOperators(["loss"])
    optimizer.build_adagrad(model, base_learning_rate=0.5, sparse_dedup_aggregator="mean")
    assert [(op.type, list(op.input), list(op.output)) for op in model.net.Proto().op][-3:] == [
        ("Unique", ["ids"], ["m/Unique:0", "m/Unique:1"]),
        ("UnsortedSegmentMean", ["emb_grad", "m/Unique:1"], ["m/UnsortedSegmentMean:0"]),
        ("SparseAdagrad", ["tbl", "tbl_squared_sum", "m/Unique:0", "m/UnsortedSegmentMean:0",
                           "AdagradOptimizer_0_lr_cpu"], ["tbl", "tbl_squared_sum"])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_net_deduplicate_gradient_slices_sums_or_averages_each_row(backend):
    """Caffe2: indices [5, 1, 5, 3, 1, 1], values arange(12) as [6, 2], "mean" -> rows
    [1, 3, 5] with [[6.6667, 7.6667], [6, 7], [2, 3]]."""
    net = core.Net("dedup")
    workspace.FeedBlob("i", np.array([5, 1, 5, 3, 1, 1], np.int32))
    workspace.FeedBlob("v", np.arange(12, dtype=np.float32).reshape(6, 2))
    mean = net.DeduplicateGradientSlices(core.GradientSlice("i", "v"), aggregator="mean")
    total = net.DeduplicateGradientSlices(core.GradientSlice("i", "v"))
    with LocalSession(backend=backend) as session:
        session.run(net)
    assert workspace.FetchBlob(mean.indices).tolist() == [1, 3, 5]
    np.testing.assert_allclose(workspace.FetchBlob(mean.values), [[20 / 3, 23 / 3], [6, 7], [2, 3]], rtol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob(total.values), [[20, 23], [6, 7], [4, 6]])
    with pytest.raises(DSLError, match="'max' is not supported"):
        net.DeduplicateGradientSlices(core.GradientSlice("i", "v"), aggregator="max")


def _adam_row(do_radam, beta2, it, backend):
    """One SparseAdam step of row 1 of [[1, 2], [3, 4]] (m1 [[.1, .2], [.3, .4]], m2 [[.5, .6],
    [.7, .8]]) by gradient [0.5, -0.5], lr 0.1, at iteration ``it``."""
    net = core.Net("radam")
    for k, v in dict(p=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), m1=np.array([[0.1, 0.2], [0.3, 0.4]], np.float32),
                     m2=np.array([[0.5, 0.6], [0.7, 0.8]], np.float32), idx=np.array([1], np.int64),
                     g=np.array([[0.5, -0.5]], np.float32), lr=np.array([0.1], np.float32),
                     it=np.array([it], np.int64)).items():
        workspace.FeedBlob(k, v)
    net.SparseAdam(["p", "m1", "m2", "idx", "g", "lr", "it"], ["p", "m1", "m2"], beta1=0.9, beta2=beta2, epsilon=1e-5,
                   enableRAdam=int(do_radam))
    with LocalSession(backend=backend) as session:
        session.run(net)
    return workspace.FetchBlob("p")[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_adams_radam_gives_caffe2s_rows(backend):
    """RAdam: until rho_t > 5 the step is lr m1' / (1 - beta1^t) (no second moment), then
    Adam's step times the rectifier. With beta2 = 0.9 rho_t passes 5 between t = 5 and 6;
    with beta2 = 0.5 (rho_inf = 3) never. Caffe2 (the op run at each iteration)."""
    caffe2 = {(0.9, 4): [3.0781421661376953, 4.075700283050537], (0.9, 5): [3.014739513397217, 4.013388633728027],
              (0.9, 50): [3.0389389991760254, 4.035370349884033], (0.999, 5): [3.0001630783081055, 4.000147819519043],
              (0.5, 50): [3.032149076461792, 4.031144618988037]}
    for (beta2, it), row in caffe2.items():
        np.testing.assert_allclose(_adam_row(True, beta2, it, backend), row, rtol=1e-6, err_msg=f"{beta2}, {it}")
    # (without RAdam, Adam's step: corrected lr m1' / (sqrt(m2') + eps), by hand)
    m1, m2, t = 0.3 * 0.9 + 0.05, 0.7 * 0.9 + 0.1 * 0.25, 5
    want = 3 + 0.1 * np.sqrt(1 - 0.9 ** t) / (1 - 0.9 ** t) * m1 / (np.sqrt(m2) + 1e-5)
    np.testing.assert_allclose(_adam_row(False, 0.9, t - 1, backend)[0], want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_build_adam_with_radam_gives_caffe2s_table(backend):
    """enableRAdam through build_adam: eight steps, beta2 = 0.9 (rectified from t = 6); the
    table only (a dense parameter would get plain Adam in Caffe2). Caffe2."""
    tbl, _ = _train(backend, "build_adam", {"base_learning_rate": 0.05, "enableRAdam": True, "beta2": 0.9}, steps=8,
                    bias=False)
    np.testing.assert_allclose(tbl[1:3], [[0.3435954, 0.3988214], [0.4, -0.3073796]], rtol=1e-5, atol=2e-6)


def test_radam_refuses_what_caffe2_refuses():
    with pytest.raises(DSLError, match="use_smart_decay cannot be combined with enableRAdam"):
        optimizer.AdamOptimizer(enableRAdam=True, use_smart_decay=True)
    model = ModelHelper(name="m")
    model.param_init_net.GivenTensorFill([], "tbl", shape=[4, 2], values=[0.0] * 8)
    model.AddParameter(core.BlobReference("tbl"))
    model.net.AveragedLoss(model.net.SumElements(model.net.Gather(["tbl", "ids"], "emb"), "s"), "loss")
    model.AddGradientOperators(["loss"])
    with pytest.raises(DSLError, match="RAdam of a row-wise Adam"):
        optimizer.build_adam(model, base_learning_rate=0.1, rowWise=True, enableRAdam=True)


def test_row_wise_adagrad_of_a_dense_parameter_is_refused_as_in_caffe2():
    """Caffe2 asserts "If SparseAdagrad with rowWise=True, gradient must be a gradientslice";
    dslc used to run plain Adagrad there."""
    model = ModelHelper(name="m")
    brew.fc(model, "x", "fc", dim_in=2, dim_out=1)
    model.net.AveragedLoss(model.net.SumElements("fc", "s"), "loss")
    model.AddGradientOperators(["loss"])
    with pytest.raises(DSLError, match="row-wise Adagrad of fc_w needs a sparse gradient"):
        optimizer.build_adagrad(model, base_learning_rate=0.1, rowWise=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_smart_decay_sparse_adam_with_a_row_twice_gives_caffe2s_rows(backend):
    """Row 0 read twice at t = 5 (last seen 0): the second time k = 0, and Caffe2 then steps
    the parameter by lr m1' / (sqrt(m2') + eps) (m1' = m1 + (1 - beta1) g, m2' = m2 + (1 -
    beta2) g^2); dslc used to add only lr (1 - beta1) g / (...). Caffe2 (the op run)."""
    net = core.Net("smart")
    for k, v in dict(p=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), m1=np.array([[0.1, 0.2], [0.3, 0.4]], np.float32),
                     m2=np.array([[0.5, 0.6], [0.7, 0.8]], np.float32), last=np.array([0, 1], np.int64),
                     idx=np.array([0, 1, 0], np.int64), g=np.array([[0.5, -0.5], [0.25, 0.125], [1.0, 2.0]], np.float32),
                     lr=np.array([0.1], np.float32), it=np.array([4], np.int64)).items():
        workspace.FeedBlob(k, v)
    net.SmartDecaySparseAdam(["p", "m1", "m2", "last", "idx", "g", "lr", "it"], ["p", "m1", "m2", "last"],
                             beta1=0.9, beta2=0.999, epsilon=1e-5)
    with LocalSession(backend=backend) as session:
        session.run(net)
    np.testing.assert_allclose(workspace.FetchBlob("p"), [[1.0889261960983276, 2.123483657836914],
                                                          [3.1141903400421143, 4.140091896057129]], rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("m1"), [[0.2090490311384201, 0.26809802651405334],
                                                           [0.22182999551296234, 0.27493995428085327]], rtol=1e-6)
    assert workspace.FetchBlob("last").tolist() == [5, 5]


def _decay_model(backend, build, kwargs, extra=None):
    """A [4, 2] table and a 1-D table [5] read by ids [1, 2, 1], an FC (w [1, 2], b [1]) over
    table rows + x; two steps. Returns every parameter."""
    workspace.ResetWorkspace()
    model = ModelHelper(name="m")
    init = model.param_init_net
    init.GivenTensorFill([], "tbl", shape=[4, 2], values=((np.arange(8) % 5) / 5.0 - 0.4).tolist())
    init.GivenTensorFill([], "t1", shape=[5], values=[0.5, -0.25, 0.75, 1.0, -1.0])
    model.AddParameter(core.BlobReference("tbl"))
    model.AddParameter(core.BlobReference("t1"))
    workspace.FeedBlob("ids", np.array([1, 2, 1], np.int32))
    workspace.FeedBlob("x", np.array([[0.5, -1.0], [1.5, 0.25], [-0.5, 0.75]], np.float32))
    workspace.FeedBlob("target", np.array([[0.5], [0.25], [-0.5]], np.float32))
    h = model.net.Add([model.net.Gather(["tbl", "ids"], "emb"), "x"], "h")
    y = brew.fc(model, h, "fc", dim_in=2, dim_out=1)
    y = model.net.Add([y, model.net.ExpandDims(model.net.Gather(["t1", "ids"], "w1"), "w1e", dims=[1])], "y2")
    model.net.AveragedLoss(model.net.SquaredL2Distance([y, "target"], "d"), "loss")
    model.AddGradientOperators(["loss"])
    if extra is not None:
        extra(model)
    getattr(optimizer, build)(model, **kwargs)
    with LocalSession(backend=backend) as session:
        session.run(model.param_init_net)
        workspace.FeedBlob("fc_w", np.array([[0.3, -0.6]], np.float32))
        workspace.FeedBlob("fc_b", np.array([0.1], np.float32))
        for _ in range(2):
            session.run(model.net)
    return {k: workspace.FetchBlob(k) for k in ("tbl", "t1", "fc_w", "fc_b")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_adagrads_weight_decay_skips_rank_1_parameters_as_caffe2(backend):
    """Caffe2's Adagrad decays only parameters of rank other than 1: here the [4, 2] table
    (sparse) and fc_w, not the bias fc_b nor the 1-D table t1 (sparse). dslc used to decay
    them all. Caffe2 (weight_decay=0.3, two steps)."""
    got = _decay_model(backend, "build_adagrad", {"base_learning_rate": 0.5, "weight_decay": 0.3})
    np.testing.assert_allclose(got["tbl"][1:3], [[0.240202, 0.081995], [-0.135657, 0.028295]], atol=2e-6)
    np.testing.assert_allclose(got["t1"], [0.5, 0.456212, 0.49676, 1.0, -1.0], atol=2e-6)
    np.testing.assert_allclose(got["fc_w"], [[0.058072, -0.246808]], atol=2e-6)
    np.testing.assert_allclose(got["fc_b"], [-0.422173], atol=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decay_adagrad_and_add_weight_decay_decay_as_caffe2(backend):
    """DecayAdagrad's weight_decay reaches its dense op whatever the rank (fc_b too), and its
    sparse tables take plain SparseAdagrad; add_weight_decay adds weight_decay w to the
    gradient of each parameter tagged a weight (fc_w). Caffe2 (weight_decay=0.3)."""
    got = _decay_model(backend, "build_decay_adagrad", {"base_learning_rate": 0.5, "weight_decay": 0.3})
    np.testing.assert_allclose(got["tbl"][1:3], [[0.0508, -0.110515], [0.045653, -0.091058]], atol=2e-6)
    np.testing.assert_allclose(got["t1"], [0.5, 0.275427, 0.50853, 1.0, -1.0], atol=2e-6)
    np.testing.assert_allclose(got["fc_w"], [[0.050062, -0.462884]], atol=2e-6)
    np.testing.assert_allclose(got["fc_b"], [0.063484], atol=2e-6)
    got = _decay_model(backend, "build_sgd", {"base_learning_rate": 0.5},
                       extra=lambda model: optimizer.add_weight_decay(model, 0.3))
    np.testing.assert_allclose(got["tbl"][1:3], [[0.005151, 0.125983], [0.335183, -0.278435]], atol=2e-6)
    np.testing.assert_allclose(got["fc_w"], [[-0.090161, -0.419705]], atol=2e-6)
    np.testing.assert_allclose(got["fc_b"], [0.048357], atol=2e-6)


def test_weight_decay_errors_are_located():
    """add_weight_decay of a weight with a sparse gradient is Caffe2's ValueError; Adagrad's
    weight decay of a parameter whose shape nothing gives (Caffe2: a KeyError) says what to do."""
    model = ModelHelper(name="m")
    model.param_init_net.GivenTensorFill([], "tbl", shape=[4, 2], values=[0.0] * 8)
    model.AddParameter(core.BlobReference("tbl"), tags=["WEIGHT"])
    model.AddParameter(core.BlobReference("fed"))
    y = model.net.Add([model.net.SumElements(model.net.Gather(["tbl", "ids"], "emb"), "s"),
                       model.net.SumElements("fed", "s2")], "y")
    model.net.AveragedLoss(y, "loss")
    model.AddGradientOperators(["loss"])
    with pytest.raises(DSLError, match="tbl has a sparse gradient") as err:
        optimizer.add_weight_decay(model, 0.1)
    assert "test_optimizer_options.py" in str(err.value)
    workspace.ResetWorkspace()
    with pytest.raises(DSLError, match="the shape of fed is unknown"):
        optimizer.build_adagrad(model, base_learning_rate=0.1, weight_decay=0.1)
