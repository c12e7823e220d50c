"""Counters across concurrent task instances (the seed's test_multi_instance).

Ten instances of one task each count to 15 on a shared counter and on counters of
their own; each instance then counts 15 * 15 more on two other shared counters.

Expected output (dslc run examples/multi_instance.py):
    total1 = 150
    total2 = 2250
    total3 = 2250
"""
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, final_output

NUM_INSTANCES = 10
NUM_ITERS = 15


def build_job():
    with TaskGroup() as tg:
        with Task(num_instances=NUM_INSTANCES):
            with ops.task_init():
                counter1 = ops.CreateCounter([], ['global_counter'])
                counter2 = ops.CreateCounter([], ['global_counter2'])
                counter3 = ops.CreateCounter([], ['global_counter3'])
            # both task_counter and local_counter are per instance
            with ops.task_instance_init():
                task_counter = ops.CreateCounter([], ['task_counter'])
            local_counter = ops.CreateCounter([], ['local_counter'])
            with ops.loop(NUM_ITERS):
                ops.CountUp(counter1)
                ops.CountUp(task_counter)
                ops.CountUp(local_counter)
            with ops.task_instance_exit():
                count2 = ops.RetrieveCount(task_counter)
                with ops.loop(ops.Mul([count2, count2])):
                    ops.CountUp(counter2)
            count3 = ops.RetrieveCount(local_counter)
            with ops.loop(ops.Mul([count3, count3])):
                ops.CountUp(counter3)
            with ops.task_exit():
                total1 = final_output(ops.RetrieveCount(counter1))
                total2 = final_output(ops.RetrieveCount(counter2))
                total3 = final_output(ops.RetrieveCount(counter3))
    return tg, {"total1": total1, "total2": total2, "total3": total3}
