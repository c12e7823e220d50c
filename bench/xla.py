"""The xla backend against the references it must meet, one thread, ratios from one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/xla.py [--reps 5] [--only conv,lenet,mlp,resnet]

- conv: one 3x3 convolution, X [16, 64, 56, 56], 64 filters, pad 1, NCHW: dslc xla (a net of
  one Conv), jax.jit of lax.conv in NCHW (XLA's own figure), dslc interp (numpy im2col and
  OpenBLAS's GEMM), PyTorch eager (oneDNN).
- lenet: bench/lenet.py's LeNet training step (batch 64; conv, pool, conv, pool, FC, ReLU,
  FC, SoftmaxWithLoss, SGD) on dslc xla, numba and interp, and PyTorch eager; target
  xla <= 1.0x PyTorch.
- mlp: a 784-1024-1024-10 MLP step (batch 256, ReLU, SoftmaxWithLoss, SGD) on dslc xla
  against the same step written as one jax.jit function (value_and_grad, SGD), in
  interleaved rounds; target <= 1.1x. dslc's step computes no data_grad (dce defers it:
  the blob gets its value when read), as jax's computes no gradient of the data.
- resnet: a ResNet-18-style deploy net (dslc.models' create_resnext, 18 layers, one group
  of width 64, test-mode BN, 224x224, batch 1 and 16): one RunNet on xla, numba and
  interp; xla's output against interp's (relative to its largest value: at most 1e-4).

One thread everywhere: this process is pinned to one core (XLA, numpy's OpenBLAS, dslc's
threads); XLA gets --xla_cpu_multi_thread_eigen=false; PyTorch runs in the caffe2 side
venv (/tmp/caffe2-venv, or $CAFFE2_VENV: torch is not among dslc's dependencies) with
torch.set_num_threads(1), pinned to the same core. Each figure is the median of --reps
timings after a warm-up; every compile happens before timing. The BLAS kernel numpy uses is
printed (threadpoolctl): run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as above,
for the machine's own kernel. On a machine other jobs load, figures move between runs:
compare the ratios of one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedding import blas_kernel  # noqa: E402
from timing import median_time as _median_time, one_core  # noqa: E402

CORE = one_core()

from dslc import brew, core, model_helper, optimizer, workspace  # noqa: E402
from dslc.models import resnet  # noqa: E402
from dslc.session import LocalSession  # noqa: E402

CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = ["wall"]  # --clock: cpu is this process's CPU time (all its threads), for a machine other jobs load


def median_time(f, reps):
    return _median_time(f, reps, clock=CLOCK[clock[0]])


TORCH_PYTHON = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"


def _session(backend, feeds):
    ws = workspace.Workspace()
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    return ws, LocalSession(ws, backend=backend)


def _torch(script: str):
    """Run ``script`` with the side venv's torch, one thread, pinned to our core: the float
    it prints after TORCH, or None without that venv."""
    if not TORCH_PYTHON.exists():
        return None
    head = f"import os; os.sched_setaffinity(0, {{{CORE}}})\nimport torch; torch.set_num_threads(1)\n"
    timing = TORCH_TIMING.replace("perf_counter", "process_time") if clock[0] == "cpu" else TORCH_TIMING
    out = subprocess.run([str(TORCH_PYTHON), "-c", head + timing + textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=1800)
    got = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("TORCH ")]
    if not got:
        print(f"  (PyTorch failed: {out.stderr.strip().splitlines()[-1:]})")
    return got[0] if got else None


TORCH_TIMING = """
import statistics, time
def median(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)
"""


def report(title, figures, base):
    print(title)
    for name, sec in figures.items():
        if sec is None:
            print(f"  {name:44s} {'-':>10s}")
        else:
            print(f"  {name:44s} {sec * 1e3:10.3f} ms {sec / figures[base]:7.2f}x")


# ----------------------------------------------------------------------------- conv
def conv(reps):
    import jax
    from jax import lax
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 64, 56, 56)).astype(np.float32)
    w = rng.normal(size=(64, 64, 3, 3)).astype(np.float32) * 0.05
    b = np.zeros(64, np.float32)
    net = core.Net("conv")
    net.Conv(["x", "w", "b"], "y", kernel=3, pad=1)
    figures = {}
    outs = {}
    for backend in ("xla", "interp"):
        ws, s = _session(backend, {"x": x, "w": w, "b": b})
        s.run(net)
        outs[backend] = ws.fetch_blob("y")
        figures[f"dslc {backend}" + (" (numpy im2col + OpenBLAS GEMM)" if backend == "interp" else "")] = \
            median_time(lambda: s.run(net), reps)
    f = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)],
                                                      dimension_numbers=("NCHW", "OIHW", "NCHW")))
    figures["jax.jit lax.conv, NCHW"] = median_time(lambda: f(x, w).block_until_ready(), reps)
    figures["PyTorch eager (oneDNN)"] = _torch(f"""
        x = torch.randn(16, 64, 56, 56); conv = torch.nn.Conv2d(64, 64, 3, padding=1)
        with torch.no_grad():
            print("TORCH", median(lambda: conv(x), {reps}))
    """)
    diff = np.abs(outs["xla"] - outs["interp"]).max() / np.abs(outs["interp"]).max()
    report(f"3x3 conv, X [16, 64, 56, 56], 64 filters (xla vs interp: {diff:.1e} of the largest)", figures,
           "dslc xla")


# ----------------------------------------------------------------------------- LeNet
def lenet(reps, steps=5):
    from lenet import MODEL, B
    scope = {}
    exec(MODEL, scope)
    figures = {}
    for backend in ("xla", "numba", "interp"):
        workspace.ResetWorkspace()
        m = scope["build"](model_helper, brew, optimizer, workspace, np)
        s = LocalSession(workspace.C.Workspace.current, backend=backend)
        s.run(m.param_init_net)
        s.run(m.net)
        figures[f"dslc {backend}"] = median_time(lambda: [s.run(m.net) for _ in range(steps)], reps) / steps
    figures["PyTorch eager"] = _torch(f"""
        import numpy as np
        rng = np.random.default_rng(0)
        x = torch.from_numpy(rng.random(({B}, 1, 28, 28), dtype=np.float32))
        label = torch.from_numpy(rng.integers(0, 10, {B}).astype(np.int64))
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                              nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = nn.CrossEntropyLoss()
        def run():
            for _ in range({steps}):
                opt.zero_grad()
                loss_fn(model(x), label).backward()
                opt.step()
        print("TORCH", median(run, {reps}) / {steps})
    """)
    report(f"LeNet training step, batch {B} (target: dslc xla <= 1.0x PyTorch eager)", figures, "PyTorch eager"
           if figures["PyTorch eager"] else "dslc xla")


# ----------------------------------------------------------------------------- MLP
MLP_B, MLP_DIMS = 256, (784, 1024, 1024, 10)


def mlp(reps, steps=10):
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)
    x = rng.normal(size=(MLP_B, MLP_DIMS[0])).astype(np.float32)
    y = rng.integers(0, MLP_DIMS[-1], MLP_B).astype(np.int32)
    ws, s = _session("xla", {"data": x, "label": y})
    m = model_helper.ModelHelper(name="mlp")
    h = "data"
    for k, (a, b) in enumerate(zip(MLP_DIMS[:-1], MLP_DIMS[1:])):
        h = brew.fc(m, h, f"fc{k}", dim_in=a, dim_out=b)
        if k < len(MLP_DIMS) - 2:
            h = brew.relu(m, h, f"relu{k}")
    _, loss = m.net.SoftmaxWithLoss([h, "label"], ["softmax", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, 0.01)
    s.run(m.param_init_net)
    s.run(m.net)

    params = [jnp.asarray(ws.fetch_blob(f"fc{k}_{p}")) for k in range(3) for p in ("w", "b")]

    def loss_fn(p, x, y):
        h = x
        for k in range(3):
            h = h @ p[2 * k].T + p[2 * k + 1]
            if k < 2:
                h = jnp.maximum(h, 0)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], axis=1))

    @jax.jit
    def step(p, x, y):
        value, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return [w - 0.01 * g for w, g in zip(p, grads)], value

    xj, yj = jnp.asarray(x), jnp.asarray(y)
    state = [params]

    def run():
        p = state[0]
        for _ in range(steps):
            p, value = step(p, xj, yj)
        value.block_until_ready()
        state[0] = p

    def ours():
        for _ in range(steps):
            s.run(m.net)
    # interleaved rounds (a load that comes and goes hits both alike): each round times both,
    # the ratio is the median of the rounds' ratios
    rounds = [(median_time(ours, 1) / steps, median_time(run, 1) / steps) for _ in range(reps)]
    figures = {"dslc xla (one RunNet a step)": statistics.median(a for a, _ in rounds),
               "jax.jit step (value_and_grad, SGD)": statistics.median(b for _, b in rounds)}
    report(f"MLP {'-'.join(map(str, MLP_DIMS))} training step, batch {MLP_B} (target: <= 1.1x jax.jit; median of "
           f"the rounds' ratios {statistics.median(a / b for a, b in rounds):.3f})", figures,
           "jax.jit step (value_and_grad, SGD)")


# ----------------------------------------------------------------------------- ResNet-18
def resnet18(reps, batch):
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="r18", init_params=True)
    resnet.create_resnext(m, "data", 3, 1000, num_layers=18, num_groups=1, num_width_per_group=64, is_test=True,
                          no_loss=True)
    x = np.random.default_rng(0).normal(size=(batch, 3, 224, 224)).astype(np.float32)
    init = workspace.Workspace()
    LocalSession(init, backend="interp").run(m.param_init_net)
    params = {b: init.fetch_blob(b) for op in m.param_init_net.Proto().op for b in op.output}
    out = m.net.Proto().op[-1].output[0]
    figures, outs = {}, {}
    for backend in ("xla", "numba", "interp"):
        ws, s = _session(backend, dict(params, data=x))
        s.run(m.net)
        outs[backend] = np.array(ws.fetch_blob(out))
        figures[f"dslc {backend}"] = median_time(lambda: s.run(m.net), reps if backend == "xla" else max(1, reps // 2))
    rel = np.abs(outs["xla"] - outs["interp"]).max() / np.abs(outs["interp"]).max()
    report(f"ResNet-18-style deploy net, batch {batch}, 224x224, one RunNet (xla vs interp: {rel:.1e} of the "
           "largest output; <= 1e-4 wanted)", figures, "dslc xla")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="conv,lenet,mlp,resnet")
    ap.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                    help="wall time, or this process's CPU time (steadier where other jobs load the machine)")
    args = ap.parse_args(argv)
    clock[0] = args.clock
    import jax
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; jax {jax.__version__} on {jax.devices()[0]}; "
          f"XLA_FLAGS={os.environ['XLA_FLAGS']}; pinned to core {CORE}; clock: {args.clock}")
    only = set(args.only.split(","))
    t = time.perf_counter()
    if "conv" in only:
        conv(args.reps)
    if "lenet" in only:
        lenet(args.reps)
    if "mlp" in only:
        mlp(args.reps)
    if "resnet" in only:
        for batch in (1, 16):
            resnet18(args.reps, batch)
    print(f"({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
