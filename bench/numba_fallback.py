"""numba against interp on whole deploy models, with and without each region's race (issue 41).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/numba_fallback.py \
        [--models resnet18,...] [--batches 1,16] [--size 224] [--warm 8] [--reps 3] [--rounds 1]

bench/inference.py's brew models run as deploy models (a Predictor over frozen weights,
bench/weights_once.py's), one worker process per engine and model (bench/inference.py's), engines interleaved: interp; numba compiled before the
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
import sys
import tempfile

import inference_engines as programs
from embedding import blas_kernel
from inference import Worker
from timing import one_core

ENGINES = [("interp", {"DSLC_BACKEND": "interp"}),
           ("numba race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "3"}),
           ("numba no race", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "now", "DSLC_NUMBA_TRIAL_RUNS": "0"}),
           ("numba hot", {"DSLC_BACKEND": "numba", "DSLC_NUMBA_COMPILE": "hot"})]

# One engine's worker: bench/inference_engines.py's SERVE (driven by bench/inference.py's
# Worker) over bench/weights_once.py's Predictor of the brew model a folder's meta.json names,
# its weights frozen (as a deploy model's init net leaves them).
LOAD = r"""
import sys
sys.path.insert(0, {bench!r})
import numpy as np
import weights_once


def load(folder, meta):
    m, out = weights_once.brew_model(meta["model"], meta["size"])
    p = weights_once.predictor(weights_once.params(m, np.random.default_rng(0)), m.net.Proto(), out, True)
    return lambda x: p.run([x])[0]
"""


def run_engine(name, env, model, batches, args, top) -> dict:
    """{batch: median seconds} of one engine's process on ``model`` (nothing for a batch that failed)."""
    import numpy as np
    folder = os.path.join(top, model)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(dict(model=model, size=args.size), f)
    bench = os.path.dirname(os.path.abspath(__file__))
    w = Worker(name, sys.executable, env, LOAD.format(bench=bench) + programs.SERVE, tempfile.mkdtemp(dir=top))
    out = {}
    for b in batches:
        data = os.path.join(top, f"data_{b}.npy")
        np.save(data, np.random.default_rng(b).standard_normal((b, 3, args.size, args.size)).astype(np.float32))
        answer = w.ask(dict(cmd="load", folder=folder, data=data, out=os.path.join(w.folder, f"{model}_{b}.npy")))
        if args.warm > 2 and "error" not in answer:  # (the load ran it twice)
            answer = w.ask(dict(cmd="time", reps=args.warm - 2))
        if "error" not in answer:
            answer = w.ask(dict(cmd="time", reps=args.reps))
        if "error" in answer:
            print(f"  {model} b{b} {name}: {answer['error']}", flush=True)
            break
        out[b] = statistics.median(answer["times"])
    w.close()
    return out


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
    with tempfile.TemporaryDirectory(prefix="dslc-fallback-") as top:
        for _ in range(args.rounds):
            for model in args.models.split(","):
                for name, env in ENGINES:
                    for b, t in run_engine(name, env, model, batches, args, top).items():
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
