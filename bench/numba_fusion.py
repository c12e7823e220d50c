"""The elementwise-fusion workload on the numba backend: y = (max(a*b + c, 0) * 0.5) - a.

Against, in the same run: the hand-fused numba kernel of ../shared/bench/ref_fusion.py
(serial, writing into a preallocated output), and numpy eager.
Targets: dslc at most 1.25x the hand-fused kernel, and at least 4x faster than numpy.
Usage: python bench/numba_fusion.py [n]
"""
from __future__ import annotations

import sys

import numba
import numpy as np

from dslc import workspace
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup
from timing import median_time  # noqa: E402  (bench/timing.py)


@numba.njit(nogil=True)
def hand_fused(a, b, c, out):
    for i in range(a.shape[0]):
        t = a[i] * b[i] + c[i]
        if t < 0:
            t = 0
        out[i] = t * np.float32(0.5) - a[i]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    for name, v in (("a", a), ("b", b), ("c", c), ("y", np.zeros_like(a))):
        workspace.FeedBlob(name, v)
    # a private task, as job files run: its intermediate blobs are dropped, y is kept
    with TaskGroup() as task, Task():
        t = ops.Mul(["a", "b"])
        t = ops.Add([t, "c"])
        t = ops.Relu(t)
        t = ops.Scale(t, scale=0.5)
        ops.Sub([t, "a"], ["y"])
    out = np.empty_like(a)

    def eager():
        t = a * b
        t = t + c
        t = np.maximum(t, np.float32(0))
        t = t * np.float32(0.5)
        return t - a

    with LocalSession(backend="numba") as session:
        t_dsl = median_time(lambda: session.run(task))
        got = workspace.FetchBlob("y")
        summary = session.compile(task).program.summary()
    t_hand = median_time(lambda: hand_fused(a, b, c, out))
    t_np = median_time(eager)
    np.testing.assert_allclose(got, eager(), rtol=1e-6, atol=1e-6)
    print(f"fusion n={n}: numpy eager {t_np * 1e3:.2f} ms, hand-fused numba {t_hand * 1e3:.2f} ms, "
          f"dslc numba {t_dsl * 1e3:.2f} ms (kernels fused: {summary['kernels fused']})")
    print(f"  dslc / hand-fused = {t_dsl / t_hand:.2f}x (target <= 1.25x); "
          f"numpy / dslc = {t_np / t_dsl:.1f}x (target >= 4x)")


if __name__ == "__main__":
    main()
