"""The nested-loop workload on the numba backend against the hand-written numba function.

Both are warmed first (compile excluded), then timed; prints the ratio.
Target: dslc numba at most 1.5x the hand-written function (n=20000).
Usage: python bench/numba_loops.py [n]
"""
from __future__ import annotations

import sys

import numba

from dslc.session import LocalSession

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from loops import build, loops_py  # noqa: E402
from timing import median_time  # noqa: E402  (bench/timing.py)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    hand = numba.njit(loops_py)
    task, outs = build(n)
    with LocalSession(backend="numba") as session:
        t_dsl = median_time(lambda: session.run(task))
        got = tuple(int(o.fetch()) for o in outs)
    t_hand = median_time(lambda: hand(n))
    assert got == tuple(int(x) for x in hand(n)), (got, hand(n))
    print(f"loops n={n}: hand-written numba {t_hand * 1e3:.1f} ms, dslc numba {t_dsl * 1e3:.1f} ms, "
          f"ratio {t_dsl / t_hand:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
