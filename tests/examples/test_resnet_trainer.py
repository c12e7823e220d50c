"""examples/scripts/resnet_trainer.py: a ResNeXt trained in Caffe2's idiom (models.resnet,
data_parallel_model, brew, optimizer) on synthetic images.

Checked three ways:
- against numpy: the training net's forward ops, evaluated here in float64 by a small
  interpreter of their own (conv, training-mode SpatialBN, max and average pooling, FC,
  softmax loss), give the script's first loss; central differences of that numpy loss give
  its gradients; plain SGD (no momentum, no decay) gives the weights after the step, and
  numpy's loss at those weights the second step's loss;
- against the real Caffe2's losses, recorded in CAFFE2 below: ``run.sh
  examples/scripts/resnet_trainer.py --steps 3 --image_size 16 --batch_size 8`` printed
  them with /tmp/caffe2-venv (torch 1.10.2's Caffe2), the same weights and batches fed;
- and, where that venv is present, side by side: ``dslc exec`` and Caffe2 running the
  script now.
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from dslc import workspace

import caffe2_ref
import paths

SCRIPT = paths.EXAMPLES / "scripts" / "resnet_trainer.py"
BIG = ["--steps", "3", "--image_size", "16", "--batch_size", "8"]
CAFFE2 = [2.77269650, 2.51265621, 2.53569651]  # (see the module docstring)
SMALL = ["--momentum", "0", "--weight_decay", "0", "--image_size", "16", "--batch_size", "8"]


def _script():
    return paths.load(SCRIPT, "resnet_trainer")


# ----------------------------------------------------------------------------- numpy's forward pass

def _args(op) -> dict:
    out = {}
    for a in op.arg:
        out[a.name] = a.f if a.HasField("f") else a.i if a.HasField("i") else list(a.ints) or a.s
    return out


def _windows(x, k, stride, pad, fill):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    return sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # N C OH OW k k


def _conv(x, w, a):
    k, s, p, g = a["kernel"], a.get("stride", 1), a.get("pad", 0), a.get("group", 1)
    win = _windows(x, k, s, p, 0.0)
    cin, cout = x.shape[1] // g, w.shape[0] // g
    return np.concatenate([np.einsum("ncijkl,ockl->noij", win[:, i * cin:(i + 1) * cin], w[i * cout:(i + 1) * cout])
                           for i in range(g)], axis=1)


def forward(ops, blobs: dict, until: str) -> float:
    """Evaluate ``ops`` (a training net's, in order) on ``blobs`` in float64 until ``until`` is made."""
    b = {k: np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else v for k, v in blobs.items()}
    for op in ops:
        a, i, o = _args(op), list(op.input), list(op.output)
        if op.type == "Conv":
            y = _conv(b[i[0]], b[i[1]], a)
            b[o[0]] = y + b[i[2]][None, :, None, None] if len(i) > 2 else y
        elif op.type == "SpatialBN":
            x = b[i[0]]
            mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
            norm = (x - mean[None, :, None, None]) / np.sqrt(var + a.get("epsilon", 1e-5))[None, :, None, None]
            b[o[0]] = norm * b[i[1]][None, :, None, None] + b[i[2]][None, :, None, None]
        elif op.type == "Relu":
            b[o[0]] = np.maximum(b[i[0]], 0)
        elif op.type == "MaxPool":
            b[o[0]] = _windows(b[i[0]], a["kernel"], a["stride"], a.get("pad", 0), -np.inf).max(axis=(4, 5))
        elif op.type == "AveragePool":
            assert a.get("global_pooling")
            b[o[0]] = b[i[0]].mean(axis=(2, 3), keepdims=True)
        elif op.type == "Sum":
            b[o[0]] = sum(b[n] for n in i)
        elif op.type == "FC":
            x = b[i[0]].reshape(b[i[0]].shape[0], -1)
            b[o[0]] = x @ b[i[1]].T + b[i[2]]
        elif op.type == "SoftmaxWithLoss":
            z = b[i[0]] - b[i[0]].max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            b[o[1]] = -logp[np.arange(len(logp)), b[i[1]]].mean()
        elif op.type == "Scale":
            b[o[0]] = b[i[0]] * a.get("scale", 1.0)
        else:
            raise AssertionError(f"the numpy forward pass has no {op.type}")
        if until in o:
            return float(b[until])
    raise AssertionError(f"no op makes {until}")


def _state(rt, args):
    """The model's ops, its parameters (without the device prefix) and the name its net was
    created under (the script's, made first: a model built again is named apart)."""
    net_name = workspace.C.Workspace.current.nets and sorted(workspace.C.Workspace.current.nets)[0]
    model = rt.build(args)
    return list(model.net.Proto().op), [str(p)[len("cpu_0/"):] for p in model.params], net_name


@pytest.mark.slow
def test_the_first_steps_are_numpys():
    rt = _script()
    argv = ["--steps", "1"] + SMALL
    args = rt.parse(argv)
    (loss0,) = rt.main(argv)
    grads = {n: workspace.FetchBlob(n) for n in workspace.Blobs() if n.endswith("_grad")}
    after = {n: workspace.FetchBlob(n) for n in workspace.Blobs()}
    shapes = {n[len("cpu_0/"):]: v.shape for n, v in after.items() if n.startswith("cpu_0/")
              and n.endswith(("_w", "_b", "_s", "_rm", "_riv")) and not n.endswith("_grad")}
    w0 = {f"cpu_0/{k}": v for k, v in rt.initial_weights(args, shapes).items()}
    ops, params, net_name = _state(rt, args)

    def loss_at(weights, step):
        data, label = rt.batch(args, step, 0)
        return forward(ops, dict(weights, **{"cpu_0/data": data, "cpu_0/label": label}), "cpu_0/scaled_loss")

    np.testing.assert_allclose(loss0, loss_at(w0, 0), rtol=1e-4)
    # gradients: central differences of numpy's loss, a few entries of a few parameters
    for name, index in (("conv1_w", (3, 1, 1, 2)), ("comp_5_spatbn_3_s", (7,)), ("last_out_L5_w", (2, 100))):
        full = f"cpu_0/{name}"
        moved = {}
        for sign in (1, -1):
            w = dict(w0)
            w[full] = w0[full].astype(np.float64).copy()
            w[full][index] += sign * 1e-6
            moved[sign] = loss_at(w, 0)
        numeric = (moved[1] - moved[-1]) / 2e-6
        np.testing.assert_allclose(grads[full + "_grad"][index], numeric, rtol=2e-3, atol=2e-5, err_msg=name)
    # plain SGD: w1 = w0 - lr * grad, for every parameter
    lr = args.base_learning_rate
    for p in params:
        full = f"cpu_0/{p}"
        np.testing.assert_allclose(after[full], w0[full] - lr * grads[full + "_grad"], rtol=1e-5, atol=1e-7,
                                   err_msg=p)
    # the second step, as the script runs it: the next batch fed, the created net run again
    w1 = {k: after[k] for k in w0}
    data, label = rt.batch(args, 1, 0)
    workspace.FeedBlob("cpu_0/data", data)
    workspace.FeedBlob("cpu_0/label", label)
    workspace.RunNet(net_name)
    np.testing.assert_allclose(workspace.FetchBlob("cpu_0/scaled_loss"), loss_at(w1, 1), rtol=1e-4)
    workspace.ResetWorkspace()


@pytest.mark.slow
def test_the_losses_are_caffe2s():
    losses = _script().main(BIG)
    np.testing.assert_allclose(losses, CAFFE2, rtol=1e-4)
    workspace.ResetWorkspace()


def _losses(out: str) -> list:
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)", out, re.M)]


@pytest.mark.slow
@pytest.mark.skipif(not caffe2_ref.HAVE_CAFFE2, reason="the real Caffe2's venv (/tmp/caffe2-venv) is absent")
def test_dslc_exec_and_caffe2_give_the_same_losses(tmp_path):
    ours = subprocess.run([sys.executable, "-m", "dslc.driver.cli", "exec", str(SCRIPT), *BIG],
                          capture_output=True, text=True, timeout=600)
    assert ours.returncode == 0, ours.stderr[-3000:]
    ref = caffe2_ref.run_script(SCRIPT, BIG, tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert len(_losses(ours.stdout)) == 3
    np.testing.assert_allclose(_losses(ours.stdout), _losses(ref.stdout), rtol=1e-4)
