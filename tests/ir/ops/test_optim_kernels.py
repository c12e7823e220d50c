"""Adagrad, Adam and LearningRate's policies, on every backend, against Caffe2's formulas.

The numba backend compiles them (tests/backends/numba/test_numba_nn.py covers the rest of a step);
here each is checked against figures read off the real Caffe2 and against a plain
numpy transcription of Caffe2's operators (adagrad_op.h, adam_op.h,
learning_rate_functors.h: float32 arithmetic, Adam's bias correction in double).
"""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.backends.numba import islands
from dslc.session import LocalSession

f32 = np.float32


def caffe2_inputs(ws, strided=False):
    rng = np.random.default_rng(3)
    blobs = dict(p=rng.normal(size=5), m1=rng.random(5), m2=rng.random(5), g=rng.normal(size=5))
    for k, v in blobs.items():
        v = v.astype(np.float32)
        # the same values as every other element of a larger array: a view numba sees as strided
        ws.feed_blob(k, np.repeat(v, 2)[::2] if strided else v)
    ws.feed_blob("lr", np.array([0.3], np.float32))
    ws.feed_blob("it", np.array([4], np.int64))


# Read off the real Caffe2 (pytorch 1.x's caffe2, /work/shared/tools/caffe2-ref/run.sh) running
# this net on these inputs, printed with float32 -> float repr.
CAFFE2 = {
    "pa": [2.133239984512329, -2.412271738052368, 0.4445376694202423, -0.3551357388496399, -0.43976062536239624],
    "m1a": [0.2683413624763489, 0.47963011264801025, 0.08008041977882385, 0.7792134881019592, 0.0509771890938282],
    "m2a": [0.37930306792259216, 0.5025167465209961, 0.4119420349597931, 0.603323757648468, 0.7029419541358948],
    "pg": [1.8761433362960815, -2.3827319145202637, 0.31091392040252686, -0.32897794246673584, -0.5240044593811035],
    "m2g": [0.5048307776451111, 0.6973375082015991, 0.4444730579853058, 1.445420503616333, 0.7039748430252075],
    "lr_fixed": [-0.699999988079071], "lr_step": [-0.3499999940395355],
    "lr_exp": [-0.4592699408531189], "lr_inv": [-0.5438786149024963],
}
POLICIES = [("fixed", {}), ("step", dict(stepsize=3, gamma=0.5)), ("exp", dict(gamma=0.9)),
            ("inv", dict(gamma=0.1, power=0.75))]


def compiled_names(s, net):
    summary = s.compile(net).program.summary()
    return {why.split(":")[0] for why in summary["ops interpreted, and why"]}


@pytest.mark.parametrize("strided", [False, True])
def test_equal_to_caffe2(backend, monkeypatch, strided):
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    ws = workspace.Workspace()
    caffe2_inputs(ws, strided)
    net = core.Net("o")
    net.Adam(["p", "m1", "m2", "g", "lr", "it"], ["pa", "m1a", "m2a"], beta1=0.8, beta2=0.95, epsilon=1e-3)
    net.Adagrad(["p", "m2", "g", "lr"], ["pg", "m2g"], epsilon=1e-3, decay=0.9)
    for policy, kw in POLICIES:
        net.LearningRate(["it"], ["lr_" + policy], base_lr=-0.7, policy=policy, **kw)
    s = LocalSession(ws, backend=backend)
    s.run(net)
    for name, want in CAFFE2.items():
        got = ws.fetch_blob(name)
        assert got.dtype == np.float32
        assert np.asarray(got).ravel().tolist() == want, name
    if backend == "numba":  # compiled, not interpreted
        assert not compiled_names(s, net) & {"Adam", "Adagrad", "LearningRate"}


def lr_reference(policy, it, base_lr, gamma=0.0, stepsize=1, power=0.0):
    """learning_rate_functors.h in float32; iter / stepsize is C++ integer division."""
    if policy == "fixed":
        f = f32(1)
    elif policy == "step":
        f = np.power(f32(gamma), f32(int(it / stepsize)))
    elif policy == "exp":
        f = np.power(f32(gamma), f32(it))
    else:
        f = np.power(f32(1) + f32(gamma) * f32(it), -f32(power))
    return f32(base_lr) * f


@pytest.mark.parametrize("policy, kw", POLICIES + [("step", dict(stepsize=7, gamma=0.3))])
def test_learning_rate_policies(backend, monkeypatch, policy, kw):
    # Iter then LearningRate, as build_sgd makes them, for 25 iterations
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    ws = workspace.Workspace()
    ws.feed_blob("it", np.array([0], np.int64))
    net = core.Net("lr")
    net.Iter(["it"], ["it"])
    net.LearningRate(["it"], ["lr"], base_lr=-0.05, policy=policy, **kw)
    s = LocalSession(ws, backend=backend)
    for k in range(1, 26):
        s.run(net)
        got = ws.fetch_blob("lr")
        want = lr_reference(policy, k, -0.05, **kw)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6)
    if backend == "numba":
        assert "LearningRate" not in compiled_names(s, net)


def test_learning_rate_step_at_its_boundaries(backend):
    # gamma^floor(iter / stepsize): the rate changes at iterations 5, 10, ... exactly
    ws = workspace.Workspace()
    net = core.Net("lr")
    net.LearningRate(["it"], ["lr"], base_lr=1.0, policy="step", stepsize=5, gamma=0.5)
    s = LocalSession(ws, backend=backend)
    for it, want in [(0, 1.0), (4, 1.0), (5, 0.5), (9, 0.5), (10, 0.25), (14, 0.25), (15, 0.125)]:
        ws.feed_blob("it", np.array([it], np.int64))
        s.run(net)
        assert float(ws.fetch_blob("lr")) == want


def optimizer_net(kind, shape):
    net = core.Net(kind)
    net.Iter(["it"], ["it"])
    net.LearningRate(["it"], ["lr"], base_lr=-0.1, policy="exp", gamma=0.95)
    if kind == "adam":
        net.Adam(["p", "m1", "m2", "g", "lr", "it"], ["p", "m1", "m2"], beta1=0.85, beta2=0.99, epsilon=1e-4)
    else:
        net.Adagrad(["p", "m2", "g", "lr"], ["p", "m2"], epsilon=1e-4, decay=0.95)
    return net


def optimizer_reference(kind, p, m1, m2, grads):
    """adagrad_op.h / adam_op.h on float32 numpy arrays, step by step."""
    for k, g in enumerate(grads, start=1):
        lr = lr_reference("exp", k, -0.1, gamma=0.95)
        if kind == "adam":
            b1, b2 = f32(0.85), f32(0.99)
            corr = f32(np.sqrt(1 - np.float64(b2) ** (k + 1)) / (1 - np.float64(b1) ** (k + 1)))
            m1 = m1 * b1 + g * (f32(1) - b1)
            m2 = m2 * b2 + g * g * (f32(1) - b2)
            p = p + lr * corr * m1 / (np.sqrt(m2) + f32(1e-4))
        else:
            m2 = f32(0.95) * m2 + g * g
            p = p + lr * g / (np.sqrt(m2) + f32(1e-4))
    return p, m1, m2


@pytest.mark.parametrize("kind", ["adam", "adagrad"])
@pytest.mark.parametrize("shape", [(7,), (6, 5), (2, 3, 4)])
def test_optimizers_against_numpy(backend, monkeypatch, kind, shape):
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    rng = np.random.default_rng(len(shape))
    p = rng.normal(size=shape).astype(np.float32)
    m1 = np.zeros(shape, np.float32)
    m2 = np.abs(rng.normal(size=shape)).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(6)]
    ws = workspace.Workspace()
    for name, v in dict(p=p, m1=m1, m2=m2, g=grads[0], it=np.array([0], np.int64)).items():
        ws.feed_blob(name, v)
    net = optimizer_net(kind, shape)
    s = LocalSession(ws, backend=backend)
    for g in grads:
        ws.feed_blob("g", g)
        s.run(net)
    want = optimizer_reference(kind, p, m1, m2, grads)
    for name, w in zip(("p", "m1", "m2"), want):
        np.testing.assert_allclose(ws.fetch_blob(name), w, rtol=1e-6, atol=1e-7, err_msg=name)
    if backend == "numba":
        assert not compiled_names(s, net) & {"Adam", "Adagrad", "LearningRate", "Iter"}
