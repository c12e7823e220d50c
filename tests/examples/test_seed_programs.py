"""The seed programs (net_builder_test.py's) with the results the spec states.

Four of them are examples: examples/setup.py, loops.py, multi_instance.py and python_op.py.
Those tests load the example file as ``dslc run`` does (dslc.driver.jobfile) and run it on every
backend, so a test and its example cannot drift apart; the other programs are written here.
"""
from __future__ import annotations

import paths
from dslc import core, workspace
from dslc.driver import jobfile
from dslc.net_builder import NetBuilder, ops
from dslc.task import Task, final_output


def run_example(session, name: str) -> dict:
    """examples/NAME run as ``dslc run`` runs it, in ``session``: its outputs by name."""
    job = jobfile.load(str(paths.EXAMPLES / name))
    for runnable in job.runnables:
        session.run(runnable)
    return {k: out.fetch() for k, out in job.outputs.items()}


def test_setup(session):
    # task_init makes one = 1 and three = 3, so accum = (1 + 1) + 3 = 5; the body's six =
    # accum + 1 and accum += 1; task_exit runs after the body: seven_1 = 6 + 1.
    assert run_example(session, "setup.py") == {"six": 6, "seven_1": 7, "seven_2": 7}


def test_loops(session):
    # val = 10 i + j for 0 <= j < i < 10, split at 80 and 50 (summed by hand in the spec;
    # tests/cli/test_cli.py's loops_totals computes the same in plain Python)
    got = run_example(session, "loops.py")
    assert {k: int(v) for k, v in got.items()} == {"total": 2970, "large": 1514, "small": 1146, "tiny": 310}


def test_multi_instance(session):
    n_instances, n_iters = 10, 15  # the example's NUM_INSTANCES and NUM_ITERS
    got = run_example(session, "multi_instance.py")
    assert got == {"total1": n_instances * n_iters, "total2": n_instances * n_iters ** 2,
                   "total3": n_instances * n_iters ** 2}


def test_multi_instance_python_op(session):
    # the builder runs once per instance (64), the op once per iteration (64 * 4)
    assert run_example(session, "python_op.py") == {"instances": 64, "calls": 256}


def test_net_multi_use(session):
    with Task() as task:
        total = ops.Const(0)
        net = core.Net("my_net")
        net.Add([total, net.Const(1)], [total])
        ops.net(net)
        ops.net(net)
        result = final_output(total)
    session.run(task)
    assert result.fetch() == 2


def _test_loop():
    x = ops.Const(5)
    y = ops.Const(0)
    with ops.loop():
        ops.stop_if(ops.EQ([x, ops.Const(0)]))
        ops.Add([x, ops.Const(-1)], [x])
        ops.Add([y, ops.Const(1)], [y])
    return y


def _test_outer():
    x = ops.Const(10)
    # test stop_if(False)
    with ops.stop_guard() as g1:
        _test_inner_stop(x)
    # test stop_if(True)
    y = ops.Const(3)
    with ops.stop_guard() as g2:
        _test_inner_stop(y)
    # test no stop
    with ops.stop_guard() as g4:
        ops.Const(0)
    # test empty clause
    with ops.stop_guard() as g3:
        pass
    return (g1.has_stopped(), g2.has_stopped(), g3.has_stopped(), g4.has_stopped())


def _test_inner_stop(x):
    ops.stop_if(ops.LT([x, ops.Const(5)]))


def _test_if(x):
    y = ops.Const(1)
    with ops.If(ops.GT([x, ops.Const(50)])):
        ops.Const(2, blob_out=y)
    with ops.If(ops.LT([x, ops.Const(50)])):
        ops.Const(3, blob_out=y)
        ops.stop()
        ops.Const(4, blob_out=y)
    return y


def test_ops():
    with NetBuilder() as nb:
        y = _test_loop()
        z, w, a, b = _test_outer()
        p = _test_if(ops.Const(75))
        q = _test_if(ops.Const(25))
    plan = core.Plan("name")
    plan.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(plan)
    expected = [(y, 5), (z, False), (w, True), (a, False), (b, False), (p, 2), (q, 3)]
    for blob, value in expected:
        assert ws.fetch_blob(str(blob)) == value, str(blob)


def test_if_net():
    with NetBuilder() as nb:
        x0 = ops.Const(0)
        x1 = ops.Const(1)
        x2 = ops.Const(2)
        y0 = ops.Const(0)
        y1 = ops.Const(1)
        y2 = ops.Const(2)
        first_res = ops.Const(0)
        with ops.IfNet(ops.Const(True)):
            ops.Const(1, blob_out=first_res)
        with ops.Else():
            ops.Const(2, blob_out=first_res)
        second_res = ops.Const(0)
        with ops.IfNet(ops.Const(False)):
            ops.Const(1, blob_out=second_res)
        with ops.Else():
            ops.Const(2, blob_out=second_res)
        with ops.IfNet(ops.LT([x0, x1])):
            local_blob = ops.Const(900)
            ops.Add([ops.Const(100), local_blob], [y0])
            gt = ops.GT([x1, x2])
            with ops.IfNet(gt):
                pass
            with ops.Else():
                ops.Add([y1, local_blob], [local_blob])
                ops.Add([ops.Const(100), y1], [y1])
            with ops.IfNet(ops.EQ([local_blob, ops.Const(901)])):
                ops.Const(7, blob_out=y2)
                ops.Add([y1, y2], [y2])
        with ops.Else():
            pass
    plan = core.Plan("if_net_test")
    plan.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(plan)
    assert ws.fetch_blob(str(first_res)) == 1
    assert ws.fetch_blob(str(second_res)) == 2
    assert ws.fetch_blob(str(y0)) == 1000
    assert ws.fetch_blob(str(y1)) == 101
    assert ws.fetch_blob(str(y2)) == 108
    assert str(local_blob) not in ws.names()


def test_while_net():
    with NetBuilder() as nb:
        x = ops.Const(0)
        y = ops.Const(0)
        with ops.WhileNet():
            with ops.Condition():
                ops.Add([x, ops.Const(1)], [x])
                ops.LT([x, ops.Const(7)])
            ops.Add([x, y], [y])
    plan = core.Plan("while_net_test")
    plan.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(plan)
    assert ws.fetch_blob(str(x)) == 7
    assert ws.fetch_blob(str(y)) == 21
