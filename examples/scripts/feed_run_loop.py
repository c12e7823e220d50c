"""The plain Caffe2 loop most scripts are written in: build a model once, create its net, then
per iteration FeedBlob a batch, RunNet, FetchBlob the loss.

A linear regression y = 2 x0 - 3 x1 + 0.5 (plus noise) learned by SGD from numpy batches. It
imports caffe2.python, as the script was written for Caffe2, and runs unchanged on dslc:

    dslc exec examples/scripts/feed_run_loop.py --iters 200
    dslc exec --backend numba --profile examples/scripts/feed_run_loop.py --iters 200

It prints the loss every 50 iterations, then the learned weight and bias.
"""
import argparse

import numpy as np

from caffe2.python import brew, model_helper, optimizer, workspace

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--batch", type=int, default=32)
args = parser.parse_args()

TRUE_W, TRUE_B = np.array([[2.0, -3.0]], np.float32), 0.5
rng = np.random.RandomState(0)


def batch(n):
    x = rng.randn(n, 2).astype(np.float32)
    y = x @ TRUE_W.T + TRUE_B + 0.01 * rng.randn(n, 1).astype(np.float32)
    return x, y.astype(np.float32)


model = model_helper.ModelHelper(name="regression")
pred = brew.fc(model, "x", "pred", dim_in=2, dim_out=1)
dist = model.net.SquaredL2Distance([pred, "y"], "dist")
loss = model.net.AveragedLoss(dist, "loss")
model.AddGradientOperators([loss])
optimizer.build_sgd(model, base_learning_rate=0.1, policy="fixed")

x, y = batch(args.batch)
workspace.FeedBlob("x", x)
workspace.FeedBlob("y", y)
workspace.RunNetOnce(model.param_init_net)
workspace.CreateNet(model.net)

for i in range(args.iters):
    x, y = batch(args.batch)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("y", y)
    workspace.RunNet(model.net.Proto().name)
    if (i + 1) % 50 == 0:
        print(f"iter {i + 1}: loss {float(workspace.FetchBlob('loss')):.6f}")

w, b = workspace.FetchBlob("pred_w"), workspace.FetchBlob("pred_b")
print("w", np.round(w, 3).tolist(), "b", np.round(b, 3).tolist())
