"""NetBuilder constructs (spec 2.3-2.9, 3.5-3.8): loops, If chains, stop guards,
IfNet/WhileNet scoping, setup blocks and reporters. Every expected value comes from
a plain-Python rendering of the same program, or is worked out by hand."""
from __future__ import annotations

import threading
import time

import pytest

from dslc import core, workspace
from dslc.ir.diagnostics import DSLError
from dslc.net_builder import NetBuilder, ops
from dslc.task import Task, TaskGroup, final_output


def run_task(session, build):
    """Run a Task whose body is ``build()``; return the fetched values of what it returns."""
    with Task() as task:
        got = build()
        single = not isinstance(got, (list, tuple))
        outs = [final_output(b) for b in ([got] if single else got)]
    session.run(task)
    values = [_py(o.fetch()) for o in outs]
    return values[0] if single else values


def _py(v):
    return v.item() if hasattr(v, "item") and getattr(v, "ndim", 0) == 0 else v


def const_bool(v):
    return ops.Const(bool(v))


# ----------------------------------------------------------------------------- ops.loop


@pytest.mark.parametrize("n", [0, 1, 6])
def test_loop_int_count_and_iter_values(session, n):
    def build():
        total = ops.Const(0)
        squares = ops.Const(0)
        with ops.loop(n) as loop:
            ops.Add([total, loop.iter()], [total])
            ops.Add([squares, ops.Mul([loop.iter(), loop.iter()])], [squares])
        return total, squares
    assert run_task(session, build) == [sum(range(n)), sum(i * i for i in range(n))]


def test_loop_blob_count(session):
    def build():
        n = ops.Add([ops.Const(2), ops.Const(3)])
        total = ops.Const(0)
        with ops.loop(n):
            ops.Add([total, ops.Const(10)], [total])
        return total
    assert run_task(session, build) == 50


def test_loop_count_from_another_loops_iter(session):
    # for i in range(5): for j in range(i): total += 10*i + j; runs += 1
    expected_total = sum(10 * i + j for i in range(5) for j in range(i))
    expected_runs = sum(range(5))

    def build():
        total = ops.Const(0)
        runs = ops.Const(0)
        with ops.loop(5) as outer:
            with ops.loop(outer.iter()) as inner:
                val = ops.Add([ops.Mul([outer.iter(), ops.Const(10)]), inner.iter()])
                ops.Add([total, val], [total])
                ops.Add([runs, ops.Const(1)], [runs])
        return total, runs
    assert run_task(session, build) == [expected_total, expected_runs]


def test_loop_count_computed_from_iter_in_a_blob(session):
    # for i in range(4): m = 2*i + 1; for _ in range(m): total += 1
    def build():
        total = ops.Const(0)
        with ops.loop(4) as outer:
            m = ops.Add([ops.Mul([outer.iter(), ops.Const(2)]), ops.Const(1)])
            with ops.loop(m):
                ops.Add([total, ops.Const(1)], [total])
        return total
    assert run_task(session, build) == sum(2 * i + 1 for i in range(4))


def _reference_recounted(n, step):
    """Caffe2's check `iter >= n` before every iteration, n changing in the body."""
    it = total = 0
    while not it >= n:
        total += it
        n -= step
        it += 1
    return total, it


@pytest.mark.parametrize("n0,step", [(10, 1), (7, 2), (0, 1)])
def test_loop_count_blob_modified_by_body_is_reread(session, n0, step):
    expected_total, _ = _reference_recounted(n0, step)

    def build():
        n = ops.Const(n0)
        total = ops.Const(0)
        with ops.loop(n) as loop:
            ops.Add([total, loop.iter()], [total])
            ops.Sub([n, ops.Const(step)], [n])
        return total, n
    total, n_final = run_task(session, build)
    assert total == expected_total
    assert n_final == n0 - step * _reference_recounted(n0, step)[1]


def test_loop_count_blob_grown_by_body(session):
    # n grows by 1 in the iterations where it is even (it < 4): check `it >= n` each time.
    it, n, count = 0, 3, 0
    while not it >= n:
        count += 1
        if it % 2 == 0 and it < 4:
            n += 1
        it += 1

    def build():
        n_blob = ops.Const(3)
        count_blob = ops.Const(0)
        with ops.loop(n_blob) as loop:
            ops.Add([count_blob, ops.Const(1)], [count_blob])
            i = loop.iter()
            even_small = ops.Or([ops.EQ([i, ops.Const(0)]), ops.EQ([i, ops.Const(2)])])
            with ops.If(even_small):
                ops.Add([n_blob, ops.Const(1)], [n_blob])
        return count_blob, n_blob
    assert run_task(session, build) == [count, n]


@pytest.mark.parametrize("body_rewrites_count", [False, True])
def test_loop_int32_count_blob(session, body_rewrites_count):
    import numpy as np

    def build():
        n = ops.Const(np.array(3, dtype=np.int32))
        total = ops.Const(0)
        with ops.loop(n) as loop:
            ops.Add([total, loop.iter()], [total])
            if body_rewrites_count:
                ops.Copy([n], [n])
        return total, loop.iter()
    assert run_task(session, build) == [0 + 1 + 2, 3]


def test_loop_count_from_a_python_op(session):
    # The count's type is known only at run time.
    def four(inputs, outputs):
        outputs[0].feed(4)

    def build():
        n = ops.Python(four)([], ["n"])
        total = ops.Const(0)
        with ops.loop(n):
            ops.Add([total, ops.Const(2)], [total])
        return total
    assert run_task(session, build) == 8


@pytest.mark.parametrize("body_rewrites_count", [False, True])
def test_loop_float_count_blob_is_a_type_error(session, body_rewrites_count):
    with Task() as task:
        n = ops.Const(2.5)
        with ops.loop(n):  # @float-count
            if body_rewrites_count:
                ops.Copy([n], [n])
    with pytest.raises(DSLError) as err:
        session.run(task)
    assert err.value.loc.line == _line_of("@float-count") and err.value.hint


def test_loop_without_count_stop_if(session):
    # x = 5; y = 0; while True: if x == 0: break; x -= 1; y += 1
    def build():
        x = ops.Const(5)
        y = ops.Const(0)
        with ops.loop():
            ops.stop_if(ops.EQ([x, ops.Const(0)]))
            ops.Add([x, ops.Const(-1)], [x])
            ops.Add([y, ops.Const(1)], [y])
        return x, y
    assert run_task(session, build) == [0, 5]


def test_loop_without_count_stop(session):
    # The body runs up to the stop once; the op after it never runs.
    def build():
        a = ops.Const(0)
        b = ops.Const(0)
        with ops.loop():
            ops.Add([a, ops.Const(1)], [a])
            ops.stop()
            ops.Add([b, ops.Const(1)], [b])
        return a, b
    assert run_task(session, build) == [1, 0]


def test_loop_without_count_or_stop_is_an_error():
    with pytest.raises(DSLError) as err:
        with Task():
            with ops.loop():
                ops.Const(1)
    assert err.value.loc is not None and err.value.hint


def test_stop_inside_counted_loop_skips_rest_and_increment(session):
    # for it in range(10): a += 1; if it >= 3: break; b += 1   -> the loop exits
    # with it == 3 (the increment of the stopping iteration is skipped).
    def build():
        a = ops.Const(0)
        b = ops.Const(0)
        with ops.loop(10) as loop:
            ops.Add([a, ops.Const(1)], [a])
            ops.stop_if(ops.GE([loop.iter(), ops.Const(3)]))
            ops.Add([b, ops.Const(1)], [b])
        last = ops.Copy([loop.iter()])
        return a, b, last
    assert run_task(session, build) == [4, 3, 3]


def test_iter_after_a_full_loop_is_the_count(session):
    def build():
        with ops.loop(4) as loop:
            ops.Const(0)
        return ops.Copy([loop.iter()])
    assert run_task(session, build) == 4


def test_loop_iter_is_a_task_output(session):
    def build():
        with ops.loop(7) as loop:
            ops.stop_if(ops.GE([loop.iter(), ops.Const(5)]))
        return loop.iter()
    assert run_task(session, build) == 5


def test_stop_in_recounted_loop(session):
    # n shrinks each iteration and a stop also fires: whichever comes first.
    def reference():
        it, n, total = 0, 10, 0
        while not it >= n:
            if total >= 6:
                break
            total += it
            n -= 1
            it += 1
        return total
    expected = reference()

    def build():
        n = ops.Const(10)
        total = ops.Const(0)
        with ops.loop(n) as loop:
            ops.stop_if(ops.GE([total, ops.Const(6)]))
            ops.Add([total, loop.iter()], [total])
            ops.Sub([n, ops.Const(1)], [n])
        return total
    assert run_task(session, build) == expected


def test_nested_loops_restart_at_zero(session):
    # The inner counter is reset before the inner loop each outer iteration.
    seen = [j for _ in range(3) for j in range(4)]

    def build():
        total = ops.Const(0)
        count = ops.Const(0)
        with ops.loop(3):
            with ops.loop(4) as inner:
                ops.Add([total, inner.iter()], [total])
                ops.Add([count, ops.Const(1)], [count])
        return total, count
    assert run_task(session, build) == [sum(seen), len(seen)]


def test_nested_stop_breaks_only_the_inner_loop(session):
    # for i in range(4): for j in range(10): if j >= i: break; total += 1
    def build():
        total = ops.Const(0)
        outer_runs = ops.Const(0)
        with ops.loop(4) as outer:
            with ops.loop(10) as inner:
                ops.stop_if(ops.GE([inner.iter(), outer.iter()]))
                ops.Add([total, ops.Const(1)], [total])
            ops.Add([outer_runs, ops.Const(1)], [outer_runs])
        return total, outer_runs
    assert run_task(session, build) == [sum(range(4)), 4]


def test_isolated_steps_in_a_loop_read_its_iter(session):
    # A create_workspace step and concurrent substeps inside a loop see loop.iter().
    # for i in range(4): a += 2*i (child workspace); counter += 2 (two threads)
    def build():
        a = ops.Const(0)
        counter = ops.CreateCounter([], ["ctr"])
        with ops.loop(4) as loop:
            cw = core.Net("cw")
            cw.Add([a, cw.Mul([loop.iter(), cw.Const(2)])], [a])
            ops.net(core.execution_step("cw", cw, create_workspace=True))
            bumps = [core.Net(f"bump{k}") for k in range(2)]
            for b in bumps:
                b.CountUp([counter])
                b.Add([loop.iter(), b.Const(0)], [f"seen{b.Name()}"])
            ops.net(core.execution_step("par", [core.execution_step(b.Name(), b) for b in bumps],
                                        concurrent_substeps=True))
        return a, ops.RetrieveCount([counter])
    assert run_task(session, build) == [sum(2 * i for i in range(4)), 8]


def test_loop_in_plain_netbuilder_plan(backend):
    with NetBuilder() as nb:
        total = ops.Const(0)
        with ops.loop(5) as loop:
            ops.Add([total, loop.iter()], [total])
    p = core.Plan("p")
    p.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(p, backend=backend)
    assert ws.fetch_blob(str(total)) == 10


# ----------------------------------------------------------------------------- If / Elif / Else


def _classify_reference(v):
    return "large" if v >= 80 else "small" if v >= 50 else "tiny"


@pytest.mark.parametrize("v", [10, 50, 79, 80, 99])
def test_if_elif_else_first_true_branch_runs(session, v):
    def build():
        val = ops.Const(v)
        which = ops.Const(0)
        with ops.If(ops.GE([val, ops.Const(80)])) as c:
            ops.Const(1, blob_out=which)
        with c.Elif(ops.GE([val, ops.Const(50)])) as c:
            ops.Const(2, blob_out=which)
        with c.Else():
            ops.Const(3, blob_out=which)
        return which
    expected = {"large": 1, "small": 2, "tiny": 3}[_classify_reference(v)]
    assert run_task(session, build) == expected


def test_elif_condition_reads_blob_modified_by_earlier_untaken_chain(session):
    # x = 1. If (x == 5) not taken. The Elif condition is computed after the If:
    # it sees x == 1 -> taken; it sets x = 2; the next Elif (x == 2) is computed
    # after that branch ran, so its condition holds, but the chain already ran.
    def build():
        x = ops.Const(1)
        hits = ops.Const(0)
        with ops.If(ops.EQ([x, ops.Const(5)])) as c:
            ops.Add([hits, ops.Const(1)], [hits])
        with c.Elif(ops.EQ([x, ops.Const(1)])) as c:
            ops.Const(2, blob_out=x)
            ops.Add([hits, ops.Const(10)], [hits])
        with c.Elif(ops.EQ([x, ops.Const(2)])) as c:
            ops.Add([hits, ops.Const(100)], [hits])
        with c.Else():
            ops.Add([hits, ops.Const(1000)], [hits])
        return x, hits
    assert run_task(session, build) == [2, 10]


def test_elif_condition_evaluated_after_previous_branch(session):
    # The If branch is not taken but the ops *between* the If and the Elif run
    # after it: y is set there, and the Elif condition (computed later) sees it.
    def build():
        y = ops.Const(0)
        res = ops.Const(0)
        with ops.If(const_bool(False)) as c:
            ops.Const(-1, blob_out=res)
        ops.Const(7, blob_out=y)
        with c.Elif(ops.EQ([y, ops.Const(7)])) as c:
            ops.Const(1, blob_out=res)
        with c.Else():
            ops.Const(2, blob_out=res)
        return res
    assert run_task(session, build) == 1


def test_if_branch_changing_its_own_condition_blob_skips_else(session):
    def build():
        cond = ops.Const(True)
        res = ops.Const(0)
        with ops.If(cond) as c:
            ops.Const(False, blob_out=cond)
            ops.Add([res, ops.Const(1)], [res])
        with c.Else():
            ops.Add([res, ops.Const(10)], [res])
        return res
    assert run_task(session, build) == 1


def test_elif_false_cond_blob_reset_between_branches(session):
    # Elif reads the same condition blob as the If; the If branch flips it to
    # True but since the If was taken the Elif must not run anyway.
    def build():
        flag = ops.Const(True)
        res = ops.Const(0)
        with ops.If(flag) as c:
            ops.Add([res, ops.Const(1)], [res])
            ops.Const(False, blob_out=flag)
        with c.Elif(ops.Not([flag])) as c:
            ops.Add([res, ops.Const(10)], [res])
        return res
    assert run_task(session, build) == 1


def test_stop_inside_if_branch_skips_rest_of_branch_only(session):
    # Spec 8.1 _test_if: the stop leaves the branch, not the enclosing block.
    def build():
        y = ops.Const(1)
        after = ops.Const(0)
        with ops.If(ops.LT([ops.Const(25), ops.Const(50)])):
            ops.Const(3, blob_out=y)
            ops.stop()
            ops.Const(4, blob_out=y)
        ops.Const(9, blob_out=after)
        return y, after
    assert run_task(session, build) == [3, 9]


def test_stop_if_inside_if_inside_loop_does_not_break_the_loop(session):
    # for i in range(5): if i % 2 == 1: odd += 1; (stop_if(i >= 2): skip the rest); late += 1
    # where "late" is inside the branch after the stop_if.
    odd = sum(1 for i in range(5) if i in (1, 3))
    late = sum(1 for i in range(5) if i in (1, 3) and not i >= 2)

    def build():
        n_odd = ops.Const(0)
        n_late = ops.Const(0)
        runs = ops.Const(0)
        with ops.loop(5) as loop:
            is_odd = ops.Or([ops.EQ([loop.iter(), ops.Const(1)]), ops.EQ([loop.iter(), ops.Const(3)])])
            with ops.If(is_odd):
                ops.Add([n_odd, ops.Const(1)], [n_odd])
                ops.stop_if(ops.GE([loop.iter(), ops.Const(2)]))
                ops.Add([n_late, ops.Const(1)], [n_late])
            ops.Add([runs, ops.Const(1)], [runs])
        return n_odd, n_late, runs
    assert run_task(session, build) == [odd, late, 5]


def test_nested_ifs_inside_loops(session):
    # Reference: the seed test_loops program (spec 8.1), plus an inner If in the Else.
    ref = {"large": 0, "small": 0, "tiny_even": 0, "tiny_odd": 0}
    for i in range(10):
        for j in range(i):
            v = 10 * i + j
            if v >= 80:
                ref["large"] += v
            elif v >= 50:
                ref["small"] += v
            elif v % 2 == 0:
                ref["tiny_even"] += v
            else:
                ref["tiny_odd"] += v

    def build():
        large, small, even, odd = (ops.Const(0) for _ in range(4))
        with ops.loop(10) as loop:
            outer = ops.Mul([loop.iter(), ops.Const(10)])
            with ops.loop(loop.iter()) as inner:
                val = ops.Add([outer, inner.iter()])
                with ops.If(ops.GE([val, ops.Const(80)])) as c:
                    ops.Add([large, val], [large])
                with c.Elif(ops.GE([val, ops.Const(50)])) as c:
                    ops.Add([small, val], [small])
                with c.Else():
                    # val is even iff inner index is even (outer is a multiple of 10)
                    half = ops.Div([inner.iter(), ops.Const(2)])
                    with ops.If(ops.EQ([ops.Mul([half, ops.Const(2)]), inner.iter()])) as d:
                        ops.Add([even, val], [even])
                    with d.Else():
                        ops.Add([odd, val], [odd])
        return large, small, even, odd
    assert run_task(session, build) == [ref["large"], ref["small"], ref["tiny_even"], ref["tiny_odd"]]


def test_elif_after_else_is_an_error():
    with pytest.raises(DSLError) as err:
        with Task():
            with ops.If(ops.Const(True)) as c:
                ops.Const(1)
            with c.Else() as c:
                ops.Const(2)
            c.Elif(ops.Const(True))
    assert err.value.loc is not None and err.value.hint


# ----------------------------------------------------------------------------- stop_guard


def test_stop_guard_has_stopped(session):
    # Spec 8.1 _test_outer: g1 no stop, g2 stop, g3 empty, g4 no stop.
    def build():
        x = ops.Const(10)
        after = ops.Const(0)
        with ops.stop_guard() as g1:
            ops.stop_if(ops.LT([x, ops.Const(5)]))
            ops.Add([after, ops.Const(1)], [after])
        y = ops.Const(3)
        with ops.stop_guard() as g2:
            ops.stop_if(ops.LT([y, ops.Const(5)]))
            ops.Add([after, ops.Const(10)], [after])
        with ops.stop_guard() as g3:
            pass
        with ops.stop_guard() as g4:
            ops.Const(0)
        return g1.has_stopped(), g2.has_stopped(), g3.has_stopped(), g4.has_stopped(), after
    assert run_task(session, build) == [False, True, False, False, 1]


def test_stop_guard_in_a_loop_resets_each_iteration(session):
    # Iterations 0..3; the guard stops when i is odd. has_stopped reflects the last (i=3).
    def build():
        stops = ops.Const(0)
        with ops.loop(4) as loop:
            is_odd = ops.Or([ops.EQ([loop.iter(), ops.Const(1)]), ops.EQ([loop.iter(), ops.Const(3)])])
            with ops.stop_guard() as g:
                ops.stop_if(is_odd)
            with ops.If(g.has_stopped()):
                ops.Add([stops, ops.Const(1)], [stops])
        return stops, g.has_stopped()
    assert run_task(session, build) == [2, True]


def test_stop_inside_if_inside_guard_stops_only_the_if(session):
    # The stop belongs to the innermost builder (the If): the guard runs to its end.
    def build():
        flag = ops.Const(True)
        after = ops.Const(0)
        with ops.stop_guard(has_stopped_blob=flag) as guard:
            with ops.If(ops.Const(True)):
                ops.stop()
                ops.Const(5, blob_out=after)
            ops.Add([after, ops.Const(1)], [after])
        return guard.has_stopped(), flag, after
    assert run_task(session, build) == [False, False, 1]


def test_stop_in_loop_inside_if_breaks_only_the_loop(session):
    # if True: for i in range(10): if i >= 3: break; total += 1;  total += 100
    def build():
        total = ops.Const(0)
        with ops.If(ops.Const(True)):
            with ops.loop(10) as loop:
                ops.stop_if(ops.GE([loop.iter(), ops.Const(3)]))
                ops.Add([total, ops.Const(1)], [total])
            ops.Add([total, ops.Const(100)], [total])
        return total
    assert run_task(session, build) == 103


def test_has_stopped_before_close_is_an_error():
    with pytest.raises(DSLError):
        with Task():
            with ops.stop_guard() as g:
                g.has_stopped()


# ----------------------------------------------------------------------------- stop_if in a plain block


def test_stop_if_in_task_body_leaves_the_block(session):
    # dslc deliberately runs a plain block once (docs/differences.md): stop_if
    # skips the rest of the body instead of turning it into a loop.
    def build():
        a = ops.Const(0)
        ops.Add([a, ops.Const(1)], [a])
        ops.stop_if(ops.Const(True))
        ops.Add([a, ops.Const(10)], [a])
        return a
    assert run_task(session, build) == 1


def test_false_stop_if_in_task_body_runs_body_once(session):
    # Caffe2 would repeat this body forever; dslc runs it once.
    def build():
        a = ops.Const(0)
        ops.Add([a, ops.Const(1)], [a])
        ops.stop_if(ops.Const(False))
        ops.Add([a, ops.Const(10)], [a])
        return a
    assert run_task(session, build) == 11


def test_do_while_written_as_task_body_runs_once(session):
    # Caffe2 would repeat this body until runs >= 3 (3 runs); dslc runs it once.
    with Task() as task:
        with ops.task_init():
            runs = ops.CreateCounter([], ["runs"])
        ops.CountUp([runs])
        ops.stop_if(ops.GE([ops.RetrieveCount([runs]), ops.Const(3)]))
        with ops.task_exit():
            out = final_output(ops.RetrieveCount([runs]))
    session.run(task)
    assert out.fetch() == 1


def test_stop_in_nested_netbuilder_step_leaves_only_it(session):
    # A NetBuilder opened inside another is not its child (as in Caffe2): it runs
    # where its step is added with ops.net.
    def build():
        a = ops.Const(0)
        with NetBuilder() as nb:
            ops.Add([a, ops.Const(1)], [a])
            ops.stop()
            ops.Add([a, ops.Const(10)], [a])
        ops.Add([a, ops.Const(100)], [a])
        ops.net(core.to_execution_step(nb))
        return a
    assert run_task(session, build) == 100 + 1


def test_stops_and_reporter_in_every_instance(session):
    # 4 instances; each counts iterations 0..2 (stop at 3), then leaves its body at the
    # stop_if; each instance has its own reporter, run once at its end.
    with Task(num_instances=4) as task:
        with ops.task_init():
            counted = ops.CreateCounter([], ["counted"])
            reports = ops.CreateCounter([], ["reports"])
        with ops.task_reporter(interval_ms=60_000):
            ops.CountUp([reports])
        with ops.loop(10) as loop:
            ops.stop_if(ops.GE([loop.iter(), ops.Const(3)]))
            ops.CountUp([counted])
        ops.stop_if(ops.Const(True))
        ops.CountUp([counted])
        with ops.task_exit():
            n_counted = final_output(ops.RetrieveCount([counted]))
            n_reports = final_output(ops.RetrieveCount([reports]))
    session.run(task)
    assert (n_counted.fetch(), n_reports.fetch()) == (4 * 3, 4)


def test_stop_if_in_task_init_leaves_only_the_init_block(session):
    with Task() as task:
        with ops.task_init():
            a = ops.Const(1)
            ops.stop_if(ops.Const(True))
            ops.Const(100, blob_out=a)
        b = ops.Add([a, ops.Const(1)])
        out_a, out_b = final_output(a), final_output(b)
    session.run(task)
    assert (out_a.fetch(), out_b.fetch()) == (1, 2)


# ----------------------------------------------------------------------------- IfNet / WhileNet


def _plan_ws(nb, backend):
    p = core.Plan("p")
    p.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(p, backend=backend)
    return ws


def test_ifnet_else_and_branch_locals(backend):
    with NetBuilder() as nb:
        x = ops.Const(3)
        res = ops.Const(0)
        with ops.IfNet(ops.GT([x, ops.Const(2)])):
            tmp = ops.Mul([x, ops.Const(10)])
            ops.Add([res, tmp], [res])
        with ops.Else():
            other = ops.Const(-1)
            ops.Copy([other], [res])
    ws = _plan_ws(nb, backend)
    assert ws.fetch_blob(str(res)) == 30
    assert str(tmp) not in ws.names()
    assert str(other) not in ws.names()


def test_ifnet_else_branch_taken(backend):
    with NetBuilder() as nb:
        x = ops.Const(1)
        res = ops.Const(0)
        with ops.IfNet(ops.GT([x, ops.Const(2)])):
            ops.Const(5, blob_out=res)
        with ops.Else():
            ops.Const(6, blob_out=res)
    assert _plan_ws(nb, backend).fetch_blob(str(res)) == 6


def test_ifnet_local_blob_with_outer_name_is_shared(backend):
    # A blob defined before the IfNet is in its lexical scope: writes go through.
    with NetBuilder() as nb:
        shared = ops.Const(1)
        with ops.IfNet(ops.Const(True)):
            ops.Const(2, blob_out=shared)
    assert _plan_ws(nb, backend).fetch_blob(str(shared)) == 2


def test_ifnet_branch_local_read_later_is_an_error():
    # local is made only inside the branch: reading it afterwards fails before running,
    # at the read, naming the block that made it local.
    with pytest.raises(DSLError) as err:
        with NetBuilder() as nb:
            with ops.IfNet(ops.Const(True)):
                local = ops.Const(900)
            ops.Add([local, ops.Const(1)])  # @read-local
        p = core.Plan("p")
        p.AddStep(core.to_execution_step(nb))
        workspace.C.Workspace().run(p)
    e = err.value
    assert "local to the IfNet" in e.message and e.hint
    assert _line_of("@read-local") == e.loc.line


def _line_of(marker: str) -> int:
    """The line of this file that carries ``marker`` in a comment."""
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith("# " + marker):
                return number
    raise AssertionError(marker)


def test_branch_local_name_written_outside_later_is_fine(session):
    # The same name is also written outside the branch, before the read: no error.
    def build():
        with ops.IfNet(ops.Const(True)):
            ops.Const(1, blob_out="tmp")
        ops.Const(5, blob_out="tmp")
        return ops.Add(["tmp", ops.Const(1)])
    assert run_task(session, build) == 6


def test_ifnet_input_undefined_outside_is_an_error():
    with pytest.raises(DSLError) as err:
        with NetBuilder() as nb:
            with ops.IfNet(ops.Const(True)):
                ops.Add(["nowhere", ops.Const(1)], ["also_nowhere"])
        p = core.Plan("p")
        p.AddStep(core.to_execution_step(nb))
        workspace.C.Workspace().run(p)
    assert err.value.loc is not None


def test_ifnet_in_a_loop(session):
    # for i in range(6): if i > 2: acc += i else: acc -= 1
    expected = sum(i if i > 2 else -1 for i in range(6))

    def build():
        acc = ops.Const(0)
        with ops.loop(6) as loop:
            i = ops.Copy([loop.iter()])
            with ops.IfNet(ops.GT([i, ops.Const(2)])):
                ops.Add([acc, i], [acc])
            with ops.Else():
                ops.Sub([acc, ops.Const(1)], [acc])
        return acc
    assert run_task(session, build) == expected


def test_nested_ifnet_sees_outer_branch_locals(session):
    # t is local to the outer branch but visible to the inner one; r is shared.
    def build():
        r = ops.Const(0)
        with ops.IfNet(ops.Const(True)):
            t = ops.Const(5)
            with ops.IfNet(ops.Const(True)):
                ops.Add([t, ops.Const(7)], [r])
            with ops.Else():
                ops.Copy([t], [r])
        return r
    assert run_task(session, build) == 12


def test_while_net_inside_a_loop(session):
    # for _ in range(3): x = 0; while x < 4: x += 1; y += 1
    def build():
        x = ops.Const(0)
        y = ops.Const(0)
        with ops.loop(3):
            ops.Const(0, blob_out=x)
            with ops.WhileNet():
                with ops.Condition():
                    ops.LT([x, ops.Const(4)])
                ops.Add([x, ops.Const(1)], [x])
                ops.Add([y, ops.Const(1)], [y])
        return x, y
    assert run_task(session, build) == [4, 12]


def test_setup_block_inside_ifnet_is_kept(session):
    # dslc keeps setup blocks opened inside IfNet bodies (Caffe2 drops them), see
    # docs/differences.md.
    with Task() as task:
        with ops.task_init():
            c = ops.CreateCounter([], ["c"])
        with ops.IfNet(ops.Const(False)):
            with ops.task_init():
                ops.CountUp([c])
        with ops.task_exit():
            out = final_output(ops.RetrieveCount([c]))
    session.run(task)
    assert out.fetch() == 1


def test_else_without_ifnet_is_an_error():
    with pytest.raises(DSLError) as err:
        with NetBuilder():
            ops.Const(1)
            with ops.Else():
                pass
    assert err.value.hint


def test_while_net(backend):
    # x = 0; y = 0; while (x += 1) < 7: y += x
    x_ref = y_ref = 0
    while True:
        x_ref += 1
        if not x_ref < 7:
            break
        y_ref += x_ref
    with NetBuilder() as nb:
        x = ops.Const(0)
        y = ops.Const(0)
        with ops.WhileNet():
            with ops.Condition():
                ops.Add([x, ops.Const(1)], [x])
                ops.LT([x, ops.Const(7)])
            ops.Add([x, y], [y])
    ws = _plan_ws(nb, backend)
    assert (ws.fetch_blob(str(x)), ws.fetch_blob(str(y))) == (x_ref, y_ref)


def test_while_net_body_locals_invisible_afterwards(backend):
    with NetBuilder() as nb:
        x = ops.Const(0)
        with ops.WhileNet():
            with ops.Condition():
                ops.LT([x, ops.Const(3)])
            step = ops.Const(1)
            ops.Add([x, step], [x])
    ws = _plan_ws(nb, backend)
    assert ws.fetch_blob(str(x)) == 3
    assert str(step) not in ws.names()


def test_while_net_false_at_start_never_runs_body(backend):
    with NetBuilder() as nb:
        x = ops.Const(10)
        y = ops.Const(0)
        with ops.WhileNet():
            with ops.Condition():
                ops.LT([x, ops.Const(3)])
            ops.Add([y, ops.Const(1)], [y])
    assert _plan_ws(nb, backend).fetch_blob(str(y)) == 0


def test_condition_outside_while_net_is_an_error():
    with pytest.raises(DSLError):
        with NetBuilder():
            with ops.Condition():
                ops.Const(True)


def test_stop_inside_ifnet_is_an_error():
    with pytest.raises(DSLError):
        with NetBuilder():
            with ops.IfNet(ops.Const(True)):
                ops.stop()


def test_loop_inside_ifnet_is_an_error():
    with pytest.raises(DSLError):
        with NetBuilder():
            with ops.IfNet(ops.Const(True)):
                with ops.loop(3):
                    pass


# ----------------------------------------------------------------------------- setup blocks


def test_setup_blocks_inside_loops_run_once(session):
    # init/exit blocks opened in a loop body (even twice: 3 iterations) run once per task run.
    with Task(num_instances=2) as task:
        with ops.task_init():
            inits = ops.CreateCounter([], ["inits"])
            exits = ops.CreateCounter([], ["exits"])
            inst_inits = ops.CreateCounter([], ["inst_inits"])
            inst_exits = ops.CreateCounter([], ["inst_exits"])
            body_runs = ops.CreateCounter([], ["body_runs"])
        with ops.loop(3):
            with ops.task_init():
                ops.CountUp([inits])
            with ops.task_instance_init():
                ops.CountUp([inst_inits])
            with ops.If(ops.Const(True)):
                with ops.task_exit():
                    ops.CountUp([exits])
                with ops.task_instance_exit():
                    ops.CountUp([inst_exits])
            ops.CountUp([body_runs])
        with ops.task_exit():
            outs = [final_output(ops.RetrieveCount([c]))
                    for c in (inits, exits, inst_inits, inst_exits, body_runs)]
    session.run(task)
    # task init/exit once; instance init/exit once per instance; body 3 times per instance
    assert [o.fetch() for o in outs] == [1, 1, 2, 2, 2 * 3]


def test_setup_order_and_instance_locals(session):
    # The init block runs before the body even though it is written after ops that
    # use its blob; the exit block sees the body's final value.
    with Task() as task:
        acc = ops.Const(0)
        with ops.loop(3):
            ops.Add([acc, ops.Const(1)], [acc])
            with ops.task_init():
                start = ops.Const(100)
            ops.Add([acc, start], [acc])
        with ops.task_exit():
            doubled = ops.Mul([acc, ops.Const(2)])
        out = final_output(doubled)
    session.run(task)
    assert out.fetch() == 2 * 3 * (1 + 100)


def test_local_init_and_exit_on_a_task_group(session):
    with TaskGroup() as tg:
        with Task():
            with ops.local_init():
                ops.CreateCounter([], ["shared"])
                ops.CreateCounter([], ["local_inits"])
                ops.CountUp(["local_inits"])
            with ops.loop(5):
                ops.CountUp(["shared"])
        with Task():
            with ops.loop(7):
                ops.CountUp(["shared"])
            with ops.local_exit():
                total = final_output(ops.RetrieveCount(["shared"]))
                n_inits = final_output(ops.RetrieveCount(["local_inits"]))
    session.run(tg)
    assert (total.fetch(), n_inits.fetch()) == (5 + 7, 1)


def test_local_init_runs_once_per_group_run(session):
    with TaskGroup() as tg:
        for _ in range(3):
            with Task():
                with ops.local_init():
                    ops.CreateCounter([], ["c"])
                ops.CountUp(["c"])
        with Task():
            with ops.local_exit():
                out = final_output(ops.RetrieveCount(["c"]))
    session.run(tg)
    # Three local_init blocks (one per task) all run before any task body, so the
    # counter the last one creates sees the CountUp of every task.
    assert out.fetch() == 3


def test_setup_outside_a_task_is_an_error():
    with pytest.raises(DSLError) as err:
        with NetBuilder():
            with ops.task_init():
                ops.Const(1)
    assert err.value.hint


# ----------------------------------------------------------------------------- reporters


def _nap(seconds):
    def nap(inputs, outputs):
        time.sleep(seconds)
    return nap


def test_task_reporter_runs_beside_the_body(session):
    with Task() as task:
        with ops.task_init():  # before the reporter starts, so its first run can read work
            reports = ops.CreateCounter([], ["reports"])
            work = ops.Const(0)
        with ops.task_reporter(interval_ms=5):
            ops.CountUp([reports])
            ops.Copy([work], ["seen_work"])
        with ops.loop(6):
            ops.Python(_nap(0.01))([], [])
            ops.Add([work, ops.Const(1)], [work])
        with ops.task_exit():
            n = final_output(ops.RetrieveCount([reports]))
        seen = final_output(core.BlobReference("seen_work"))
    start = time.perf_counter()
    session.run(task)
    elapsed_ms = (time.perf_counter() - start) * 1000
    # the final report runs after the body: it saw all 6 iterations
    assert seen.fetch() == 6
    # at least the final run; each periodic run waited 5 ms first
    assert 1 <= n.fetch() <= elapsed_ms / 5 + 1


def test_task_reporter_with_long_interval_runs_exactly_once(session):
    with Task() as task:
        with ops.task_init():
            reports = ops.CreateCounter([], ["reports"])
        with ops.task_reporter(interval_ms=60_000):
            ops.CountUp([reports])
        ops.Const(1)
        with ops.task_exit():
            n = final_output(ops.RetrieveCount([reports]))
    session.run(task)
    assert n.fetch() == 1


def test_local_reporter_on_a_task_group(session):
    with TaskGroup() as tg:
        with Task():
            with ops.local_init():
                ops.CreateCounter([], ["reports"])
            with ops.local_reporter(interval_ms=60_000):
                ops.CountUp(["reports"])
            ops.Python(_nap(0.005))([], [])
            with ops.local_exit():
                n = final_output(ops.RetrieveCount(["reports"]))
    session.run(tg)
    assert n.fetch() == 1


def test_reporter_sees_concurrent_progress(session):
    # The body blocks until a reporter (running beside it) has observed its progress
    # through the workspace; a 5 s timeout fails the test instead of hanging.
    release = threading.Event()
    observed = []

    def wait_for_report(inputs, outputs):
        release.wait(5)

    def report(inputs, outputs):
        observed.append(int(inputs[0].data))
        if observed[-1] == 1:
            release.set()

    with Task() as task:
        with ops.task_init():  # written before the reporter starts
            progress = ops.Const(0)
        with ops.task_reporter(interval_ms=2):
            ops.Python(report)([progress], [])
        ops.Const(1, blob_out=progress)
        ops.Python(wait_for_report)([], [])
        ops.Const(2, blob_out=progress)
    session.run(task)
    assert release.is_set()
    assert observed[-1] == 2  # the final report
    assert set(observed) <= {0, 1, 2}


# ----------------------------------------------------------------------------- misuse


def _elif_in_other_block():
    with ops.If(ops.Const(True)) as c:
        ops.Const(1)
    with ops.loop(1):
        c.Elif(ops.Const(True))


def _elif_inside_open_if():
    with ops.If(ops.Const(True)) as c:
        c.Elif(ops.Const(True))


def _guard_queried_early():
    with ops.stop_guard() as g:
        g.has_stopped()


def _ifnet_on_python_bool():
    with ops.IfNet(True):
        pass


def _while_without_condition():
    with ops.WhileNet():
        ops.Const(1)


def _condition_outside_while():
    with ops.Condition():
        ops.Const(True)


def _condition_twice():
    with ops.WhileNet():
        with ops.Condition():
            ops.Const(True)
        with ops.Condition():
            ops.Const(True)


def _condition_without_output():
    x = ops.Const(1)
    with ops.WhileNet():
        with ops.Condition():
            ops.Print(x, [])


def _net_and_name():
    ops.net(core.Net("n"), name="m")


def _net_of_wrong_type():
    ops.net(5)


def _step_inside_ifnet():
    step = core.execution_step("s", core.Net("n"))
    with ops.IfNet(ops.Const(True)):
        ops.net(step)


def _stop_inside_ifnet():
    with ops.IfNet(ops.Const(True)):
        ops.stop()


def _loop_inside_ifnet():
    with ops.IfNet(ops.Const(True)):
        with ops.loop(2):
            pass


def _float_loop_count():
    with ops.loop(2.5):
        pass


def _negative_loop_count():
    with ops.loop(-1):
        pass


def _iter_of_uncounted_loop():
    with ops.loop() as loop:
        ops.stop()
    loop.iter()


def _stop_if_on_python_bool():
    ops.stop_if(True)


def _else_after_if_on_ops():
    with ops.If(ops.Const(True)):
        pass
    with ops.Else():
        pass


@pytest.mark.parametrize("misuse", [
    _elif_in_other_block, _elif_inside_open_if, _guard_queried_early, _ifnet_on_python_bool,
    _while_without_condition, _condition_outside_while, _condition_twice, _condition_without_output,
    _net_and_name, _net_of_wrong_type, _step_inside_ifnet, _stop_inside_ifnet, _loop_inside_ifnet,
    _float_loop_count, _negative_loop_count, _iter_of_uncounted_loop, _stop_if_on_python_bool,
    _else_after_if_on_ops,
], ids=lambda f: f.__name__.strip("_"))
def test_builder_misuse_is_a_located_error_with_a_hint(misuse):
    with pytest.raises(DSLError) as err:
        with Task():
            misuse()
    e = err.value
    assert e.loc is not None and e.loc.file.endswith("test_builders.py"), (e, e.loc)
    assert e.hint, e


@pytest.mark.parametrize("a, b", [(True, True), (True, False), (False, True), (False, False)])
def test_nested_branches_see_outer_values_and_reread_what_inner_ones_wrote(session, a, b):
    """A branch reads values its enclosing blocks hold (two levels up); after an inner If
    writes a blob, the outer branch reads the new value, not the one it held before."""
    def build():
        x = ops.Const(5)
        y = ops.Add([x, ops.Const(1)])  # 6, held by the task body's block
        out = ops.Const(0)
        with ops.If(const_bool(a)):
            with ops.If(const_bool(b)):
                ops.Add([y, x], [y])    # 11: reads x and y from two levels up
            ops.Mul([y, ops.Const(2)], [out])  # the y the inner If may have changed
        return y, out
    y = 6 + (5 if a and b else 0)
    assert run_task(session, build) == [y, 2 * y if a else 0]
