"""How compile time grows with job size: trace + lower + the default pass pipeline.

Generates jobs of about 1k, 10k and 100k recorded ops (elementwise chains on small
arrays, counted loops with accumulators, If/Else chains), times each phase, and
prints microseconds per op and the 100k/10k time ratio. Then the same sizes as one
straight-line task (a chain of Mul and Add on a small array), through a session's
whole compile: trace, lower, passes and the interp backend's code generation (one
Python function per region: the case where CPython's own compile() can grow faster
than the code).
Targets: at most 20 us per op; 100k at most 11x 10k (no quadratic pass).

Usage: python bench/compile_scaling.py [--sizes 1000,10000,100000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from dslc import workspace
from dslc.trace import names
from dslc.ir.gcpause import paused
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
from dslc.lower import lower_group
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, final_output

UNIT_OPS = 16  # recorded ops per generated unit (counted by the generator below)


def build(n_ops: int):
    """A task of about ``n_ops`` recorded ops; returns (group, recorded op count)."""
    group = TaskGroup()
    with group, Task():
        acc = ops.Const(0)
        vec = ops.Const(np.arange(16, dtype=np.float32))
        recorded = 2
        for k in range(max(1, n_ops // UNIT_OPS)):
            recorded += unit(k, acc, vec)
        final_output(acc)
        final_output(vec)
    return group, recorded


def unit(k: int, acc, vec) -> int:
    """One unit: an elementwise chain, a loop with an If/Else inside. Returns its op count."""
    a = ops.Mul([vec, ops.Const(np.float32(1.5))])             # 2 ops
    b = ops.Add([a, vec])                                      # 1
    ops.Sub([b, a], [vec])                                     # 1
    with ops.loop(2) as loop:                                  # the loop's count
        step = ops.Add([loop.iter(), ops.Const(k % 7)])        # 2
        with ops.If(ops.GT([step, ops.Const(3)])) as c:        # 2 (+ the If)
            ops.Add([acc, step], [acc])                        # 1
        with c.Else():
            ops.Sub([acc, ops.Const(1)], [acc])                # 2
    ops.Add([acc, ops.Const(k)], [acc])                        # 2
    return 2 + 1 + 1 + 2 + 2 + 1 + 2 + 2 + 3                   # + loop, If, Else records


def measure(n_ops: int) -> dict:
    """Time each phase the way `dslc run` does them (collector paused while tracing and compiling)."""
    names.reset()
    with paused():
        t0 = time.perf_counter()
        group, recorded = build(n_ops)
        t1 = time.perf_counter()
        module = lower_group(group)
        t2 = time.perf_counter()
        PassManager(DEFAULT_PIPELINE).run(module)
        t3 = time.perf_counter()
    ir_ops = sum(1 for _ in module.walk())
    return {"ops": recorded, "ir_ops": ir_ops, "trace": t1 - t0, "lower": t2 - t1, "passes": t3 - t2,
            "total": t3 - t0}


def straight(n_ops: int) -> dict:
    """One task of ``n_ops`` ops in a line, compiled by a session on the interp backend."""
    names.reset()
    with paused():
        t0 = time.perf_counter()
        group = TaskGroup()
        with group, Task():
            x = ops.Const(np.arange(8, dtype=np.float32))
            c = ops.Const(np.float32(1.001))
            for _ in range(n_ops // 2):
                x = ops.Add([ops.Mul([x, c]), x])
            final_output(x)
        t1 = time.perf_counter()
    LocalSession(workspace.Workspace(), backend="interp").compile(group)
    t2 = time.perf_counter()
    return {"ops": 2 + 2 * (n_ops // 2), "trace": t1 - t0, "compile": t2 - t1, "total": t2 - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    rows = {}
    print(f"{'ops':>8} {'IR ops':>8} {'trace s':>8} {'lower s':>8} {'passes s':>9} {'total s':>8} {'us/op':>7}")
    for n in (int(x) for x in args.sizes.split(",")):
        r = rows[n] = measure(n)
        print(f"{r['ops']:>8} {r['ir_ops']:>8} {r['trace']:8.3f} {r['lower']:8.3f} {r['passes']:9.3f} "
              f"{r['total']:8.3f} {1e6 * r['total'] / r['ops']:7.1f}")
    if 10000 in rows and 100000 in rows:
        ratio = rows[100000]["total"] / rows[10000]["total"]
        print(f"100k/10k time ratio: {ratio:.1f} (target <= 11); "
              f"us/op at 100k: {1e6 * rows[100000]['total'] / rows[100000]['ops']:.1f} (target <= 20)")
    print("one straight-line task, compiled by a session (interp backend):")
    print(f"{'ops':>8} {'trace s':>8} {'compile s':>10} {'total s':>8} {'us/op':>7}")
    lines = {}
    for n in (int(x) for x in args.sizes.split(",")):
        r = lines[n] = straight(n)
        print(f"{r['ops']:>8} {r['trace']:8.3f} {r['compile']:10.3f} {r['total']:8.3f} "
              f"{1e6 * r['total'] / r['ops']:7.1f}")
    if 10000 in lines and 100000 in lines:
        print(f"100k/10k time ratio: {lines[100000]['total'] / lines[10000]['total']:.1f} (target <= 11)")


if __name__ == "__main__":
    main()
