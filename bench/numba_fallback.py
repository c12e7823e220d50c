"""numba against interp on whole deploy models, with and without each region's race (issue 41).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/numba_fallback.py \
        [--models resnet18,...] [--batches 1,16] [--size 224] [--warm 8] [--reps 3] [--rounds 1]

bench/inference.py's brew models run as deploy models (a Predictor over frozen weights,
bench/weights_once.py's), one process per engine and model, engines interleaved: interp; numba compiled before the
run with each region racing the interpreter's code (DSLC_NUMBA_TRIAL_RUNS=3, the default:
backends/numba/trial.py) and without (=0: every compiled region kept); numba as it runs by
default (compiled when hot). Each net runs ``--warm`` times before ``--reps`` timed runs, so
that the races (3 + 1 compiled runs, 3 interpreted) are decided before the timing. Prints the
median time per engine and its ratio to interp's (the median over rounds of the per-round
ratios). One core, one BLAS thread; numpy's BLAS kernel is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from embedding import blas_kernel
from timing import one_core

ENGINES = [("interp", {"DSLC_BACKEND": "interp"}),
           ("numba race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "3"}),
           ("numba no race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "0"}),
           ("numba hot", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "hot"})]

# One engine's run of one model: bench/weights_once.py's Predictor over frozen weights (as a
# deploy model's init net leaves them), warm runs, then the median of the timed ones.
RUNNER = r"""
import json, statistics, sys, time
import numpy as np
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["bench"])
import inference, weights_once
from dslc import brew, model_helper
builders = {}
exec(inference.MODELS, builders)
name = spec["model"]
m = model_helper.ModelHelper(name=name, init_params=True)
out = str(builders["build"](name, brew, m, spec["size"]))
rng = np.random.default_rng(0)
p = weights_once.predictor(weights_once.params(m, rng), m.net.Proto(), out, True)
for b in spec["batches"]:
    x = rng.standard_normal((b, 3, spec["size"], spec["size"])).astype(np.float32)
    for _ in range(spec["warm"]):
        p.run([x])
    ts = []
    for _ in range(spec["reps"]):
        t = time.perf_counter(); p.run([x]); ts.append(time.perf_counter() - t)
    print("TIME", b, statistics.median(ts), flush=True)
"""


def run_engine(env, spec) -> dict:
    """{batch: seconds} of one engine's process (nothing for a batch that failed)."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(spec)], capture_output=True, text=True,
                          timeout=3600, env=dict(os.environ, **env))
    if proc.returncode:
        print(f"  {env}: {proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else proc.returncode}")
    return {int(b): float(t) for _, b, t in (line.split() for line in proc.stdout.splitlines()
                                              if line.startswith("TIME "))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenetv2,shufflenet,squeezenet,vgg11,alexnet")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    one_core()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"  # (the engines' processes inherit them)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; one core, one thread; images {args.size}x{args.size}; "
          f"{args.warm} warm runs, median of {args.reps}")
    times: dict = {}
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for name, env in ENGINES:
                spec = dict(model=model, batches=batches, size=args.size, warm=args.warm, reps=args.reps,
                            bench=os.path.dirname(os.path.abspath(__file__)))
                for b, t in run_engine(env, spec).items():
                    times.setdefault((model, b), {}).setdefault(name, []).append(t)
    print(f"{'model':12s} {'batch':>5s} " + " ".join(f"{n:>22s}" for n, _ in ENGINES) + "   (ms; ratio to interp)")
    for (m, b), row in times.items():
        base = row.get("interp")
        cells = []
        for n, _ in ENGINES:
            t = row.get(n)
            if not t:
                cells.append("-")
                continue
            ratio = statistics.median(x / y for x, y in zip(t, base)) if base else float("nan")
            cells.append(f"{statistics.median(t) * 1e3:9.1f} {ratio:5.2f}x")
        print(f"{m:12s} {b:5d} " + " ".join(f"{c:>22s}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
