"""examples/dlrm.py, a DLRM-shaped model (bottom MLP, SparseLengthsSum embeddings, dot
interaction, top MLP), trained against a numpy implementation of the same model: its
forward pass, its backward pass worked out by hand, and the SGD and Adagrad updates
(the tables' sparse ones per id, in order). Both backends.

The same script also runs unchanged on the real Caffe2 (../shared/tools/caffe2-ref/run.sh
examples/dlrm.py --loss-function L --optimizer O); the losses it printed are in CAFFE2.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dslc import workspace
import paths

EXAMPLE = paths.EXAMPLES / "dlrm.py"
LN_EMB, LN_BOT, LN_TOP = [20, 30, 40], [8, 8, 4], [8, 4, 1]
BATCH, STEPS, LR = 16, 12, 0.1
# the real Caffe2's losses for the default sizes (batch 16, 24 batches, seed 0): batches 1, 2, 3, 24
CAFFE2 = {("mse", "sgd"): [0.13428861, 0.14250264, 0.12826645, 0.13341758],
          ("bce", "adagrad"): [0.73145449, 0.80002785, 0.68917739, 0.7271986]}


def _example():
    return paths.load(EXAMPLE, "dlrm_example")


def _relu(x):
    return np.maximum(x, 0)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_dlrm(init, ln_top, data, loss, opt, lr):
    """The losses of training the model on ``data`` in float64, by hand."""
    p = {k: v.astype(np.float64) for k, v in init.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}  # Adagrad's sums of squares
    n_bot, n_top, t = len(LN_BOT) - 1, len(ln_top) - 1, len(LN_EMB)
    f, d = 1 + t, LN_BOT[-1]
    pairs = [(i, j) for i in range(f) for j in range(i)]
    losses = []
    for feeds in data:
        # forward
        h, bot = feeds["dense_x"].astype(np.float64), []
        for i in range(n_bot):
            z = h @ p[f"bot_fc{i}_w"].T + p[f"bot_fc{i}_b"]
            bot.append((h, z))
            h = _relu(z)
        x = h
        bags = []
        for k in range(t):
            lengths, ids = feeds[f"sparse_len_{k}"], feeds[f"sparse_idx_{k}"]
            owner = np.repeat(np.arange(len(lengths)), lengths)  # (the sample each id is for)
            pooled = np.zeros((len(lengths), d))
            np.add.at(pooled, owner, p[f"emb_{k}"][ids])
            bags.append((ids, owner, pooled))
        r = np.stack([x] + [b[2] for b in bags], axis=1)  # (B, F, d)
        zz = r @ r.transpose(0, 2, 1)
        h = np.concatenate([x, np.stack([zz[:, i, j] for i, j in pairs], axis=1)], axis=1)
        top = []
        for i in range(n_top):
            z = h @ p[f"top_fc{i}_w"].T + p[f"top_fc{i}_b"]
            top.append((h, z))
            h = _relu(z) if i < n_top - 1 else z
        logit, label, b = h, feeds["label"].astype(np.float64), len(h)
        if loss == "mse":
            prob = _sigmoid(logit)
            losses.append(np.mean(0.5 * np.sum((prob - label) ** 2, axis=1)))
            g = (prob - label) / b * prob * (1 - prob)
        else:
            losses.append(np.mean(np.maximum(logit, 0) - logit * label + np.log1p(np.exp(-np.abs(logit)))))
            g = (_sigmoid(logit) - label) / b
        # backward
        grads = {}
        for i in reversed(range(n_top)):
            h_in, z = top[i]
            if i < n_top - 1:
                g = g * (z > 0)
            grads[f"top_fc{i}_w"], grads[f"top_fc{i}_b"] = g.T @ h_in, g.sum(axis=0)
            g = g @ p[f"top_fc{i}_w"]
        dx, dzl = g[:, :d], g[:, d:]
        dzz = np.zeros_like(zz)
        for k, (i, j) in enumerate(pairs):
            dzz[:, i, j] = dzl[:, k]
        dr = (dzz + dzz.transpose(0, 2, 1)) @ r
        g = dx + dr[:, 0]
        for i in reversed(range(n_bot)):
            h_in, z = bot[i]
            g = g * (z > 0)
            grads[f"bot_fc{i}_w"], grads[f"bot_fc{i}_b"] = g.T @ h_in, g.sum(axis=0)
            g = g @ p[f"bot_fc{i}_w"]
        # updates: dense, then each table's rows, one id at a time in order
        for name, gr in grads.items():
            if opt == "sgd":
                p[name] -= lr * gr
            else:
                m[name] += gr * gr
                p[name] -= lr * gr / (np.sqrt(m[name]) + 1e-8)
        for k, (ids, owner, _) in enumerate(bags):
            table, moment, rows = p[f"emb_{k}"], m[f"emb_{k}"], dr[:, 1 + k]
            for row, s in zip(ids, owner):
                if opt == "sgd":
                    table[row] -= lr * rows[s]
                else:
                    moment[row] += rows[s] * rows[s]
                    table[row] -= lr * rows[s] / (np.sqrt(moment[row]) + 1e-8)
    return losses, p


@pytest.mark.parametrize("loss, opt", [("mse", "sgd"), ("bce", "adagrad")])
def test_dlrm_trains_as_numpy(backend, loss, opt):
    ex = _example()
    workspace.ResetWorkspace()
    model, init, ln_top = ex.build(LN_EMB, LN_BOT, LN_TOP, loss, opt, LR, seed=0)
    data = list(ex.batches(LN_EMB, LN_BOT[0], BATCH, STEPS, seed=1))
    got = ex.train(model, data)
    want, params = numpy_dlrm(init, ln_top, data, loss, opt, LR)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    for name, value in params.items():
        np.testing.assert_allclose(workspace.FetchBlob(name), value, rtol=1e-4, atol=1e-6, err_msg=name)
    assert workspace.FetchBlob("emb_0").shape == (20, 4)


@pytest.mark.slow
@pytest.mark.parametrize("loss, opt", sorted(CAFFE2))
def test_dlrm_prints_the_losses_caffe2_printed(loss, opt, capsys):
    workspace.ResetWorkspace()
    losses = _example().main(["--loss-function", loss, "--optimizer", opt])
    np.testing.assert_allclose([losses[k] for k in (0, 1, 2, 23)], CAFFE2[(loss, opt)], rtol=1e-6)
    assert "batch 24/24" in capsys.readouterr().out


# --- DLRM's own Caffe2 script (facebookresearch/dlrm's dlrm_s_caffe2.py, in ../shared, never
# copied here), run unmodified with `dslc exec`. Its figures (each print-freq window's mean
# training loss, and the test loss and accuracy) are what the same command printed on the real
# Caffe2: /tmp/caffe2-venv/bin/python dlrm_s_caffe2.py ARGS --loss-function L --optimizer O,
# in ../shared/third_party/dlrm with tqdm and scikit-learn on its path.


def _shared() -> Path:
    """../shared beside the checkout (for a git worktree, beside the main checkout it belongs to)."""
    repo = paths.ROOT
    git = repo / ".git"
    if git.is_file() and git.read_text().startswith("gitdir:"):  # (a worktree: .git names main/.git/worktrees/X)
        main = Path(git.read_text().split(":", 1)[1].strip()).parents[2]
        if (main.parent / "shared").is_dir():
            return main.parent / "shared"
    return repo.parent / "shared"


DLRM_SCRIPT = _shared() / "third_party" / "dlrm" / "dlrm_s_caffe2.py"
DLRM_ARGS = ["--arch-embedding-size", "20-30-40", "--arch-sparse-feature-size", "4", "--arch-mlp-bot", "8-8-4",
             "--arch-mlp-top", "8-4-1", "--mini-batch-size", "16", "--num-batches", "24", "--print-freq", "4",
             "--test-freq", "12", "--numpy-rand-seed", "123"]
DLRM_CAFFE2 = {  # (training losses of iterations 4, 8, ..., 24; test (loss, accuracy %) at 12 and 24)
    ("mse", "sgd"): ([0.140471, 0.103243, 0.129613, 0.110951, 0.133757, 0.121863],
                     [(0.125756, 0.0), (0.120806, 0.0)]),
    ("bce", "adagrad"): ([0.310845, 0.257233, 0.217560, 0.193866, 0.168411, 0.138324],
                         [(0.200469, 100.0), (0.125944, 100.0)]),
}


def _dlrm_skip_reason():
    if not DLRM_SCRIPT.exists():
        return f"DLRM's script is not at {DLRM_SCRIPT} (../shared/third_party/dlrm)"
    missing = [m for m in ("torch", "sklearn", "tqdm") if importlib.util.find_spec(m) is None]
    if missing:
        return f"DLRM's script imports {', '.join(missing)}, not installed here"
    return None


@pytest.mark.skipif(_dlrm_skip_reason() is not None, reason=str(_dlrm_skip_reason()))
@pytest.mark.parametrize("loss, opt", sorted(DLRM_CAFFE2))
def test_dlrms_caffe2_script_prints_caffe2s_figures(backend, loss, opt, tmp_path):
    dslc = os.path.join(os.path.dirname(sys.executable), "dslc")
    env = dict(os.environ, DSLC_BACKEND=backend, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([dslc, "exec", str(DLRM_SCRIPT), *DLRM_ARGS, "--loss-function", loss, "--optimizer", opt],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    train = [float(x) for x in re.findall(r"Finished training it \d+/24 of epoch 0, .* loss ([0-9.]+)", done.stdout)]
    test = [(float(a), float(b)) for a, b in
            re.findall(r"Testing at - \d+/24 .* loss ([0-9.]+), accuracy ([0-9.]+) %", done.stdout)]
    want_train, want_test = DLRM_CAFFE2[(loss, opt)]
    np.testing.assert_allclose(train, want_train, rtol=1e-4)
    np.testing.assert_allclose(test, want_test, rtol=1e-4)
