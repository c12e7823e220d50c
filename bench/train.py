"""Training speed: an MLP step on dslc (numba, interp) against PyTorch and the real Caffe2,
and a large FC forward+backward against numpy's own matmuls.

    python bench/train.py [--steps 200] [--fc-batch 256] [--threads 1] [--clock wall|cpu]

MLP: batch 256, 64-256-10, float32, FC-Relu-FC-SoftmaxWithLoss, plain SGD (lr 0.1).
dslc runs the step as its training net (AddGradientOperators + build_sgd), once per
session.run and as `steps` iterations of one execution step; PyTorch (if installed) runs
the same model eagerly (torch.nn.Linear, cross_entropy, backward, SGD), JAX (if installed) as one
jax.jit step (value_and_grad, SGD; XLA's own GEMMs) in a process pinned to one core; every library
gets `--threads` threads (default 1: BLAS threads that spin on a busy machine make
figures meaningless), set before numpy is imported, and with one thread the process (and
those it starts) is pinned to one core; the real Caffe2 (if /tmp/caffe2-venv exists, or
$CAFFE2_VENV) runs the same brew model in its own process and prints its figure, which
is read here. Every figure is a median of warmed-up runs in this one process (run.py's
timing); ratios are against the numba figure. `--clock cpu` times the CPU the process
used instead of the wall clock: on a machine other jobs load, wall times measure them
too (with one thread, CPU time is the work itself).

Wide MLP: 784-1024-1024-10, batch 256, SGD, against the floor of its matrix products run
by numpy in this process: as a job whose workspace goes away (8 products: nothing can read
the first layer's input gradient, so it is not computed), and in the session's workspace
(9: data_grad is a blob the user may fetch, as in Caffe2).

Large FC: Y = X W^T + b, then (dW, db, dX) from dY, for X [fc-batch, 4096], W [4096, 4096],
on dslc's numba backend, against numpy doing the same three products and the bias sum.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path



def _threads() -> str:
    """--threads N from the command line (read before numpy loads its BLAS)."""
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


THREADS = _threads()
CLOCK = time.process_time if "cpu" in sys.argv else time.perf_counter
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = THREADS  # (the Caffe2 process inherits them)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import median_time, one_core  # noqa: E402

if THREADS == "1":
    one_core()  # (one thread everywhere: dslc's thread pool, XLA's and Caffe2's too)

from dslc import brew, core, optimizer, workspace  # noqa: E402
from dslc.model_helper import ModelHelper  # noqa: E402
from dslc.net_builder import ops  # noqa: E402
from dslc.session import LocalSession  # noqa: E402
from dslc.task import Task, TaskGroup, WorkspaceType, final_output  # noqa: E402

B, D_IN, D_HID, D_OUT, LR = 256, 64, 256, 10, 0.1


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(B, D_IN)).astype(np.float32), rng.integers(0, D_OUT, B).astype(np.int32)


def dslc_mlp(backend, steps, passes=None):
    """(ms per step with one session.run per step, ms per step inside one execution step);
    ``passes="none"``: without the pass pipeline."""
    ws = workspace.Workspace()
    x, y = data()
    ws.feed_blob("data", x)
    ws.feed_blob("label", y)
    model = ModelHelper(name="mlp")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "r1")
    fc2 = brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT)
    _, loss = model.net.SoftmaxWithLoss([fc2, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, LR)
    s = LocalSession(ws, backend=backend, passes=passes)
    s.run(model.param_init_net)
    per_run = median_time(lambda: [s.run(model.net) for _ in range(20)], 5, CLOCK) / 20
    loop = core.execution_step("train", [model.net], num_iter=steps)
    in_plan = median_time(lambda: s.run(loop), 5, CLOCK) / steps
    return per_run * 1e3, in_plan * 1e3


def torch_mlp(threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    x, y = data()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(), torch.nn.Linear(D_HID, D_OUT))
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def steps():
        for _ in range(20):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(xt), yt).backward()
            opt.step()
    return median_time(steps, 5, CLOCK) / 20 * 1e3


JAX_SCRIPT = """
import os, sys, time, statistics
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})  # (XLA starts threads of its own: one core)
import numpy as np
import jax, jax.numpy as jnp
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=({B}, {D_IN})).astype(np.float32))
y = jnp.asarray(rng.integers(0, {D_OUT}, {B}).astype(np.int32))
rng = np.random.default_rng(1)
params = [jnp.asarray(rng.normal(size=s).astype(np.float32) * 0.1)
          for s in (({D_IN}, {D_HID}), ({D_HID},), ({D_HID}, {D_OUT}), ({D_OUT},))]

def loss(p, x, y):
    logits = jnp.maximum(x @ p[0] + p[1], 0) @ p[2] + p[3]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

@jax.jit
def step(p, x, y):
    value, grads = jax.value_and_grad(loss)(p, x, y)
    return [w - {LR} * g for w, g in zip(p, grads)], value

def steps(p):
    for _ in range(20):
        p, value = step(p, x, y)
    value.block_until_ready()
    return p
params = steps(params)  # (compiles)
ts = []
for _ in range(5):
    t = time.{clock}()
    params = steps(params)
    ts.append((time.{clock}() - t) / 20)
print("JAX_MS", statistics.median(ts) * 1e3)
"""


def jax_mlp():
    """The same step as one jax.jit function (value_and_grad of the mean cross-entropy, SGD),
    in a process of its own pinned to one core (XLA runs threads of its own)."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    out = subprocess.run([sys.executable, "-c", JAX_SCRIPT.format(B=B, D_IN=D_IN, D_HID=D_HID, D_OUT=D_OUT, LR=LR,
                                                                   clock=CLOCK.__name__)],
                         capture_output=True, text=True, timeout=600).stdout
    for line in out.splitlines():
        if line.startswith("JAX_MS"):
            return float(line.split()[1])
    return None


CAFFE2_SCRIPT = """
import time, statistics, numpy as np
from caffe2.python import brew, model_helper, optimizer, workspace
rng = np.random.default_rng(0)
workspace.FeedBlob("data", rng.normal(size=({B}, {D_IN})).astype(np.float32))
workspace.FeedBlob("label", rng.integers(0, {D_OUT}, {B}).astype(np.int32))
m = model_helper.ModelHelper(name="mlp")
h = brew.relu(m, brew.fc(m, "data", "fc1", dim_in={D_IN}, dim_out={D_HID}), "r1")
fc2 = brew.fc(m, h, "fc2", dim_in={D_HID}, dim_out={D_OUT})
_, loss = m.net.SoftmaxWithLoss([fc2, "label"], ["softmax", "loss"])
m.AddGradientOperators([loss])
optimizer.build_sgd(m, {LR})
workspace.RunNetOnce(m.param_init_net)
workspace.CreateNet(m.net)
workspace.RunNet(m.net.Proto().name, 20)
ts = []
for _ in range(5):
    t = time.{clock}()
    workspace.RunNet(m.net.Proto().name, 20)
    ts.append((time.{clock}() - t) / 20)
print("CAFFE2_MS", statistics.median(ts) * 1e3)
"""


def caffe2_mlp():
    python = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if not python.exists():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CAFFE2_SCRIPT.format(B=B, D_IN=D_IN, D_HID=D_HID, D_OUT=D_OUT, LR=LR, clock=CLOCK.__name__))
    try:
        out = subprocess.run([str(python), f.name], capture_output=True, text=True, timeout=600).stdout
    finally:
        os.unlink(f.name)
    for line in out.splitlines():
        if line.startswith("CAFFE2_MS"):
            return float(line.split()[1])
    return None


def large_fc(batch):
    """(dslc numba ms, numpy ms) for FC forward + FCGradient at [batch, 4096] x [4096, 4096]."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(batch, 4096)).astype(np.float32)
    w = (rng.normal(size=(4096, 4096)) * 0.01).astype(np.float32)
    b = np.zeros(4096, np.float32)
    dy = rng.normal(size=(batch, 4096)).astype(np.float32)
    ws = workspace.Workspace()
    for k, v in (("x", x), ("w", w), ("b", b), ("y_grad", dy)):
        ws.feed_blob(k, v)
    net = core.Net("fc")
    net.FC(["x", "w", "b"], "y")
    net.AddGradientOperators({"y": "y_grad"})
    s = LocalSession(ws, backend="numba")
    t_dslc = median_time(lambda: s.run(net), 3, CLOCK)

    def numpy_fc():
        np.dot(x, w.T) + b
        np.dot(dy.T, x), dy.sum(axis=0), np.dot(dy, w)
    return t_dslc * 1e3, median_time(numpy_fc, 3, CLOCK) * 1e3


WIDE = (784, 1024, 1024, 10)


def wide_mlp(steps):
    """The 784-1024-1024-10 MLP (batch 256, SGD): (dslc numba ms per step in one plan run in
    the session's workspace, the same in a job whose workspace goes away, the floor of the
    8 matrix products a step needs (3 forward, 3 weight gradients, 2 input gradients), the
    same with the first layer's input gradient (Caffe2's FCGradient makes it, and dslc in
    a workspace someone may read: 9 products)), all on numpy's BLAS in this process."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(B, WIDE[0])).astype(np.float32)
    ws = workspace.Workspace()
    ws.feed_blob("data", x)
    ws.feed_blob("label", rng.integers(0, WIDE[-1], B).astype(np.int32))
    model = ModelHelper(name="wide")
    h = "data"
    for k in range(3):
        h = brew.fc(model, h, f"w{k}", dim_in=WIDE[k], dim_out=WIDE[k + 1])
        if k < 2:
            h = brew.relu(model, h, f"r{k}")
    _, loss = model.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, LR)
    # the steps as a job whose workspace goes away (as `dslc run` runs one), in a workspace of
    # its own: nothing can read data_grad there, so the first layer's FCGradient does not
    # compute it (in a workspace where data_grad already exists, the job's write would reach it)
    job_ws = workspace.Workspace()
    for name in ("data", "label"):
        job_ws.feed_blob(name, ws.fetch_blob(name))
    js = LocalSession(job_ws, backend="numba")
    js.run(model.param_init_net)
    with TaskGroup(workspace_type=WorkspaceType.PRIVATE) as job, Task():
        with ops.loop(steps):
            ops.net(model.net)
        final_output("loss")
    js.run(job)
    job_ms = median_time(lambda: js.run(job), 5, CLOCK) / steps * 1e3
    s = LocalSession(ws, backend="numba")
    s.run(model.param_init_net)
    loop = core.execution_step("train", [model.net], num_iter=steps)
    s.run(loop)
    dslc_ms = median_time(lambda: s.run(loop), 5, CLOCK) / steps * 1e3
    ws_ = [rng.normal(size=(WIDE[k + 1], WIDE[k])).astype(np.float32) for k in range(3)]
    acts = [x] + [rng.normal(size=(B, d)).astype(np.float32) for d in WIDE[1:]]

    def products(first_dx):
        for k in range(3):
            np.dot(acts[k], ws_[k].T)
        for k in (2, 1, 0):
            np.dot(acts[k + 1].T, acts[k])
            if k or first_dx:
                np.dot(acts[k + 1], ws_[k])
    need = median_time(lambda: products(False), 5, CLOCK) * 1e3
    with_dx = median_time(lambda: products(True), 5, CLOCK) * 1e3
    return dslc_ms, job_ms, need, with_dx


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--fc-batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="threads for BLAS, numba and PyTorch")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: elapsed time; cpu: the CPU time this process used (read before the parse)")
    args = p.parse_args(argv)
    threads = int(THREADS)
    # PyTorch first: dslc's backends keep freed memory in the process (runtime/memory.py),
    # which would change the allocator PyTorch meets
    torch_ms = torch_mlp(threads)
    numba_run, numba_loop = dslc_mlp("numba", args.steps)
    interp_run, interp_loop = dslc_mlp("interp", args.steps)
    bare_run, bare_loop = dslc_mlp("numba", args.steps, passes="none")
    rows = [("dslc numba, in one plan", numba_loop), ("dslc numba, a run per step", numba_run),
            ("dslc numba, no passes, in a plan", bare_loop), ("dslc numba, no passes, per run", bare_run),
            ("dslc interp, in one plan", interp_loop), ("dslc interp, a run per step", interp_run),
            (f"PyTorch eager ({threads} threads)", torch_ms), ("JAX jit (one core; XLA's GEMMs)", jax_mlp()),
            ("Caffe2 (own process)", caffe2_mlp())]
    print(f"MLP step, batch {B}, {D_IN}-{D_HID}-{D_OUT}, float32, SGD ({args.clock} ms per step; ratio to numba in one plan); "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    for name, ms in rows:
        print(f"  {name:32s} " + ("not installed" if ms is None else f"{ms:8.3f} ms  {ms / numba_loop:6.2f}x"))
    dslc_ms, job_ms, need, with_dx = wide_mlp(max(20, args.steps // 4))
    print(f"MLP step, batch {B}, {'-'.join(map(str, WIDE))}, ms per step: the 8 products it needs on numpy "
          f"{need:.2f}; 9 with the first layer's input gradient {with_dx:.2f}")
    print(f"  dslc numba, a job (private workspace)  {job_ms:8.2f} ms  {job_ms / need:5.2f}x the 8 products")
    print(f"  dslc numba, in the session's workspace {dslc_ms:8.2f} ms  {dslc_ms / with_dx:5.2f}x the 9 products")
    d, n = large_fc(args.fc_batch)
    print(f"Large FC [{args.fc_batch}, 4096] x [4096, 4096] forward+backward: dslc numba {d:.1f} ms, "
          f"numpy {n:.1f} ms, ratio {d / n:.2f}")


if __name__ == "__main__":
    main()
