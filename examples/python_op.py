"""A Python op in 64 concurrent instances (the seed's test_multi_instance_python_op).

The op is given as a builder tuple, so its builder runs once per instance (64
times) and the function it builds runs once per loop iteration (64 * 4 times).
The job reports both counts.

Expected output (dslc run examples/python_op.py):
    instances = 64
    calls = 256
"""
import threading

from dslc.net_builder import ops
from dslc.task import Task, final_output


class PythonOpStats:
    lock = threading.Lock()
    num_instances = 0
    num_calls = 0


def python_op_builder():
    with PythonOpStats.lock:
        PythonOpStats.num_instances += 1

    def my_op(inputs, outputs):
        with PythonOpStats.lock:
            PythonOpStats.num_calls += 1
    return my_op


def report(inputs, outputs):
    outputs[0].feed(PythonOpStats.num_instances)
    outputs[1].feed(PythonOpStats.num_calls)


def build_job():
    PythonOpStats.num_instances = PythonOpStats.num_calls = 0
    with Task(num_instances=64) as task:
        with ops.loop(4):
            ops.Python((python_op_builder, [], {}))([], [])
        with ops.task_exit():
            instances, calls = ops.Python(report)([], 2)
            outs = {"instances": final_output(instances), "calls": final_output(calls)}
    return task, outs
