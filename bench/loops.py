"""The nested-loop workload (../shared/bench/ref_loops.py) written in the DSL.

Runs it on a backend and the plain-Python reference in one process and prints the
ratio. Usage: python bench/loops.py [n] [--backend interp]
"""
from __future__ import annotations

import argparse

from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, final_output
from timing import median_time  # noqa: E402  (bench/timing.py)


def loops_py(n):
    """The reference: the same program in plain Python."""
    total = large = small = tiny = 0
    hi, mid = 8 * n, 5 * n
    for i in range(n):
        outer = i * 10
        for j in range(i):
            val = outer + j
            if val >= hi:
                large += val
            elif val >= mid:
                small += val
            else:
                tiny += val
            total += val
    return total, large, small, tiny


def build(n):
    """The DSL program; returns the task and its four outputs."""
    with Task() as task:
        total, large, small, tiny = (ops.Const(0) for _ in range(4))
        with ops.loop(n) as outer_loop:
            outer = ops.Mul([outer_loop.iter(), ops.Const(10)])
            with ops.loop(outer_loop.iter()) as inner:
                val = ops.Add([outer, inner.iter()])
                with ops.If(ops.GE([val, ops.Const(8 * n)])) as c:
                    ops.Add([large, val], [large])
                with c.Elif(ops.GE([val, ops.Const(5 * n)])) as c:
                    ops.Add([small, val], [small])
                with c.Else():
                    ops.Add([tiny, val], [tiny])
                ops.Add([total, val], [total])
        outs = [final_output(b) for b in (total, large, small, tiny)]
    return task, outs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("n", type=int, nargs="?", default=300)
    ap.add_argument("--backend", default="interp")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    task, outs = build(args.n)
    with LocalSession(backend=args.backend) as session:
        t_dsl = median_time(lambda: session.run(task), args.reps)
        got = tuple(int(o.fetch()) for o in outs)
    want = loops_py(args.n)
    assert got == want, (got, want)
    t_py = median_time(lambda: loops_py(args.n), args.reps)
    print(f"loops n={args.n}: python {t_py * 1e3:.2f} ms, dslc {args.backend} {t_dsl * 1e3:.2f} ms, "
          f"ratio {t_dsl / t_py:.1f}x (target <= 15x for interp)")


if __name__ == "__main__":
    main()
