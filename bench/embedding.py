"""An embedding model's training step: dslc (interp, numba) against the real Caffe2 and PyTorch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/embedding.py [--reps 5] [--steps 20]

Model: 4 tables of [100000, 16] float32; a batch of 256 bags of 8 ids per table (2048
rows read per table); each bag summed, the 4 sums concatenated (256 x 64), FC to 1,
squared distance to a label, averaged; plain SGD (lr 0.01). dslc and Caffe2 run the
same ops (Gather, ReduceSum over the bag, Concat, FC, SquaredL2Distance, AveragedLoss,
AddGradientOperators, build_sgd): Gather's gradient is sparse, so the update touches only
the rows read. Both also run the SparseLengthsSum form (a bag's gather and sum in one op); PyTorch (if installed) runs
EmbeddingBag(mode="sum", sparse=True) with torch.optim.SGD. Every library runs on one
thread (the process, and those it starts, pinned to one core); each figure is the median of `--reps` timings of `--steps` steps, in this one run;
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
from timing import median_time, one_core  # noqa: E402

one_core()  # (one thread everywhere: dslc's thread pool and the other processes' too)

TABLES, ROWS, DIM, BATCH, BAG, LR = 4, 100_000, 16, 256, 8, 0.01


def batch(seed=0):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, ROWS, size=(BATCH, BAG)).astype(np.int64) for _ in range(TABLES)]
    return ids, rng.normal(size=(BATCH, 1)).astype(np.float32)


def dslc_step(backend, reps, steps, sls=False):
    from dslc import brew, optimizer, workspace
    from dslc.model_helper import ModelHelper
    from dslc.session import LocalSession
    ws = workspace.Workspace()
    ids, label = batch()
    model = ModelHelper(name=f"emb_{backend}")
    pooled = []
    for t in range(TABLES):
        w = model.param_init_net.UniformFill([], f"emb{t}", shape=[ROWS, DIM], min=-0.1, max=0.1)
        model.AddParameter(w)
        if sls:
            ws.feed_blob(f"ids{t}", ids[t].reshape(-1))
            ws.feed_blob("lengths", np.full(BATCH, BAG, np.int32))
            pooled.append(model.net.SparseLengthsSum([w, f"ids{t}", "lengths"], f"pool{t}"))
        else:
            ws.feed_blob(f"ids{t}", ids[t])
            rows = model.net.Gather([w, f"ids{t}"], f"rows{t}")
            pooled.append(model.net.ReduceSum(rows, f"pool{t}", axes=[1], keepdims=0))
    ws.feed_blob("label", label)
    cat, _ = model.net.Concat(pooled, ["cat", "cat_dims"], axis=1)
    y = brew.fc(model, cat, "y", dim_in=TABLES * DIM, dim_out=1)
    d = model.net.SquaredL2Distance([y, "label"], "d")
    loss = model.net.AveragedLoss(d, "loss")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, LR)
    s = LocalSession(ws, backend=backend)
    s.run(model.param_init_net)
    return median_time(lambda: [s.run(model.net) for _ in range(steps)], reps, time.perf_counter) / steps


CAFFE2 = """
import time, statistics, sys, numpy as np
from caffe2.python import brew, model_helper, optimizer, workspace
TABLES, ROWS, DIM, BATCH, BAG, LR, REPS, STEPS = {TABLES}, {ROWS}, {DIM}, {BATCH}, {BAG}, {LR}, {reps}, {steps}
rng = np.random.default_rng(0)
ids = [rng.integers(0, ROWS, size=(BATCH, BAG)).astype(np.int64) for _ in range(TABLES)]
label = rng.normal(size=(BATCH, 1)).astype(np.float32)
for sls in (False, True):
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="emb")
    pooled = []
    for t in range(TABLES):
        w = m.param_init_net.UniformFill([], "emb%d" % t, shape=[ROWS, DIM], min=-0.1, max=0.1)
        m.params.append(w)
        if sls:
            workspace.FeedBlob("ids%d" % t, ids[t].reshape(-1))
            workspace.FeedBlob("lengths", np.full(BATCH, BAG, np.int32))
            pooled.append(m.net.SparseLengthsSum([w, "ids%d" % t, "lengths"], "pool%d" % t))
        else:
            workspace.FeedBlob("ids%d" % t, ids[t])
            rows = m.net.Gather([w, "ids%d" % t], "rows%d" % t)
            pooled.append(m.net.ReduceSum(rows, "pool%d" % t, axes=[1], keepdims=0))
    workspace.FeedBlob("label", label)
    cat, _ = m.net.Concat(pooled, ["cat", "cat_dims"], axis=1)
    y = brew.fc(m, cat, "y", dim_in=TABLES * DIM, dim_out=1)
    loss = m.net.AveragedLoss(m.net.SquaredL2Distance([y, "label"], "d"), "loss")
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, LR)
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net.Proto().name, STEPS)
    ts = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        workspace.RunNet(m.net.Proto().name, STEPS)
        ts.append((time.perf_counter() - t0) / STEPS)
    print("CAFFE2_SLS" if sls else "CAFFE2_GATHER", statistics.median(ts))
"""


def caffe2_steps(reps, steps) -> dict:
    python = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if not python.exists():
        return {}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CAFFE2.format(TABLES=TABLES, ROWS=ROWS, DIM=DIM, BATCH=BATCH, BAG=BAG, LR=LR, reps=reps,
                              steps=steps))
    try:
        out = subprocess.run([str(python), f.name], capture_output=True, text=True, timeout=900).stdout
    finally:
        os.unlink(f.name)
    return {k: float(v) for k, v in (line.split() for line in out.splitlines() if line.startswith("CAFFE2_"))}


def torch_step(reps, steps):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    ids, label = batch()
    bags = [torch.nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True) for _ in range(TABLES)]
    fc = torch.nn.Linear(TABLES * DIM, 1)
    opt = torch.optim.SGD([p for b in bags for p in b.parameters()] + list(fc.parameters()), lr=LR)
    ids_t, label_t = [torch.from_numpy(i) for i in ids], torch.from_numpy(label)

    def run():
        for _ in range(steps):
            opt.zero_grad()
            cat = torch.cat([b(i) for b, i in zip(bags, ids_t)], dim=1)
            loss = (0.5 * ((fc(cat) - label_t) ** 2).sum(dim=1)).mean()
            loss.backward()
            opt.step()
    return median_time(run, reps, time.perf_counter) / steps


def blas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl to see it)"
    info = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    return ", ".join(f"{i.get('architecture')} ({i.get('version')})" for i in info) or "not OpenBLAS"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    figures = {"dslc numba": dslc_step("numba", args.reps, args.steps),
               "dslc interp": dslc_step("interp", args.reps, args.steps),
               "dslc numba, SparseLengthsSum": dslc_step("numba", args.reps, args.steps, sls=True),
               "dslc interp, SparseLengthsSum": dslc_step("interp", args.reps, args.steps, sls=True)}
    c2 = caffe2_steps(args.reps, args.steps)
    if "CAFFE2_GATHER" in c2:
        figures["Caffe2, Gather + ReduceSum"] = c2["CAFFE2_GATHER"]
    if "CAFFE2_SLS" in c2:
        figures["Caffe2, SparseLengthsSum"] = c2["CAFFE2_SLS"]
    t = torch_step(args.reps, args.steps)
    if t is not None:
        figures["PyTorch EmbeddingBag(sparse=True)"] = t
    base = figures["dslc numba"]
    print(f"{'ms per step':40s} {'ms':>8s} {'vs dslc numba':>14s}")
    for name, sec in figures.items():
        print(f"{name:40s} {sec * 1e3:8.3f} {sec / base:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
