"""Nets fed other sizes on every call: dslc (interp, numba) against the real Caffe2.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/dynamic_shapes.py [--calls 300] [--iters 60]

Two workloads, each run in a fresh process per system, one thread each:

- The one-op SparseLengthsSum net: a [100000, 16] float32 table, 64 bags, ids fed fresh
  before every call, created once with CreateNet and run by name. "fixed": 1024 ids each
  call; "changing": a random count in [512, 1536) each call. The figure is RunNet's own time
  (the feeds are outside the clock), the median of 5 rounds of `--calls` calls, after 20 calls
  to warm up. dslc recompiles once when the count first changes (the id count becomes an
  unknown dim) and reuses that compile for every later count; the compiles it made over all
  the calls are printed.
- DLRM-shaped training (examples/dlrm.py's model: three [100000, 16] tables, bottom MLP
  13-256-64-16, top 22-256-64-1, batch 128, BCE, SGD), with bags of 1 to 10 ids drawn per
  sample, so every table's id count changes every iteration. The figure is the time per
  iteration (feeds, RunNet, fetching the loss) over `--iters` iterations after the first 5;
  the losses of every iteration are compared with Caffe2's (largest relative difference).

Caffe2 runs when its venv is there (CAFFE2_VENV, default /tmp/caffe2-venv); its programs are
the same text with `dslc` imports turned into `caffe2.python` ones. All figures come from this
one run; ratios are to the same system's fixed-size figure (SLS) or to Caffe2 (DLRM).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from embedding import blas_kernel  # noqa: E402  (one thread: it sets the thread counts, pins a core)

EXAMPLE = HERE.parent / "examples" / "dlrm.py"

SLS = """
import json, statistics, time, numpy as np
from {package} import core, workspace
rng = np.random.default_rng(0)
workspace.ResetWorkspace()
workspace.FeedBlob("table", rng.standard_normal((100000, 16)).astype(np.float32))

def feed(n):
    workspace.FeedBlob("ids", rng.integers(0, 100000, n).astype(np.int64))
    workspace.FeedBlob("lengths", rng.multinomial(n, np.full(64, 1 / 64)).astype(np.int32))

def size():
    return 1024 if {mode!r} == "fixed" else int(rng.integers(512, 1536))

feed(1024)
net = core.Net("sls")
net.SparseLengthsSum(["table", "ids", "lengths"], "out")
workspace.CreateNet(net)
for _ in range(20):
    feed(size())
    workspace.RunNet("sls")
rounds = []
for _ in range(5):
    spent = 0.0
    for _ in range({calls}):
        feed(size())
        t = time.perf_counter()
        workspace.RunNet("sls")
        spent += time.perf_counter() - t
    rounds.append(spent / {calls})
out = {{"per_call": statistics.median(rounds)}}
if {package!r} == "dslc":
    from dslc.driver import runner
    out["compiles"] = runner.current().session().compiles
print("RESULT", json.dumps(out))
"""

DLRM = """
import json, time, numpy as np
source = open({example!r}).read()
source = source.replace("from dslc.", "from {package}.").replace("from dslc import", "from {package} import")
m = {{"__name__": "dlrm_bench"}}
exec(compile(source, {example!r}, "exec"), m)
workspace = m["workspace"]
tables, bot, top = [100000] * 3, [13, 256, 64, 16], [22, 256, 64, 1]
model, _, _ = m["build"](tables, bot, top, "bce", "sgd", 0.1, 0)
data = list(m["batches"](tables, bot[0], 128, {iters} + 5, seed=1, bag=(1, 10)))
workspace.RunNetOnce(model.param_init_net)
name, losses, start = model.net.Proto().name, [], None
for k, feeds in enumerate(data):
    if k == 5:
        start = time.perf_counter()
    for blob, value in feeds.items():
        workspace.FeedBlob(blob, value)
    if k == 0:
        workspace.CreateNet(model.net)
    workspace.RunNet(name)
    losses.append(float(workspace.FetchBlob("loss")))
out = {{"per_iter": (time.perf_counter() - start) / {iters}, "losses": losses}}
if {package!r} == "dslc":
    from dslc.driver import runner
    session = runner.current().session()
    out["compiles"] = session.compiles
    # numba: the functions each variant compiled (or loaded from the cache) by the end of the
    # run, "?" for a variant compiled with a dim unknown (in the background ones count once done)
    kernels = []
    for variants in session._variants.values():
        for v in variants:
            stats = getattr(v.program, "stats", None)
            if stats is not None and hasattr(stats, "cache_hits"):
                n = stats.compiled + stats.cache_hits
                generic = any(d is None for t in v.deps.values() for d in (getattr(t, "shape", None) or ()))
                kernels.append(("?" if generic else "static") + ":" + str(n))
    out["kernels"] = " ".join(kernels)
print("RESULT", json.dumps(out))
"""


def run(python, program: str, env=None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        done = subprocess.run([python, f.name], capture_output=True, text=True, timeout=1800,
                              env={**os.environ, **(env or {})})
    finally:
        os.unlink(f.name)
    got = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not got:
        raise SystemExit(f"{python} {program[:60]!r}... failed:\n{done.stderr[-3000:]}")
    return json.loads(got[0])


def systems(caffe2):
    """(label, python, package, extra environment) of each system measured."""
    out = [("dslc interp", sys.executable, "dslc", {"DSLC_BACKEND": "interp"}),
           ("dslc numba", sys.executable, "dslc", {"DSLC_BACKEND": "numba"})]
    if caffe2 is not None:
        out.append(("Caffe2", str(caffe2), "caffe2.python", {}))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="RunNets per round of the SLS net (5 rounds)")
    ap.add_argument("--iters", type=int, default=60, help="timed DLRM iterations (after 5 untimed)")
    args = ap.parse_args(argv)
    c2 = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    who = systems(c2 if c2.exists() else None)
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; one thread")
    print(f"\nOne-op SparseLengthsSum net, us per RunNet ({args.calls} x 5 calls per figure)")
    print(f"{'':14s} {'fixed':>9s} {'changing':>9s} {'changing/fixed':>15s} {'compiles (changing)':>20s}")
    for label, python, package, env in who:
        fixed = run(python, SLS.format(package=package, mode="fixed", calls=args.calls), env)
        moving = run(python, SLS.format(package=package, mode="changing", calls=args.calls), env)
        compiles = str(moving.get("compiles", "-"))
        print(f"{label:14s} {fixed['per_call'] * 1e6:9.1f} {moving['per_call'] * 1e6:9.1f} "
              f"{moving['per_call'] / fixed['per_call']:14.2f}x {compiles:>20s}")
    print(f"\nDLRM-shaped training, bags of 1-10 ids per sample, ms per iteration ({args.iters} iterations)")
    figures = {label: run(python, DLRM.format(package=package, example=str(EXAMPLE), iters=args.iters), env)
               for label, python, package, env in who}
    base = figures.get("Caffe2")
    print(f"{'':14s} {'ms/iter':>9s} {'vs Caffe2':>10s} {'compiles':>9s} {'loss vs Caffe2 (max rel)':>25s}  "
          "numba functions per variant")
    for label, got in figures.items():
        ratio = f"{got['per_iter'] / base['per_iter']:9.2f}x" if base else "-"
        diff = "-"
        if base and label != "Caffe2":
            diff = f"{max(abs(a - b) / abs(b) for a, b in zip(got['losses'], base['losses'])):.1e}"
        print(f"{label:14s} {got['per_iter'] * 1e3:9.2f} {ratio:>10s} {str(got.get('compiles', '-')):>9s} {diff:>25s}  "
              f"{got.get('kernels') or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
