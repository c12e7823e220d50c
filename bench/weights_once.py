"""Weights laid out once: a Predictor's ConvFused with batch norm folded into W once per
weight array, against the same net scaling each output per call (issue 41).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/weights_once.py \
        [--models resnet18,...] [--batches 1,16] [--reps 5]

bench/inference.py's models, their parameters filled as there, run as a Predictor runs a
predict net (a private task: fuse-conv makes Conv -> SpatialBN -> Sum -> Relu one ConvFused)
twice in this one process: once with the weights frozen (read-only, as a deploy model's
init net leaves them: runtime/derived.py folds the norm into W at the first run and keeps
it), once with the same weights writeable (each call scales the convolution's output:
nothing guarantees the weights did not change). The two run interleaved, run by run, on
the backend DSLC_BACKEND names (default interp); printed: each median, the median of the
per-run ratios (frozen / writeable) and the two outputs' largest difference over the
largest output (float32 rounding: W s against (X W) s). One core, one BLAS thread.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import inference
import inference_engines
import numpy as np
from embedding import blas_kernel
from timing import one_core


def predictor(params, net, out, frozen):
    """A workspace.Predictor of ``net`` over ``params`` (copies: read-only where ``frozen``)."""
    import dslc.predictor.runner as R  # (the Predictor's own pieces: its workspace and private task)
    p = R.Predictor.__new__(R.Predictor)
    p._ws = R.Workspace()
    for k, v in params.items():
        v = v.copy()
        v.setflags(write=not frozen)
        p._ws.feed(k, v)
    p._net = R.Net(net)
    p.input_names, p.output_names = ["data"], [out]
    p._group = R.TaskGroup(workspace_type=R.WorkspaceType.PRIVATE)
    R.Task(step=p._net, outputs=p.output_names, group=p._group)
    return p


def params(m, rng):
    """bench/inference.py's fill (inference_engines.FILL: the one its Caffe2 export writes)."""
    fill: dict = {}
    exec(inference_engines.FILL, fill)
    return fill["fill_values"](m, rng)


def brew_model(name, size):
    """bench/inference.py's brew model ``name`` for ``size`` x ``size`` images: (the
    ModelHelper, its output blob)."""
    from dslc import brew, model_helper

    builders: dict = {}
    exec(inference.MODELS, builders)
    m = model_helper.ModelHelper(name=name, init_params=True)
    return m, str(builders["build"](name, brew, m, size))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenetv2,shufflenet,squeezenet,vgg11,alexnet")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    one_core()
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; one core, one thread; images {args.size}x{args.size}")
    for name in args.models.split(","):
        m, out = brew_model(name, args.size)
        rng = np.random.default_rng(0)
        weights = params(m, rng)
        ps = {k: predictor(weights, m.net.Proto(), out, k == "frozen") for k in ("frozen", "writeable")}
        for b in (int(b) for b in args.batches.split(",")):
            x = rng.standard_normal((b, 3, args.size, args.size)).astype(np.float32)
            outs = {k: p.run([x])[0] for k, p in ps.items()}  # (the first run folds)
            ts: dict = {k: [] for k in ps}
            for _ in range(args.reps):
                for k, p in ps.items():
                    t = time.perf_counter()
                    p.run([x])
                    ts[k].append(time.perf_counter() - t)
            ratio = statistics.median(f / w for f, w in zip(ts["frozen"], ts["writeable"]))
            diff = float(abs(outs["frozen"] - outs["writeable"]).max() / abs(outs["writeable"]).max())
            print(f"{name:12s} b{b:<3d} frozen {statistics.median(ts['frozen']) * 1e3:9.1f} ms  writeable "
                  f"{statistics.median(ts['writeable']) * 1e3:9.1f} ms  frozen/writeable {ratio:.3f}  "
                  f"outputs differ by {diff:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
