"""Per-call cost of workspace.RunNet of a small created net: dslc against the real Caffe2.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/runnet.py [--calls 20000]

Caffe2 programs call RunNet once per iteration from Python (its tutorials' training
loops do), so the per-call cost adds to every step. The net: three ops on 16 floats
(Add, Mul, Relu), created once with CreateNet, then run by name `--calls` times; the
figure is the median of 5 timings, in this one run, in microseconds per call.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """
import time, statistics, numpy as np
from {package} import core, workspace
workspace.ResetWorkspace()
workspace.FeedBlob("x", np.linspace(-1, 1, 16).astype(np.float32))
workspace.FeedBlob("w", np.full(16, 0.5, np.float32))
net = core.Net("small")
net.Add(["x", "w"], "a")
net.Mul(["a", "w"], "b")
net.Relu(["b"], "y")
workspace.CreateNet(net)
name = net.Proto().name
workspace.RunNet(name)
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range({calls}):
        workspace.RunNet(name)
    ts.append((time.perf_counter() - t0) / {calls})
print("PER_CALL", statistics.median(ts))
"""


def run(python, package, calls):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROGRAM.format(package=package, calls=calls))
    try:
        out = subprocess.run([python, f.name], capture_output=True, text=True, timeout=900)
    finally:
        os.unlink(f.name)
    got = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("PER_CALL")]
    if not got:
        raise SystemExit(f"{package} run failed:\n{out.stderr[-2000:]}")
    return got[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args(argv)
    figures = {"dslc (interp)": run(sys.executable, "dslc", args.calls)}
    c2 = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if c2.exists():
        figures["Caffe2"] = run(str(c2), "caffe2.python", args.calls)
    base = figures.get("Caffe2")
    print(f"{'RunNet of a created 3-op net':30s} {'us/call':>8s} {'vs Caffe2':>10s}")
    for name, sec in figures.items():
        ratio = f"{sec / base:9.2f}x" if base else "-"
        print(f"{name:30s} {sec * 1e6:8.2f} {ratio:>10s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
