"""workspace.Predictor keeps its workspace to itself, as Caffe2's does: only ``run``'s
outputs leave it, so the intermediates of the predict net need not be stored and
fuse-conv can make one ConvFused of Conv -> test-mode SpatialBN -> residual Sum -> Relu.

Caffe2's answer (/tmp/caffe2-venv, torch 1.10.2): after ``workspace.Predictor(init,
predict)`` and ``.run([x])`` on a brew conv-BN-ReLU net, ``workspace.Blobs()`` of the
user's workspace is ``[]``: neither the weights nor an intermediate reach it.
The expected outputs are computed here with plain numpy (a direct convolution sum).
"""
from __future__ import annotations

import numpy as np

from dslc import brew, core, model_helper, workspace
from dslc.proto import caffe2_pb2

RNG = np.random.default_rng(41)
C, H = 4, 6
EPS = 1e-5


def _params():
    return {"c_w": RNG.standard_normal((C, C, 3, 3)).astype(np.float32),
            "c_b": RNG.standard_normal(C).astype(np.float32),
            "bn_s": RNG.uniform(0.5, 2, C).astype(np.float32),
            "bn_b": RNG.standard_normal(C).astype(np.float32),
            "bn_rm": RNG.standard_normal(C).astype(np.float32),
            "bn_riv": RNG.uniform(0.5, 2, C).astype(np.float32)}


def _nets(params):
    m = model_helper.ModelHelper(name="deploy", init_params=False)
    brew.conv(m, "data", "c", C, C, 3, pad=1)
    brew.spatial_bn(m, "c", "bn", C, epsilon=EPS, is_test=True)
    m.net.Sum(["bn", "data"], "res")
    brew.relu(m, "res", "out")
    predict = m.net.Proto()
    predict.external_output.append("out")
    init = caffe2_pb2.NetDef(name="init")
    for name, value in params.items():
        op = core.CreateOperator("GivenTensorFill", [], [name], shape=list(value.shape),
                                 values=value.reshape(-1).tolist())
        init.op.add().CopyFrom(op)
    return init, predict


def _numpy(x, p):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((x.shape[0], C, H, H), np.float64)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + H, j:j + H], p["c_w"][:, :, i, j])
    conv += p["c_b"][None, :, None, None]
    ch = lambda v: v[None, :, None, None]  # noqa: E731
    bn = (conv - ch(p["bn_rm"])) / np.sqrt(ch(p["bn_riv"]) + EPS) * ch(p["bn_s"]) + ch(p["bn_b"])
    return np.maximum(bn + x, 0)


def test_predictor_outputs_match_numpy_and_leave_the_user_workspace_alone():
    params = _params()
    init, predict = _nets(params)
    workspace.ResetWorkspace()
    p = workspace.Predictor(init.SerializeToString(), predict.SerializeToString())
    for n in (1, 2, 1):  # (another batch size, then back)
        x = RNG.standard_normal((n, C, H, H)).astype(np.float32)
        (y,) = p.run([x])
        np.testing.assert_allclose(y, _numpy(x, params), rtol=1e-4, atol=1e-4)
        assert y.shape == (n, C, H, H)
    assert workspace.Blobs() == []  # (Caffe2's answer, above)


def test_predictor_net_fuses_conv_bn_sum_relu(monkeypatch):
    monkeypatch.setenv("DSLC_PIPELINE", "default")  # (fusion is a pass: asked for even under DSLC_PIPELINE=none)
    params = _params()
    init, predict = _nets(params)
    p = workspace.Predictor(init.SerializeToString(), predict.SerializeToString())
    x = RNG.standard_normal((1, C, H, H)).astype(np.float32)
    (y,) = p.run([x])
    np.testing.assert_allclose(y, _numpy(x, params), rtol=1e-4, atol=1e-4)
    modules = [c.module for c in p._ws.session()._compiled.values()]
    ops = [op.name for mod in modules for op in mod.walk()]
    assert "ConvFused" in ops
    assert not {"Conv", "SpatialBN", "Sum", "Relu"} & set(ops)
    stored = sorted(str(op.attrs["blob"]) for mod in modules for op in mod.walk()
                    if op.name == "store" and str(op.attrs["blob"]) in ("c", "bn", "res", "out"))
    assert stored == ["out"]  # (the intermediates are not stored: only the output leaves)


def test_a_deploy_models_filled_weights_are_folded_once(monkeypatch):
    """The init net's filled weights are read-only and no one else holds them (runtime/
    derived.py: frozen), so the fused conv folds the norm into its weights at the first run
    only."""
    from dslc.ir.ops import conv_fused

    monkeypatch.setenv("DSLC_PIPELINE", "default")
    folds = []
    real = conv_fused.fold_bn
    monkeypatch.setattr(conv_fused, "fold_bn", lambda *a: folds.append(1) or real(*a))
    params = _params()
    init, predict = _nets(params)
    p = workspace.Predictor(init.SerializeToString(), predict.SerializeToString())
    for _ in range(3):
        x = RNG.standard_normal((2, C, H, H)).astype(np.float32)
        (y,) = p.run([x])
        np.testing.assert_allclose(y, _numpy(x, params), rtol=1e-4, atol=1e-4)
    assert len(folds) == 1
