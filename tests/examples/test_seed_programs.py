"""The seed programs (net_builder_test.py's) with the results the spec states."""
from __future__ import annotations

import threading

from dslc import core, workspace
from dslc.net_builder import NetBuilder, ops
from dslc.task import Task, TaskGroup, final_output


def test_setup(session):
    with Task() as task:
        with ops.task_init():
            one = ops.Const(1)
        two = ops.Add([one, one])
        with ops.task_init():
            three = ops.Const(3)
        accum = ops.Add([two, three])
        with ops.task_exit():
            seven_1 = ops.Add([accum, one])
        six = ops.Add([accum, one])
        ops.Add([accum, one], [accum])
        seven_2 = ops.Add([accum, one])
        o6, o7_1, o7_2 = final_output(six), final_output(seven_1), final_output(seven_2)
    session.run(task)
    assert (o6.fetch(), o7_1.fetch(), o7_2.fetch()) == (6, 7, 7)


def _actual_loop():
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
    return [final_output(x) for x in (total, total_large, total_small, total_tiny)]


def test_loops(session):
    with Task() as task:
        outs = _actual_loop()
    session.run(task)
    assert [int(o.fetch()) for o in outs] == [2970, 1514, 1146, 310]


def test_multi_instance(session):
    n_instances, n_iters = 10, 15
    with TaskGroup() as tg:
        with Task(num_instances=n_instances):
            with ops.task_init():
                counter1 = ops.CreateCounter([], ["global_counter"])
                counter2 = ops.CreateCounter([], ["global_counter2"])
                counter3 = ops.CreateCounter([], ["global_counter3"])
            with ops.task_instance_init():
                task_counter = ops.CreateCounter([], ["task_counter"])
            local_counter = ops.CreateCounter([], ["local_counter"])
            with ops.loop(n_iters):
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
    session.run(tg)
    assert total1.fetch() == n_instances * n_iters
    assert total2.fetch() == n_instances * n_iters ** 2
    assert total3.fetch() == n_instances * n_iters ** 2


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


def test_multi_instance_python_op(session):
    with Task(num_instances=64) as task:
        with ops.loop(4):
            ops.Python((python_op_builder, [], {}))([], [])
    PythonOpStats.num_instances = PythonOpStats.num_calls = 0
    session.run(task)
    assert PythonOpStats.num_instances == 64
    assert PythonOpStats.num_calls == 256


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
