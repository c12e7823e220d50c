"""A LeNet training step: dslc (interp, numba) against the real Caffe2 and PyTorch eager.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lenet.py [--reps 5] [--steps 5]

Model (Caffe2's MNIST tutorial's LeNet, NCHW): 28x28 images, batch 64; conv 5x5 to 20
channels, max-pool 2x2, conv 5x5 to 50, max-pool 2x2, FC 800 -> 500, ReLU, FC 500 -> 10,
SoftmaxWithLoss; plain SGD (lr 0.1). dslc and Caffe2 run the same program (brew,
AddGradientOperators, build_sgd); PyTorch runs nn.Conv2d/MaxPool2d/Linear with
torch.optim.SGD. One thread everywhere (the process, and those it starts, pinned to one
core); each figure is the median of `--reps` timings of `--steps` steps, in this one run;
ratios are to dslc numba. The BLAS kernel numpy uses is printed (threadpoolctl).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # (the Caffe2 process inherits them)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedding import blas_kernel  # noqa: E402
from timing import median_time, one_core  # noqa: E402

one_core()  # (one thread everywhere: dslc's thread pool and the other processes' too)

B, LR = 64, 0.1

# the model, written once for dslc and (imports renamed) for Caffe2
MODEL = """
def build(model_helper, brew, optimizer, workspace, np):
    rng = np.random.default_rng(0)
    workspace.FeedBlob("data", rng.random(({B}, 1, 28, 28), dtype=np.float32))
    workspace.FeedBlob("label", rng.integers(0, 10, {B}).astype(np.int32))
    m = model_helper.ModelHelper(name="lenet")
    c1 = brew.conv(m, "data", "conv1", dim_in=1, dim_out=20, kernel=5)
    p1 = brew.max_pool(m, c1, "pool1", kernel=2, stride=2)
    c2 = brew.conv(m, p1, "conv2", dim_in=20, dim_out=50, kernel=5)
    p2 = brew.max_pool(m, c2, "pool2", kernel=2, stride=2)
    fc3 = brew.relu(m, brew.fc(m, p2, "fc3", dim_in=50 * 4 * 4, dim_out=500), "relu3")
    pred = brew.fc(m, fc3, "pred", 500, 10)
    _, loss = m.net.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, {LR})
    return m
""".format(B=B, LR=LR)


def dslc_step(backend, reps, steps):
    from dslc import brew, model_helper, optimizer, workspace
    from dslc.session import LocalSession
    scope = {}
    exec(MODEL, scope)
    workspace.ResetWorkspace()
    m = scope["build"](model_helper, brew, optimizer, workspace, np)
    s = LocalSession(workspace.C.Workspace.current, backend=backend)
    s.run(m.param_init_net)
    s.run(m.net)
    return median_time(lambda: [s.run(m.net) for _ in range(steps)], reps, time.perf_counter) / steps


CAFFE2 = """
import time, statistics, numpy as np
from caffe2.python import brew, model_helper, optimizer, workspace
{model}
m = build(model_helper, brew, optimizer, workspace, np)
workspace.RunNetOnce(m.param_init_net)
workspace.CreateNet(m.net)
workspace.RunNet(m.net.Proto().name, 2)
ts = []
for _ in range({reps}):
    t0 = time.perf_counter()
    workspace.RunNet(m.net.Proto().name, {steps})
    ts.append((time.perf_counter() - t0) / {steps})
print("CAFFE2", statistics.median(ts))
"""


def caffe2_step(reps, steps):
    python = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if not python.exists():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CAFFE2.format(model=MODEL, reps=reps, steps=steps))
    try:
        out = subprocess.run([str(python), f.name], capture_output=True, text=True, timeout=900).stdout
    finally:
        os.unlink(f.name)
    got = [float(line.split()[1]) for line in out.splitlines() if line.startswith("CAFFE2 ")]
    return got[0] if got else None


def torch_step(reps, steps):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((B, 1, 28, 28), dtype=np.float32))
    label = torch.from_numpy(rng.integers(0, 10, B).astype(np.int64))
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                          nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()

    def run():
        for _ in range(steps):
            opt.zero_grad()
            loss_fn(model(x), label).backward()
            opt.step()
    return median_time(run, reps, time.perf_counter) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    figures = {"dslc numba": dslc_step("numba", args.reps, args.steps),
               "dslc interp": dslc_step("interp", args.reps, args.steps)}
    c2 = caffe2_step(args.reps, args.steps)
    if c2 is not None:
        figures["Caffe2"] = c2
    t = torch_step(args.reps, args.steps)
    if t is not None:
        figures["PyTorch eager"] = t
    base = figures["dslc numba"]
    print(f"LeNet, batch {B} of 28x28, one training step")
    print(f"{'ms per step':30s} {'ms':>8s} {'vs dslc numba':>14s}")
    for name, sec in figures.items():
        print(f"{name:30s} {sec * 1e3:8.3f} {sec / base:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
