"""An LSTM's training step: dslc (interp, numba) against the real Caffe2 and PyTorch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lstm.py [--reps 5] [--steps 10]

Model: rnn_cell.LSTM over x [T=32, N=32, D=64] with H=128 units (Caffe2's cell: the input
projected once, then per step an FC of the hidden state, the gate sum and LSTMUnit), its
hidden states through an FC to 1 per step, squared distance to a label, averaged;
plain SGD (lr 0.01). dslc and Caffe2 run the same program (rnn_cell.LSTM,
AddGradientOperators, build_sgd); PyTorch (if installed) runs nn.LSTM and nn.Linear with
torch.optim.SGD. Every library runs on one thread; each figure is the median of `--reps`
timings of `--steps` steps, in this one run; ratios are to dslc numba. The BLAS kernel
numpy uses is printed (threadpoolctl).
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
from timing import median_time  # noqa: E402

T, N, D, H, LR = 32, 32, 64, 128, 0.01

# the model, written once for dslc and (imports renamed) for Caffe2
MODEL = """
def build(model_helper, rnn_cell, brew, optimizer, workspace, np):
    rng = np.random.default_rng(0)
    workspace.FeedBlob("x", rng.normal(size=({T}, {N}, {D})).astype(np.float32))
    workspace.FeedBlob("label", rng.normal(size=({T}, {N}, 1)).astype(np.float32))
    workspace.FeedBlob("lengths", np.full({N}, {T}, np.int32))
    workspace.FeedBlob("h0", np.zeros((1, {N}, {H}), np.float32))
    workspace.FeedBlob("c0", np.zeros((1, {N}, {H}), np.float32))
    m = model_helper.ModelHelper(name="lstm")
    h_all, _, _, _ = rnn_cell.LSTM(m, "x", "lengths", ["h0", "c0"], {D}, {H}, scope="lstm")
    y = brew.fc(m, h_all, "y", dim_in={H}, dim_out=1, axis=2)
    d = m.net.SquaredL2Distance([m.net.Reshape([y], ["y2", "y_old"], shape=[-1, 1])[0],
                                 m.net.Reshape(["label"], ["l2", "l_old"], shape=[-1, 1])[0]], "d")
    loss = m.net.AveragedLoss(d, "loss")
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, {LR})
    return m
""".format(T=T, N=N, D=D, H=H, LR=LR)


def dslc_step(backend, reps, steps):
    from dslc import brew, model_helper, optimizer, rnn_cell, workspace
    from dslc.session import LocalSession
    scope = {}
    exec(MODEL, scope)
    workspace.ResetWorkspace()
    m = scope["build"](model_helper, rnn_cell, brew, optimizer, workspace, np)
    s = LocalSession(workspace.C.Workspace.current, backend=backend)
    s.run(m.param_init_net)
    s.run(m.net)
    return median_time(lambda: [s.run(m.net) for _ in range(steps)], reps, time.perf_counter) / steps


CAFFE2 = """
import time, statistics, numpy as np
from caffe2.python import brew, model_helper, optimizer, rnn_cell, workspace
{model}
m = build(model_helper, rnn_cell, brew, optimizer, workspace, np)
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
    x = torch.from_numpy(rng.normal(size=(T, N, D)).astype(np.float32))
    label = torch.from_numpy(rng.normal(size=(T, N, 1)).astype(np.float32))
    lstm, fc = torch.nn.LSTM(D, H), torch.nn.Linear(H, 1)
    opt = torch.optim.SGD(list(lstm.parameters()) + list(fc.parameters()), lr=LR)

    def run():
        for _ in range(steps):
            opt.zero_grad()
            h, _ = lstm(x)
            loss = (0.5 * ((fc(h) - label) ** 2).reshape(-1, 1).sum(dim=1)).mean()
            loss.backward()
            opt.step()
    return median_time(run, reps, time.perf_counter) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
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
        figures["PyTorch nn.LSTM"] = t
    base = figures["dslc numba"]
    print(f"LSTM T={T} N={N} D={D} H={H}, one training step")
    print(f"{'ms per step':30s} {'ms':>8s} {'vs dslc numba':>14s}")
    for name, sec in figures.items():
        print(f"{name:30s} {sec * 1e3:8.3f} {sec / base:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
