"""The layers framework (issue 43): LayerModelHelper, the main layer classes, tags and the
train / eval / predict nets the instantiator makes from one model.

Values are computed here with numpy from the inputs and the parameters the init net made.
The op lists were read off the real Caffe2 (torch 1.10.2's caffe2.python) by running
``_model()`` below with its imports turned back (shared/tools/caffe2-ref/run.sh) and printing
``[op.type for op in net.Proto().op]`` for each net.
"""
import numpy as np
import pytest

from dslc import core, layer_model_instantiator as lmi, optimizer, regularizer, schema, scope, workspace
from dslc.layer_model_helper import LayerModelHelper
from dslc.layers.layers import LayerError
from dslc.layers.tags import Tags
from dslc.modeling.parameter_sharing import ParameterSharing



def _sigmoid_xent(logit, label):
    return np.maximum(logit, 0) - logit * label + np.log1p(np.exp(-np.abs(logit)))


def _new_model(dim=4):
    return LayerModelHelper("m", schema.Struct(("x", schema.Scalar((np.float32, (dim,))))),
                            schema.Struct(("label", schema.Scalar((np.float32, (1,))))))


def _model(lr=0.1, reg=None):
    """FC -> Relu -> Dropout -> BatchNormalization -> Concat(h, h) -> FC -> BatchLRLoss."""
    m = _new_model()
    m.default_optimizer = optimizer.SgdOptimizer(lr)
    h = m.FC(m.input_feature_schema.x, 3, weight_reg=reg)
    h = m.Relu(h, 1)
    h = m.Dropout(h)
    h = m.BatchNormalization(h)
    c = m.Concat(schema.Struct(("a", h), ("b", h)))
    logit = m.FC(c, 1)
    m.output_schema = schema.Struct(("logit", logit))
    m.add_loss(m.BatchLRLoss(schema.Struct(("label", m.trainer_extra_schema.label), ("logit", logit))))
    return m, logit


def _feed(m, x, label):
    schema.FeedRecord(m.input_feature_schema, [x])
    schema.FeedRecord(m.trainer_extra_schema, [label])


def test_nets_have_caffe2s_ops():
    m, _ = _model()
    init, train = lmi.generate_training_nets(m)
    types = [op.type for op in train.Proto().op]
    # (read off Caffe2, see the module docstring)
    forward = ["FC", "Relu", "Dropout", "ExpandDims", "SpatialBN", "Squeeze", "Concat", "FC", "Cast", "ExpandDims",
               "SigmoidCrossEntropyWithLogits", "AveragedLoss"]
    assert types[:len(forward)] == forward
    assert types.count("WeightedSum") == 6  # the SGD updates of fc/w, fc/b, scale, bias, fc_auto_0/w, b
    predict = lmi.generate_predict_net(m)
    assert [op.type for op in predict.Proto().op] == ["FC", "Relu", "Dropout", "ExpandDims", "SpatialBN", "Squeeze",
                                                      "Concat", "FC"]
    eval_net = lmi.generate_eval_net(m)
    assert [op.type for op in eval_net.Proto().op] == forward
    init_types = [op.type for op in init.Proto().op]
    # the global constants (ONE, NAN, ZERO, ZERO_RANGE), then each parameter's fill
    assert init_types[:4] == ["GivenTensorFill", "GivenTensorFill", "GivenTensorFill", "GivenTensorIntFill"]
    assert init_types.count("UniformFill") == 4 and init_types.count("ConstantFill") >= 4
    assert [str(p) for p in m.params] == ["fc/w", "fc/b", "batch_normalization/scale", "batch_normalization/bias",
                                          "batch_normalization/running_mean", "batch_normalization/running_inv_var",
                                          "fc_auto_0/w", "fc_auto_0/b"]


def test_predict_net_computes_fc_relu_bn_concat_fc():
    m, logit = _model()
    init, _ = lmi.generate_training_nets(m)
    rng = np.random.RandomState(0)
    x = rng.randn(6, 4).astype(np.float32)
    workspace.RunNetOnce(init)
    predict = lmi.generate_predict_net(m)
    schema.FeedRecord(m.input_feature_schema, [x])
    workspace.RunNetOnce(predict)
    w, b = workspace.FetchBlob("fc/w"), workspace.FetchBlob("fc/b")
    w2, b2 = workspace.FetchBlob("fc_auto_0/w"), workspace.FetchBlob("fc_auto_0/b")
    h = np.maximum(x @ w.T + b, 0)
    h = h / np.sqrt(1.0 + 1e-5)  # running mean 0, running variance 1, scale 1, bias 0
    expected = np.concatenate([h, h], axis=1) @ w2.T + b2
    np.testing.assert_allclose(workspace.FetchBlob(logit()), expected, rtol=1e-5, atol=1e-6)


def test_one_sgd_step_matches_numpy():
    """FC + BatchLRLoss, one training step: loss and updated weights against numpy's gradient."""
    m = _new_model(3)
    m.default_optimizer = optimizer.SgdOptimizer(0.5)
    logit = m.FC(m.input_feature_schema.x, 1)
    m.output_schema = schema.Struct(("logit", logit))
    m.add_loss(m.BatchLRLoss(schema.Struct(("label", m.trainer_extra_schema.label), ("logit", logit))))
    init, train = lmi.generate_training_nets(m)
    rng = np.random.RandomState(1)
    x = rng.randn(5, 3).astype(np.float32)
    y = np.array([0, 1, 1, 0, 1], np.float32)
    workspace.RunNetOnce(init)
    w0, b0 = workspace.FetchBlob("fc/w").copy(), workspace.FetchBlob("fc/b").copy()
    _feed(m, x, y)
    workspace.RunNetOnce(train)
    z = (x @ w0.T + b0)[:, 0]
    loss = _sigmoid_xent(z, y).mean()
    np.testing.assert_allclose(workspace.FetchBlob(m.loss.field_blobs()[0]), loss, rtol=1e-5)
    dz = (1 / (1 + np.exp(-z)) - y) / len(y)
    np.testing.assert_allclose(workspace.FetchBlob("fc/w"), w0 - 0.5 * (dz @ x)[None, :], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("fc/b"), b0 - 0.5 * dz.sum(), rtol=1e-5, atol=1e-6)


def test_weighted_lr_loss_and_mse_loss():
    m = LayerModelHelper("m", schema.Struct(("logit", schema.Scalar((np.float32, (1,))))),
                         schema.Struct(("label", schema.Scalar((np.float64, (1,)))),
                                       ("weight", schema.Scalar((np.float64, (1,))))))
    rec = schema.Struct(("label", m.trainer_extra_schema.label), ("logit", m.input_feature_schema.logit),
                        ("weight", m.trainer_extra_schema.weight))
    lr_loss = m.BatchLRLoss(rec)
    mse = m.BatchMSELoss(schema.Struct(("label", m.trainer_extra_schema.label),
                                       ("prediction", m.input_feature_schema.logit)))
    m.output_schema = schema.Struct()
    _, train = lmi.generate_training_nets_forward_only(m)
    z = np.array([[0.5], [-1.0], [2.0]], np.float32)
    y = np.array([1.0, 0.0, 0.0])
    wt = np.array([1.0, 2.0, 0.5])
    schema.FeedRecord(m.input_feature_schema, [z])
    schema.FeedRecord(m.trainer_extra_schema, [y, wt])
    workspace.RunNetOnce(train)
    np.testing.assert_allclose(workspace.FetchBlob(lr_loss()), (_sigmoid_xent(z[:, 0], y) * wt).mean(), rtol=1e-5)
    # SquaredL2Distance is half the squared distance
    np.testing.assert_allclose(workspace.FetchBlob(mse()), (0.5 * (z[:, 0] - y) ** 2).mean(), rtol=1e-5)


def test_dropout_and_batchnorm_differ_between_train_and_eval():
    m = _new_model(8)
    d = m.Dropout(m.input_feature_schema.x, ratio=0.5)
    bn = m.BatchNormalization(m.input_feature_schema.x)
    m.output_schema = schema.Struct(("d", d), ("bn", bn))
    init, train = lmi.generate_training_nets(m)
    x = np.random.RandomState(2).rand(64, 8).astype(np.float32) + 1.0
    workspace.RunNetOnce(init)
    schema.FeedRecord(m.input_feature_schema, [x])
    workspace.RunNetOnce(train)
    dropped = workspace.FetchBlob(d())
    kept = dropped != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_allclose(dropped[kept], 2 * x[kept], rtol=1e-6)
    normed = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(bn()), normed, rtol=1e-3, atol=1e-4)
    # running mean after one step: 0.9 * 0 + 0.1 * batch mean
    np.testing.assert_allclose(workspace.FetchBlob("batch_normalization/running_mean"), 0.1 * x.mean(0), rtol=1e-4)
    eval_net = lmi.generate_eval_net(m)
    workspace.RunNetOnce(eval_net)
    np.testing.assert_array_equal(workspace.FetchBlob(d()), x)
    rm = workspace.FetchBlob("batch_normalization/running_mean")
    rv = workspace.FetchBlob("batch_normalization/running_inv_var")
    np.testing.assert_allclose(workspace.FetchBlob(bn()), (x - rm) / np.sqrt(rv + 1e-5), rtol=1e-4, atol=1e-5)


def test_tags_choose_the_nets_a_layer_joins():
    m = _new_model()
    m.default_optimizer = optimizer.SgdOptimizer(0.1)
    h = m.FC(m.input_feature_schema.x, 2)
    with Tags(Tags.TRAIN_ONLY):
        noisy = m.Dropout(h)
    with Tags(Tags.PREDICTION_ONLY):
        prob = m.Sigmoid(h, 1)
    assert m.layers[1].tags == set(Tags.TRAIN_ONLY)
    m.output_schema = schema.Struct(("noisy", noisy), ("prob", prob))
    _, train = lmi.generate_training_nets_forward_only(m)
    assert [op.type for op in train.Proto().op] == ["FC", "Dropout"]
    assert [op.type for op in lmi.generate_eval_net(m).Proto().op] == ["FC"]
    predict = lmi.generate_predict_net(m)
    assert [op.type for op in predict.Proto().op] == ["FC", "Sigmoid"]
    # the output record keeps only the fields the net defines
    assert predict.output_record().field_names() == ["prob"]
    only_fc = lmi.generate_predict_net(m, include_tags=[Tags.EXCLUDE_FROM_TRAIN])
    assert [op.type for op in only_fc.Proto().op] == ["Sigmoid"]


def test_l1_regularizer_adds_to_the_loss():
    m, _ = _model(reg=regularizer.L1Norm(0.25))
    init, train = lmi.generate_training_nets(m)
    assert m.loss.field_names() == ["unnamed", "fc/w_l1_regularization"]
    workspace.RunNetOnce(init)
    w0 = workspace.FetchBlob("fc/w").copy()
    _feed(m, np.ones((4, 4), np.float32), np.array([0, 1, 0, 1], np.float32))
    workspace.RunNetOnce(train)
    np.testing.assert_allclose(workspace.FetchBlob(m.loss.field_blobs()[1]), 0.25 * np.abs(w0).sum(), rtol=1e-5)


def test_parameter_sharing_and_layer_names():
    m = _new_model()
    with scope.NameScope("tower"), ParameterSharing({"b": "a"}):
        with scope.NameScope("a"):
            m.FC(m.input_feature_schema.x, 2)
        with scope.NameScope("b"):
            m.FC(m.input_feature_schema.x, 2)
    assert [layer.name for layer in m.layers] == ["tower/a/fc", "tower/b/fc"]
    assert [str(p) for p in m.params] == ["tower/a/fc/w", "tower/a/fc/b"] * 2
    with scope.NameScope("tower"), ParameterSharing({"c": "a"}), scope.NameScope("c"):
        with pytest.raises(ValueError, match="shape"):
            m.FC(m.input_feature_schema.x, 3)


def test_functional_layer_infers_types_and_losses_add_up():
    m = _new_model()
    out = m.Relu(m.input_feature_schema.x, 1)
    assert out.field_type() == np.dtype((np.float32, (4,)))
    a = schema.Scalar(np.float32, core.BlobReference("loss_a"))
    m.add_loss(a)
    m.add_loss(a, "unnamed")
    assert m.loss.field_names() == ["unnamed", "unnamed_auto_0"]


def test_bad_inputs_are_named():
    m = _new_model()
    with pytest.raises(LayerError, match="Struct"):
        m.Concat(m.input_feature_schema.x)
    with pytest.raises(LayerError, match="ratio"):
        m.Dropout(m.input_feature_schema.x, ratio=1.5)
    with pytest.raises(AttributeError, match="non-registered layer: NoSuchLayer"):
        m.NoSuchLayer(m.input_feature_schema.x)


def _forward(m, record, arrays):
    m.output_schema = schema.Struct()
    _, net = lmi.generate_training_nets_forward_only(m)
    schema.FeedRecord(record, arrays)
    workspace.RunNetOnce(net)


def test_ranking_and_huber_losses():
    m = _new_model()
    rank = schema.NewRecord(m.net, schema.Struct(("pos_prediction", schema.Scalar(np.float32)),
                                                                 ("neg_prediction", schema.List(np.float32))))
    hinge = m.MarginRankLoss(rank, margin=0.5)
    bpr = m.BPRLoss(rank)
    huber_in = schema.NewRecord(m.net, schema.Struct(("label", schema.Scalar(np.float32)),
                                                     ("prediction", schema.Scalar((np.float32, (1,))))))
    huber = m.BatchHuberLoss(huber_in, delta=1.0)
    pos = np.array([.5, 2.], np.float32)
    lengths = np.array([2, 1], np.int32)
    neg = np.array([.2, .9, 0.], np.float32)
    y = np.array([0., 1., 5.], np.float32)
    p = np.array([[.5], [1.], [1.]], np.float32)
    schema.FeedRecord(huber_in, [y, p])
    _forward(m, rank, [pos, lengths, neg])
    pos_rep = np.repeat(pos, lengths)
    np.testing.assert_allclose(workspace.FetchBlob(hinge()), np.maximum(0, 0.5 - (pos_rep - neg)).sum(), rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(bpr()), np.log1p(np.exp(neg - pos_rep)).sum(), rtol=1e-6)
    e = np.abs(y - p[:, 0])
    np.testing.assert_allclose(workspace.FetchBlob(huber()), np.where(e <= 1, .5 * e * e, e - .5).mean(), rtol=1e-6)


def test_weighting_layers_and_label_smoothing():
    m = _new_model()
    parts = schema.NewRecord(m.net, schema.Struct(("a", schema.Scalar((np.float32, (2,)))),
                                                  ("b", schema.Scalar((np.float32, (2,))))))
    learned = m.BlobWeightedSum(parts, init_weights=[2.0, -1.0])
    fixed = m.ConstantWeight(parts, weights=[0.25, 0.75])
    label = schema.NewRecord(m.net, schema.Scalar(np.int32))
    smooth = m.LabelSmooth(label, [[.8, .1, .1], [.1, .8, .1], [.1, .1, .8]])
    m.output_schema = schema.Struct()
    init, net = lmi.generate_training_nets_forward_only(m)
    a = np.array([[1., 2.], [3., 4.]], np.float32)
    b = np.array([[.5, .5], [1., 0.]], np.float32)
    schema.FeedRecord(parts, [a, b])
    schema.FeedRecord(label, [np.array([2, 0], np.int32)])
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(learned()), 2 * a - b)
    np.testing.assert_allclose(workspace.FetchBlob(fixed()), .25 * a + .75 * b)
    np.testing.assert_allclose(workspace.FetchBlob(smooth()), [[.1, .1, .8], [.8, .1, .1]], rtol=1e-6)


def _id_list(limit):
    return schema.List(schema.Scalar(np.int64, metadata=schema.Metadata(categorical_limit=limit)))


def test_sparse_lookup_pools_embedding_rows():
    m = _new_model()
    ids = schema.NewRecord(m.net, _id_list(10))
    sums = m.SparseLookup(ids, [3], "Sum")
    means = m.SparseLookup(ids, [3], "Mean")
    sqrt = m.SparseLookup(ids, [3], "Sqrt")
    m.output_schema = schema.Struct()
    init, net = lmi.generate_training_nets_forward_only(m)
    lengths = np.array([2, 0, 3], np.int32)
    values = np.array([1, 4, 4, 0, 9], np.int64)
    schema.FeedRecord(ids, [lengths, values])
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    for layer, out, pooled in zip(m.layers, (sums, means, sqrt), ("sum", "mean", "sqrt")):
        w = workspace.FetchBlob(str(layer.w))
        assert w.shape == (10, 3)
        rows = np.split(w[values], np.cumsum(lengths)[:-1])
        expected = [r.sum(0) if pooled == "sum" else r.sum(0) / max(len(r), 1) if pooled == "mean"
                    else r.sum(0) / np.sqrt(max(len(r), 1)) for r in rows]
        np.testing.assert_allclose(workspace.FetchBlob(out()), expected, rtol=1e-5, atol=1e-7)


def test_pairwise_similarity_is_the_dot_product_interaction():
    m = _new_model()
    emb = schema.NewRecord(m.net, schema.Struct(("all_embeddings", schema.Scalar((np.float32, (3, 4))))))
    out = m.PairwiseSimilarity(emb, 9)
    norm = m.LayerNormalization(schema.NewRecord(m.net, schema.Scalar((np.float32, (4,)))), epsilon=1e-4)
    m.output_schema = schema.Struct()
    init, net = lmi.generate_training_nets_forward_only(m)
    e = np.random.RandomState(3).randn(2, 3, 4).astype(np.float32)
    x = np.random.RandomState(4).randn(5, 4).astype(np.float32)
    schema.FeedRecord(emb, [e])
    schema.FeedRecord(m.layers[-1].input_record, [x])
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(out()), np.einsum("bnd,bmd->bnm", e, e).reshape(2, 9), rtol=1e-5)
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-4)  # scale 1, bias 0
    np.testing.assert_allclose(workspace.FetchBlob(norm()), expected, rtol=1e-4, atol=1e-5)


def test_random_feature_maps():
    m = _new_model()
    x_rec = m.input_feature_schema.x
    rff = m.RandomFourierFeatures(x_rec, 6, sigma=2.0)
    arc = m.ArcCosineFeatureMap(x_rec, 5, s=2)
    m.output_schema = schema.Struct()
    init, net = lmi.generate_training_nets_forward_only(m)
    x = np.random.RandomState(5).randn(3, 4).astype(np.float32)
    schema.FeedRecord(m.input_feature_schema, [x])
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    w, b = workspace.FetchBlob("random_fourier_features/w"), workspace.FetchBlob("random_fourier_features/b")
    np.testing.assert_allclose(workspace.FetchBlob(rff()), np.sqrt(2 / 6) * np.cos(x @ w.T + b), rtol=1e-4, atol=1e-5)
    rw, rb = workspace.FetchBlob("arc_cosine_feature_map/random_w"), workspace.FetchBlob("arc_cosine_feature_map/random_b")
    z = x @ rw.T + rb
    np.testing.assert_allclose(workspace.FetchBlob(arc()), np.maximum(z, 0) * z, rtol=1e-4, atol=1e-6)  # s = 2
    assert [str(p) for p in m.params][:2] == ["random_fourier_features/w", "random_fourier_features/b"]
    assert m.param_to_optim["random_fourier_features/w"] == m.NoOptim  # fixed random weights


def test_sparse_dropout_per_instantiation_and_bootstrap_fc():
    m = _new_model()
    ids = schema.NewRecord(m.net, _id_list(10))
    whole = m.SparseDropoutWithReplacement(ids, 0.0, 0.5, 1.0, -1)
    items = m.SparseItemwiseDropoutWithReplacement(ids, 1.0, 0.0, 0.0, -7)
    boot = m.FCWithBootstrap(m.input_feature_schema.x, output_dims=2, num_bootstrap=2)
    m.output_schema = schema.Struct()
    lengths, values = np.array([2, 0, 3], np.int32), np.array([1, 4, 4, 0, 9], np.int64)
    x = np.random.RandomState(6).randn(5, 4).astype(np.float32)
    schema.FeedRecord(ids, [lengths, values])
    schema.FeedRecord(m.input_feature_schema, [x])
    init, train = lmi.generate_training_nets_forward_only(m)
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(train)
    # training: lists kept whole (ratio 0), every id replaced (ratio 1)
    assert workspace.FetchBlob(whole.items()).tolist() == values.tolist()
    assert workspace.FetchBlob(items.items()).tolist() == [-7] * 5
    assert workspace.FetchBlob(items.lengths()).tolist() == lengths.tolist()
    for i in range(2):
        idx = workspace.FetchBlob(boot[2 * i]())
        assert idx.shape == (5,) and idx.min() >= 0 and idx.max() <= 4
        w = workspace.FetchBlob(f"fc_with_bootstrap/bootstrap_iteration_{i}/w")
        b = workspace.FetchBlob(f"fc_with_bootstrap/bootstrap_iteration_{i}/b")
        np.testing.assert_allclose(workspace.FetchBlob(boot[2 * i + 1]()), x[idx] @ w.T + b, rtol=1e-5, atol=1e-6)
    workspace.RunNetOnce(lmi.generate_predict_net(m))
    # prediction: every list replaced by [-1] (ratio 1), ids kept (ratio 0), the FCs on the whole batch
    assert workspace.FetchBlob(whole.items()).tolist() == [-1, -1, -1]
    assert workspace.FetchBlob(whole.lengths()).tolist() == [1, 1, 1]
    assert workspace.FetchBlob(items.items()).tolist() == values.tolist()
    w = workspace.FetchBlob("fc_with_bootstrap/bootstrap_iteration_0/w")
    b = workspace.FetchBlob("fc_with_bootstrap/bootstrap_iteration_0/b")
    np.testing.assert_allclose(workspace.FetchBlob(boot[1]()), x @ w.T + b, rtol=1e-5, atol=1e-6)


def test_a_loss_no_parameter_feeds_trains_without_gradients():
    """Caffe2's layers_test sets a UniformSampling layer's output as the loss: its train net
    gets no gradient ops and no error (AddGradientOperators itself stays strict). The samples
    start with the input ids; each probability is num_samples / num_elements (by hand: 0.2)."""
    m = _new_model()
    ids = schema.NewRecord(m.net, schema.Scalar(np.int32))
    given = np.array([3, 10, 11, 15, 20, 99], np.int32)
    schema.FeedRecord(ids, [given])
    out = m.UniformSampling(ids, 20, 100)
    m.loss = out
    m.output_schema = schema.Struct()
    init, train = lmi.generate_training_nets(m)
    assert not [op for op in train.Proto().op if op.type.endswith("Gradient") and op.type != "StopGradient"]
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(train)
    samples, prob = workspace.FetchBlob(out.samples()), workspace.FetchBlob(out.sampling_prob())
    assert len(samples) == 20 and len(set(samples.tolist())) == 20
    np.testing.assert_array_equal(samples[:6], given)
    np.testing.assert_allclose(prob, np.full(20, 0.2, np.float32))
    net = core.Net("cut_off")
    net.StopGradient(["x"], ["y"])
    net.Scale(["y"], ["c"], scale=2.0)
    with pytest.raises(Exception, match="no input of net 'cut_off' gets a gradient"):
        net.AddGradientOperators(["c"])
