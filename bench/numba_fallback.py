"""numba against interp on whole deploy models, with and without each region's race (issue 41).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/numba_fallback.py \
        [--models resnet18,...] [--batches 1,16] [--size 224] [--warm 8] [--reps 3] [--rounds 1]

bench/inference.py's models and runner (FeedBlob, CreateNet, RunNet timed), one process per
engine and model, engines interleaved within each round: interp; numba compiled before the
run with each region racing the interpreter's code (DSLC_NUMBA_TRIAL_RUNS=3, the default:
backends/numba/trial.py) and without (=0: every compiled region kept); numba as it runs by
default (compiled when hot). Each net runs ``--warm`` times before ``--reps`` timed runs, so
that the races (3 + 1 compiled runs, 3 interpreted) are decided before the timing. Prints the
median time per engine and its ratio to interp's (the median over rounds of the per-round
ratios). One core, one BLAS thread; numpy's BLAS kernel is printed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

import inference
from embedding import blas_kernel
from timing import one_core

ENGINES = [("interp", {"DSLC_BACKEND": "interp"}),
           ("numba race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "3"}),
           ("numba no race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "0"}),
           ("numba hot", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "hot"})]


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
    warm = "        workspace.RunNet(net)\n        ts = []"
    program = inference.RUNNER.format(package="dslc", models=inference.MODELS)
    assert warm in program
    program = program.replace(warm, f"        for _ in range({args.warm}): workspace.RunNet(net)\n        ts = []")
    batches = [int(b) for b in args.batches.split(",")]
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; one core, one thread; images {args.size}x{args.size}; "
          f"{args.warm} warm runs, median of {args.reps}")
    times: dict = {}
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for name, env in ENGINES:
                spec = dict(models=[model], batches=batches, size=args.size, reps=args.reps)
                with tempfile.TemporaryDirectory() as folder:
                    got = inference.run_engine(name, sys.executable, env, program, spec, folder)
                for (m, b), t in got.items():
                    times.setdefault((m, b), {}).setdefault(name, []).append(t)
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
