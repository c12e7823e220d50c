"""Training through the public API: brew, AddGradientOperators, optimizer, on every backend.

The reference is a plain-numpy float32 implementation of the same 2-layer MLP (written
out here: forward, hand-derived backward, SGD), started from the parameters dslc's
init net made. Losses must agree to 1e-5 relative for 100 steps.
"""
import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

B, D_IN, D_HID, D_OUT, LR, STEPS = 16, 8, 12, 4, 0.5, 100


def data():
    rng = np.random.default_rng(3)
    centers = rng.normal(0, 1, (D_OUT, D_IN))
    label = rng.integers(0, D_OUT, B).astype(np.int32)
    x = (centers[label] + rng.normal(0, 0.7, (B, D_IN))).astype(np.float32)
    return x, label


def build(lr=LR):
    model = ModelHelper(name="mlp")
    fc1 = brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID)
    r1 = brew.relu(model, fc1, "r1")
    fc2 = brew.fc(model, r1, "fc2", dim_in=D_HID, dim_out=D_OUT)
    sm = brew.softmax(model, fc2, "sm")
    xent = model.net.LabelCrossEntropy([sm, "label"], "xent")
    loss = model.net.AveragedLoss(xent, "loss")
    model.net.Accuracy([sm, "label"], "accuracy")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, lr)
    return model


class NumpyMLP:
    """The same model in plain float32 numpy: y = softmax(relu(x W1^T + b1) W2^T + b2)."""

    def __init__(self, params):
        self.p = {k: v.copy() for k, v in params.items()}

    def step(self, x, label, lr=np.float32(LR)):
        p = self.p
        h = x @ p["fc1_w"].T + p["fc1_b"]
        r = np.maximum(h, 0)
        z = r @ p["fc2_w"].T + p["fc2_b"]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        s = e / e.sum(axis=1, keepdims=True)
        n = len(label)
        loss = np.float32(-np.log(s[np.arange(n), label]).mean())
        # backward, by hand: d loss / d s[i, label_i] = -1 / (n s[i, label_i])
        ds = np.zeros_like(s)
        ds[np.arange(n), label] = -1 / (n * s[np.arange(n), label])
        dz = (ds - (ds * s).sum(axis=1, keepdims=True)) * s
        grads = {"fc2_w": dz.T @ r, "fc2_b": dz.sum(axis=0)}
        dh = (dz @ p["fc2_w"]) * (h > 0)
        grads.update({"fc1_w": dh.T @ x, "fc1_b": dh.sum(axis=0)})
        for k, g in grads.items():
            p[k] = (p[k] - lr * g).astype(np.float32)
        return loss


PARAMS = ["fc1_w", "fc1_b", "fc2_w", "fc2_b"]


@pytest.mark.parametrize("passes", [None, "none"], ids=["pipeline", "no-pipeline"])
def test_100_steps_match_numpy(backend, passes):
    x, label = data()
    workspace.FeedBlob("data", x)
    workspace.FeedBlob("label", label)
    model = build()
    with LocalSession(backend=backend, passes=passes) as s:
        s.run(model.param_init_net)
        ref = NumpyMLP({k: workspace.FetchBlob(k) for k in PARAMS})
        losses, expected = [], []
        for _ in range(STEPS):
            expected.append(ref.step(x, label))
            s.run(model.net)
            losses.append(float(workspace.FetchBlob("loss")))
    # (numba's Softmax, LabelCrossEntropy and AveragedLoss sum rows in their own order, not
    # numpy's pairwise one: float32 rounding that 100 steps of training carry along)
    np.testing.assert_allclose(losses, expected, rtol=1e-5 if backend == "interp" else 3e-5)
    assert losses[-1] < 0.5 * losses[0]  # it learns
    assert float(workspace.FetchBlob("accuracy")) > 0.9
    assert int(workspace.FetchBlob("optimizer_iteration")[0]) == STEPS
    for k in PARAMS:
        np.testing.assert_allclose(workspace.FetchBlob(k), ref.p[k], rtol=1e-4, atol=1e-5)


def test_steps_in_one_plan_match_numpy(backend):
    # the whole training loop as one execution step (num_iter): compiled once, run 30 times
    x, label = data()
    workspace.FeedBlob("data", x)
    workspace.FeedBlob("label", label)
    model = build()
    with LocalSession(backend=backend) as s:
        s.run(model.param_init_net)
        ref = NumpyMLP({k: workspace.FetchBlob(k) for k in PARAMS})
        s.run(core.execution_step("train", [model.net], num_iter=30))
    for _ in range(30):
        last = ref.step(x, label)
    np.testing.assert_allclose(float(workspace.FetchBlob("loss")), last, rtol=1e-5)
    for k in PARAMS:
        np.testing.assert_allclose(workspace.FetchBlob(k), ref.p[k], rtol=1e-4, atol=1e-5)


def test_init_is_reproducible_across_backends_and_runs():
    # XavierFill draws from the stream named by the session seed and the blob: same values on
    # every backend and every fresh workspace; another seed gives others
    got = {}
    for backend, seed in (("interp", 0), ("numba", 0), ("interp", 0), ("interp", 1)):
        ws = workspace.Workspace()
        model = ModelHelper(name="m")
        brew.fc(model, "data", "fc", dim_in=5, dim_out=3)
        LocalSession(ws, backend=backend, seed=seed).run(model.param_init_net)
        got.setdefault(seed, []).append(ws.fetch_blob("fc_w"))
    a, b, c = got[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, got[1][0])
    bound = np.sqrt(3.0 / 5)  # XavierFill: uniform in [-sqrt(3 / fan_in), sqrt(3 / fan_in))
    assert a.dtype == np.float32 and a.shape == (3, 5) and np.all(np.abs(a) <= bound)


_UNSEEDED = """
import numpy as np
from dslc import core, workspace
net = core.Net("init")
net.GaussianFill([], "free", shape=[4])
net.GaussianFill([], "seeded", shape=[4], random_seed=5)
workspace.RunNetOnce(net)
print("|".join(repr(workspace.FetchBlob(b).tolist()) for b in ("free", "seeded")))
"""


@pytest.mark.slow
def test_unseeded_fills_differ_between_runs_of_a_script(tmp_path):
    # issue 37: two runs of a script that seeds nothing drew the same values; Caffe2's differ
    # (its unseeded streams start from the time and process; the real Caffe2 printed
    # different 'free' values on two runs of this program and the same 'seeded' ones:
    # random_seed names its stream). Within one process the backends still agree (above).
    import subprocess
    import sys
    script = tmp_path / "init.py"
    script.write_text(_UNSEEDED)
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                           check=True).stdout.split("|") for _ in range(2)]
    (free_a, seeded_a), (free_b, seeded_b) = runs
    assert free_a != free_b
    assert seeded_a == seeded_b
