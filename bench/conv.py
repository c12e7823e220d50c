"""Convolutions: dslc's Conv and ConvGradient (windows in blocks) against the same
kernels cutting the whole batch's windows at once, and against the real Caffe2.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/conv.py [--reps 7]

For each shape, the forward and the gradient (dW, db, dX) of one convolution, on the
interpreter's windows (numpy) and numba's (compiled loops), with the window blocks as
dslc cuts them (conv_math.WINDOW_BLOCK_BYTES) and with one block for the whole batch
(what dslc did before; the reference of the ratios), the two timed in turns so that a
busy machine slows both alike; Caffe2's Conv and ConvGradient (RunOperatorOnce, in its
venv) where it is installed. Peak memory of the windows: their bytes in one block against
the whole batch's. One thread everywhere (the process pinned to one core); each figure the
median of `--reps` runs in this one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedding import blas_kernel  # noqa: E402
from timing import one_core  # noqa: E402

one_core()

SHAPES = [  # (name, X, W, args)
    ("LeNet conv1", (64, 1, 28, 28), (20, 1, 5, 5), {}),
    ("LeNet conv2", (64, 20, 12, 12), (50, 20, 5, 5), {}),
    ("3x3, 64 ch, 56x56", (16, 64, 56, 56), (64, 64, 3, 3), {"pad": 1}),
    ("3x3, 4 groups", (16, 64, 28, 28), (64, 16, 3, 3), {"pad": 1, "group": 4}),
    ("15x15 kernel", (4, 8, 64, 64), (8, 8, 15, 15), {"pad": 7}),
]

CAFFE2 = """
import statistics, time, numpy as np
from caffe2.python import core, workspace
rng = np.random.default_rng(0)
for name, xs, ws, args in {shapes!r}:
    workspace.FeedBlob("x", rng.standard_normal(xs).astype(np.float32))
    workspace.FeedBlob("w", rng.standard_normal(ws).astype(np.float32))
    workspace.FeedBlob("b", np.zeros(ws[0], np.float32))
    args = dict(args, kernel=ws[2])  # (Caffe2 does not read the kernel off W)
    fwd = core.CreateOperator("Conv", ["x", "w", "b"], ["y"], **args)
    workspace.RunOperatorOnce(fwd)
    workspace.FeedBlob("dy", np.ones_like(workspace.FetchBlob("y")))
    grad = core.CreateOperator("ConvGradient", ["x", "w", "dy"], ["dw", "db", "dx"], **args)
    for op, what in ((fwd, "fwd"), (grad, "grad")):
        workspace.RunOperatorOnce(op)
        ts = []
        for _ in range({reps}):
            t = time.perf_counter(); workspace.RunOperatorOnce(op); ts.append(time.perf_counter() - t)
        print("CAFFE2", name, what, statistics.median(ts))
"""


def caffe2_times(reps):
    python = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if not python.exists():
        return {}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CAFFE2.format(shapes=SHAPES, reps=reps))
    try:
        out = subprocess.run([str(python), f.name], capture_output=True, text=True, timeout=1800).stdout
    finally:
        os.unlink(f.name)
    got = {}
    for line in out.splitlines():
        if line.startswith("CAFFE2 "):
            *name, what, sec = line.split()[1:]
            got[(" ".join(name), what)] = float(sec)
    return got


def in_turns(f, g, reps):
    """Median seconds of ``f`` and of ``g``, timed in turns after one call each."""
    f(), g()
    tf, tg = [], []
    for _ in range(reps):
        for fn, ts in ((f, tf), (g, tg)):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return statistics.median(tf), statistics.median(tg)


def whole_batch(f):
    """``f`` with one block for the whole batch's windows."""
    def run():
        from dslc.ir.ops import conv_math as C
        saved, C.WINDOW_BLOCK_BYTES = C.WINDOW_BLOCK_BYTES, 1 << 62
        try:
            return f()
        finally:
            C.WINDOW_BLOCK_BYTES = saved
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    from dslc.backends.numba import conv as numba_conv
    from dslc.ir.ops import conv_math as C
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; window block: {C.window_block_bytes() >> 20} MiB")
    caffe2 = caffe2_times(args.reps)
    rng = np.random.default_rng(0)
    print(f"{'ms (ratio to the whole batch at once)':40s} {'blocks':>18s} {'whole batch':>12s} {'Caffe2':>8s}"
          f"  windows: block / whole")
    for name, xs, ws, kw in SHAPES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        dy = np.ones_like(C.conv(x, w, **kw))
        g = C.geometry("Conv", x, kw, kernel=list(ws[2:]))
        whole = x.shape[1] * int(np.prod(g.kernel)) * int(np.prod(g.out)) * x.shape[0] * 4
        block = min(whole, C.window_block_bytes())
        for backend, windows in (("interp", C.NUMPY_WINDOWS), ("numba", numba_conv.WINDOWS)):
            for what, f in (("fwd", lambda: C.conv(x, w, windows=windows, **kw)),
                            ("grad", lambda: C.conv_grad(x, w, dy, windows=windows, **kw))):
                t_blocks, t_whole = in_turns(f, whole_batch(f), args.reps)
                c2 = caffe2.get((name, what))
                print(f"{name + ', ' + backend + ', ' + what:40s} {t_blocks * 1e3:9.2f} ({t_blocks / t_whole:4.2f}x) "
                      f"{t_whole * 1e3:12.2f} {'-' if c2 is None else f'{c2 * 1e3:8.2f}':>8s}"
                      f"  {block / 2**20:7.1f} / {whole / 2**20:7.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
