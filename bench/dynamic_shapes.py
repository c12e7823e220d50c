"""Nets fed other sizes on every call: dslc (interp, numba) against the real Caffe2.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/dynamic_shapes.py [--calls 300] [--iters 60]
        [--rounds 3] [--parts sls,shaped,script]

Three workloads, each run in a fresh process per system, one thread each:

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
- DLRM's own Caffe2 script (../shared/third_party/dlrm/dlrm_s_caffe2.py), medium size, as
  issue 40 runs it: `dslc exec dlrm_s_caffe2.py` against `python dlrm_s_caffe2.py` on the real
  Caffe2, with SCRIPT_ARGS below (three [100000, 16] tables, bottom MLP 13-256-64-16, top
  22-256-64-1, batch 128, 200 batches). The figure is the script's own --print-time (ms per
  iteration: feeding the batch and RunNet), the mean of its four 50-batch windows, which
  include dslc's compiles. numba runs as users get it (`dslc numba`: the default hot mode,
  whatever DSLC_NUMBA_COMPILE says) and with every region compiled when the net is created
  (`numba (now)`). One thread each (the thread-count variables), not pinned: numba's
  background compiles may use another core, as they would for a user. The systems run in
  turn, `--rounds` times, and the table gives the
  medians and the median of each round's ratio to Caffe2. The four windows' losses must equal
  Caffe2's (1e-4 relative). Caffe2's side needs tqdm and scikit-learn: put them on
  CAFFE2_PYTHONPATH (e.g. `/tmp/caffe2-venv/bin/pip install --target DIR tqdm
  "scikit-learn<1.3"`, then CAFFE2_PYTHONPATH=DIR); dslc's venv needs torch, tqdm, scikit-learn.

Caffe2 runs when its venv is there (CAFFE2_VENV, default /tmp/caffe2-venv); its programs are
the same text with `dslc` imports turned into `caffe2.python` ones. All figures come from this
one run; ratios are to the same system's fixed-size figure (SLS) or to Caffe2 (DLRM).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORES = os.sched_getaffinity(0)  # (before embedding pins this process to one)
sys.path.insert(0, str(HERE))
from embedding import blas_kernel  # noqa: E402  (one thread: it sets the thread counts, pins a core)

EXAMPLE = HERE.parent / "examples" / "dlrm.py"
SCRIPT_ARGS = ["--arch-embedding-size", "100000-100000-100000", "--arch-sparse-feature-size", "16",
               "--arch-mlp-bot", "13-256-64-16", "--arch-mlp-top", "22-256-64-1", "--mini-batch-size", "128",
               "--num-batches", "200", "--print-freq", "50", "--print-time"]
WINDOW = re.compile(r"Finished training it \d+/\d+ of epoch \d+, ([0-9.]+) ms/it, loss ([0-9.]+)")

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
    # numba: the functions each variant compiled, loaded from the kernel cache and reused from
    # a variant compiled before (the same generated text) by the end of the run, "?" for a
    # variant compiled with a dim unknown
    kernels = []
    for variants in session._variants.values():
        for v in variants:
            stats = getattr(v.program, "stats", None)
            if stats is not None and hasattr(stats, "cache_hits"):
                n = f"{{stats.compiled}}/{{stats.cache_hits}}/{{stats.reused}}"
                generic = any(d is None for t in v.deps.values() for d in (getattr(t, "shape", None) or ()))
                kernels.append(("?" if generic else "static") + ":" + n)
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


def dlrm_script() -> Path | None:
    """DLRM's script in ../shared beside the checkout (or beside the main checkout of a worktree)."""
    root = HERE.parent
    git = root / ".git"
    if git.is_file() and git.read_text().startswith("gitdir:"):
        root = Path(git.read_text().split(":", 1)[1].strip()).parents[2]
    path = root.parent / "shared" / "third_party" / "dlrm" / "dlrm_s_caffe2.py"
    return path if path.exists() else None


def run_script(command, env) -> dict:
    """(ms/it, losses) of one DLRM script run: its windows' --print-time figures and losses."""
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=cwd,
                              env={**os.environ, **env}, preexec_fn=lambda: os.sched_setaffinity(0, CORES))
    windows = WINDOW.findall(done.stdout)
    if done.returncode != 0 or not windows:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {"ms": statistics.mean(float(ms) for ms, _ in windows), "losses": [float(v) for _, v in windows]}


def script_part(caffe2, rounds: int) -> None:
    script = dlrm_script()
    if script is None:
        print("\nDLRM's script: not found (../shared/third_party/dlrm/dlrm_s_caffe2.py); skipped")
        return
    dslc = str(Path(sys.executable).parent / "dslc")
    # numba as a user gets it (hot: regions compile once they have spent a second of CPU,
    # in the background, inside the windows), and with every region compiled at CreateNet
    # (`now`: the kernel cache is warm from the second round on)
    runs = [("dslc interp", [dslc, "exec", str(script), *SCRIPT_ARGS], {"DSLC_BACKEND": "interp"}),
            ("dslc numba", [dslc, "exec", str(script), *SCRIPT_ARGS], {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "hot"}),
            ("numba (now)", [dslc, "exec", str(script), *SCRIPT_ARGS], {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now"})]
    if caffe2 is not None:
        extra = os.environ.get("CAFFE2_PYTHONPATH", "")
        runs.insert(0, ("Caffe2", [str(caffe2), str(script), *SCRIPT_ARGS], {"PYTHONPATH": extra}))
    print(f"\nDLRM's dlrm_s_caffe2.py, medium, {SCRIPT_ARGS[SCRIPT_ARGS.index('--num-batches') + 1]} batches:"
          f" its own --print-time, ms per iteration ({rounds} rounds, systems in turn; load average "
          f"{os.getloadavg()[0]:.1f} at the start)")
    got = {label: [] for label, _, _ in runs}
    for k in range(rounds):
        for label, command, env in runs:
            got[label].append(run_script(command, env))
        print(f"  round {k + 1}: " + ", ".join(f"{label} {got[label][-1]['ms']:.2f}" for label in got), flush=True)
    base = got.get("Caffe2")
    print(f"{'':14s} {'median ms/it':>13s} {'median ratio to Caffe2':>23s} {'loss vs Caffe2 (max rel)':>25s}")
    for label, figures in got.items():
        ratio = diff = "-"
        if base and label != "Caffe2":
            ratio = f"{statistics.median(f['ms'] / b['ms'] for f, b in zip(figures, base)):.2f}x"
            diff = f"{max(abs(a - b) / abs(b) for f in figures for a, b in zip(f['losses'], base[0]['losses'])):.1e}"
        print(f"{label:14s} {statistics.median(f['ms'] for f in figures):13.2f} {ratio:>23s} {diff:>25s}")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end; 'dslc numba' is the default, hot mode)")


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
    ap.add_argument("--rounds", type=int, default=3, help="runs of DLRM's script per system")
    ap.add_argument("--parts", default="sls,shaped,script", help="which workloads: sls, shaped, script")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    c2 = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    who = systems(c2 if c2.exists() else None)
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; one thread")
    if "sls" in parts:
        sls_part(who, args.calls)
    if "shaped" in parts:
        shaped_part(who, args.iters)
    if "script" in parts:
        script_part(c2 if c2.exists() else None, args.rounds)
    return 0


def sls_part(who, calls: int) -> None:
    print(f"\nOne-op SparseLengthsSum net, us per RunNet ({calls} x 5 calls per figure)")
    print(f"{'':14s} {'fixed':>9s} {'changing':>9s} {'changing/fixed':>15s} {'compiles (changing)':>20s}")
    for label, python, package, env in who:
        fixed = run(python, SLS.format(package=package, mode="fixed", calls=calls), env)
        moving = run(python, SLS.format(package=package, mode="changing", calls=calls), env)
        compiles = str(moving.get("compiles", "-"))
        print(f"{label:14s} {fixed['per_call'] * 1e6:9.1f} {moving['per_call'] * 1e6:9.1f} "
              f"{moving['per_call'] / fixed['per_call']:14.2f}x {compiles:>20s}")


def shaped_part(who, iters: int) -> None:
    print(f"\nDLRM-shaped training, bags of 1-10 ids per sample, ms per iteration ({iters} iterations)")
    figures = {label: run(python, DLRM.format(package=package, example=str(EXAMPLE), iters=iters), env)
               for label, python, package, env in who}
    base = figures.get("Caffe2")
    print(f"{'':14s} {'ms/iter':>9s} {'vs Caffe2':>10s} {'compiles':>9s} {'loss vs Caffe2 (max rel)':>25s}  "
          "numba functions per variant (compiled/from cache/reused)")
    for label, got in figures.items():
        ratio = f"{got['per_iter'] / base['per_iter']:9.2f}x" if base else "-"
        diff = "-"
        if base and label != "Caffe2":
            diff = f"{max(abs(a - b) / abs(b) for a, b in zip(got['losses'], base['losses'])):.1e}"
        print(f"{label:14s} {got['per_iter'] * 1e3:9.2f} {ratio:>10s} {str(got.get('compiles', '-')):>9s} {diff:>25s}  "
              f"{got.get('kernels') or '-'}")


if __name__ == "__main__":
    sys.exit(main())
