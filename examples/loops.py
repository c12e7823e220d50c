"""Nested loops with If/Elif/Else (the seed's example_loop).

For i in 0..9 and j in 0..i-1, val = 10*i + j is added to `total` and to one of
`large` (val >= 80), `small` (val >= 50) or `tiny`.

Expected output (dslc run examples/loops.py):
    total = 2970
    large = 1514
    small = 1146
    tiny = 310
"""
from dslc.net_builder import ops
from dslc.task import Task, final_output


def build_job():
    with Task():
        total = ops.Const(0)
        total_large = ops.Const(0)
        total_small = ops.Const(0)
        total_tiny = ops.Const(0)
        with ops.loop(10) as loop:
            outer = ops.Mul([loop.iter(), ops.Const(10)])
            with ops.loop(loop.iter()) as inner:
                val = ops.Add([outer, inner.iter()])
                with ops.If(ops.GE([val, ops.Const(80)])) as c:
                    ops.Add([total_large, val], [total_large])
                with c.Elif(ops.GE([val, ops.Const(50)])) as c:
                    ops.Add([total_small, val], [total_small])
                with c.Else():
                    ops.Add([total_tiny, val], [total_tiny])
                ops.Add([total, val], total)
        return {
            "total": final_output(total),
            "large": final_output(total_large),
            "small": final_output(total_small),
            "tiny": final_output(total_tiny),
        }
