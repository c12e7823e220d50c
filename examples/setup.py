"""Task phases (the seed's test_setup): task_init runs first, task_exit last.

`accum` is 5 after the init blocks; the body adds one to it, so the exit block,
which runs after the body, sees 6.

Expected output (dslc run examples/setup.py):
    six = 6
    seven_1 = 7
    seven_2 = 7
"""
from dslc.net_builder import ops
from dslc.task import Task, final_output


def build_job():
    with Task():
        with ops.task_init():
            one = ops.Const(1)
        two = ops.Add([one, one])
        with ops.task_init():
            three = ops.Const(3)
        accum = ops.Add([two, three])
        # here, accum should be 5
        with ops.task_exit():
            # here, accum should be 6, since this executes after lines below
            seven_1 = ops.Add([accum, one])
        six = ops.Add([accum, one])
        ops.Add([accum, one], [accum])
        seven_2 = ops.Add([accum, one])
        return {"six": final_output(six), "seven_1": final_output(seven_1),
                "seven_2": final_output(seven_2)}
