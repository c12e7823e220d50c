"""core.execution_step semantics (spec 2.1, 2.2): iteration, stop blobs, concurrency,
workspaces and reporters. Expected values are worked out by hand in each test."""
from __future__ import annotations

import threading
import time

import pytest

from dslc import core
from dslc.net_builder import ops
from dslc.task import Task, final_output


def fetch(session, name):
    """A blob's value in the session's root workspace, as a plain Python scalar."""
    v = session.workspace.fetch(str(name))
    return v.item() if hasattr(v, "item") else v


def has_blob(session, name) -> bool:
    return session.workspace.has_blob(str(name))


def set_net(name, blob, value):
    """A net that sets ``blob`` to the int (or bool) ``value``."""
    net = core.Net(name)
    net.Const(value, blob_out=blob)
    return net


def add_net(name, blob, amount=1):
    """A net doing ``blob += amount``."""
    net = core.Net(name)
    net.Add([blob, net.Const(amount)], [blob])
    return net


def plan(*steps):
    """Steps run in order, as the top-level steps of a plan would."""
    return core.execution_step("plan", list(steps))


# ----------------------------------------------------------------------------- num_iter


@pytest.mark.parametrize("n", [0, 1, 7])
def test_num_iter_repeats_the_nets(session, n):
    step = plan(set_net("init", "x", 0), core.execution_step("body", add_net("inc", "x", 3), num_iter=n))
    session.run(step)
    assert fetch(session, "x") == 3 * n


def test_num_iter_defaults_to_one(session):
    step = plan(set_net("init", "x", 10), core.execution_step("body", add_net("inc", "x")))
    session.run(step)
    assert fetch(session, "x") == 11


def test_num_iter_and_should_stop_blob_are_exclusive():
    from dslc.ir.diagnostics import DSLError
    with pytest.raises(DSLError) as err:
        core.execution_step("s", add_net("inc", "x"), num_iter=2, should_stop_blob="stop")
    assert err.value.loc is not None


def test_nested_steps_multiply_iterations(session):
    inner = core.execution_step("inner", add_net("inc", "x"), num_iter=4)
    middle = core.execution_step("middle", [inner, core.execution_step("mark", add_net("m", "y"))],
                                 num_iter=3)
    outer = core.execution_step("outer", middle, num_iter=2)
    session.run(plan(set_net("ix", "x", 0), set_net("iy", "y", 0), outer))
    assert fetch(session, "x") == 2 * 3 * 4
    assert fetch(session, "y") == 2 * 3


def test_same_net_listed_twice_runs_twice(session):
    inc = add_net("inc", "x", 5)
    session.run(plan(set_net("init", "x", 1), core.execution_step("twice", [inc, inc])))
    assert fetch(session, "x") == 1 + 5 + 5


def test_same_step_listed_twice_runs_twice(session):
    inc = core.execution_step("inc3", add_net("inc", "x"), num_iter=3)
    session.run(plan(set_net("init", "x", 0), inc, inc))
    assert fetch(session, "x") == 6


# ----------------------------------------------------------------------------- stop blobs


def _counting_stop_nets(limit):
    """Nets [a += 1; stop = a >= limit; b += 1]: the stop blob is first written by the second net."""
    bump_a = add_net("bump_a", "a")
    check = core.Net("check")
    check.GE(["a", check.Const(limit)], ["stop"])
    bump_b = add_net("bump_b", "b")
    return [bump_a, check, bump_b]


def test_stop_blob_is_checked_after_each_net(session):
    # a: 1 2 3 -> stop becomes true right after the check net of iteration 3,
    # so bump_b runs in iterations 1 and 2 only.
    body = core.execution_step("body", _counting_stop_nets(3), should_stop_blob="stop")
    session.run(plan(set_net("ia", "a", 0), set_net("ib", "b", 0), body))
    assert (fetch(session, "a"), fetch(session, "b")) == (3, 2)


def test_stop_blob_is_checked_after_each_substep(session):
    substeps = [core.execution_step(f"s{i}", net) for i, net in enumerate(_counting_stop_nets(4))]
    body = core.execution_step("body", substeps, should_stop_blob="stop")
    session.run(plan(set_net("ia", "a", 0), set_net("ib", "b", 0), body))
    assert (fetch(session, "a"), fetch(session, "b")) == (4, 3)


def test_uninitialized_stop_blob_counts_as_false(session):
    # The stop blob is only written by the last net; until then the checks read
    # an unwritten blob, which must count as "do not stop".
    bump = add_net("bump", "a")
    check = core.Net("check")
    check.GE(["a", check.Const(2)], ["never_before"])
    body = core.execution_step("body", [bump, bump, check], should_stop_blob="never_before")
    session.run(plan(set_net("ia", "a", 0), body))
    assert fetch(session, "a") == 2


def test_stop_blob_true_before_the_step_stops_after_first_net(session):
    # A stale True is not reset by the executor: the step stops after its first net.
    body = core.execution_step("body", [add_net("bump_a", "a"), add_net("bump_b", "b")],
                               should_stop_blob="stop")
    session.run(plan(set_net("ia", "a", 0), set_net("ib", "b", 0), set_net("is", "stop", True), body))
    assert (fetch(session, "a"), fetch(session, "b")) == (1, 0)


def test_only_once_runs_at_most_once(session):
    never = core.Net("never")
    never.Const(False, blob_out="stop")
    body = core.execution_step("body", [never, add_net("bump", "a")], should_stop_blob="stop",
                               only_once=True)
    session.run(plan(set_net("ia", "a", 0), body))
    assert fetch(session, "a") == 1


def test_only_once_still_stops_after_a_net(session):
    stop_now = core.Net("stop_now")
    stop_now.Const(True, blob_out="stop")
    body = core.execution_step("body", [add_net("bump_a", "a"), stop_now, add_net("bump_b", "b")],
                               should_stop_blob="stop", only_once=True)
    session.run(plan(set_net("ia", "a", 0), set_net("ib", "b", 0), body))
    assert (fetch(session, "a"), fetch(session, "b")) == (1, 0)


def test_stop_ends_only_its_own_step(session):
    # The inner step stops itself each time; the outer step keeps iterating.
    reset = set_net("reset", "stop", False)
    inner = core.execution_step("inner", [add_net("bump_a", "a"), set_net("halt", "stop", True),
                                          add_net("bump_b", "b")], should_stop_blob="stop")
    outer = core.execution_step("outer", [core.execution_step("r", reset), inner,
                                          core.execution_step("c", add_net("bump_c", "c"))], num_iter=3)
    session.run(plan(set_net("ia", "a", 0), set_net("ib", "b", 0), set_net("ic", "c", 0), outer))
    assert (fetch(session, "a"), fetch(session, "b"), fetch(session, "c")) == (3, 0, 3)


# ----------------------------------------------------------------------------- concurrency


def _barrier_net(name, barrier, out):
    """A net whose Python op waits at ``barrier`` (so it only passes when run concurrently)."""
    def wait(inputs, outputs):
        barrier.wait()
        outputs[0].feed(1)
    net = core.Net(name)
    net.Python(wait)([], [out])
    return net


def test_concurrent_substeps_run_on_threads(session):
    barrier = threading.Barrier(3, timeout=5)
    subs = [core.execution_step(f"s{i}", _barrier_net(f"n{i}", barrier, f"done{i}")) for i in range(3)]
    session.run(core.execution_step("par", subs, concurrent_substeps=True))
    assert [fetch(session, f"done{i}") for i in range(3)] == [1, 1, 1]
    assert not barrier.broken


def test_concurrent_stop_blob_is_checked_after_the_join(session):
    # Sequentially, s0 setting stop would skip s1; concurrently both run, then the step stops.
    s0 = core.execution_step("s0", set_net("halt", "stop", True))
    s1 = core.execution_step("s1", add_net("bump", "b"))
    par = core.execution_step("par", [s0, s1], concurrent_substeps=True, should_stop_blob="stop")
    session.run(plan(set_net("ib", "b", 0), set_net("is", "stop", False), par))
    assert fetch(session, "b") == 1


def test_sequential_substeps_with_same_stop_skip_the_rest(session):
    s0 = core.execution_step("s0", set_net("halt", "stop", True))
    s1 = core.execution_step("s1", add_net("bump", "b"))
    seq = core.execution_step("seq", [s0, s1], should_stop_blob="stop")
    session.run(plan(set_net("ib", "b", 0), seq))
    assert fetch(session, "b") == 0


def test_concurrent_substeps_iterate(session):
    counter = core.Net("mk")
    counter.CreateCounter([], ["c"])
    bump = core.Net("bump")
    bump.CountUp(["c"])
    read = core.Net("read")
    read.RetrieveCount(["c"], ["total"])
    par = core.execution_step("par", [core.execution_step(f"s{i}", bump) for i in range(2)],
                              concurrent_substeps=True, num_iter=5)
    session.run(plan(counter, par, read))
    assert fetch(session, "total") == 2 * 5


@pytest.mark.parametrize("n", [1, 4])
def test_num_concurrent_instances(session, n):
    mk = core.Net("mk")
    mk.CreateCounter([], ["c"])
    bump = core.Net("bump")
    bump.CountUp(["c"])
    read = core.Net("read")
    read.RetrieveCount(["c"], ["total"])
    inst = core.execution_step("inst", core.execution_step("one", bump), num_concurrent_instances=n,
                               num_iter=3)
    session.run(plan(mk, inst, read))
    assert fetch(session, "total") == n * 3


def test_num_concurrent_instances_run_on_threads(session):
    barrier = threading.Barrier(4, timeout=5)
    one = core.execution_step("one", _barrier_net("wait", barrier, "done"))
    session.run(core.execution_step("inst", one, num_concurrent_instances=4))
    assert fetch(session, "done") == 1
    assert not barrier.broken


def test_concurrent_instances_with_own_workspaces(session):
    # Each instance's create_workspace child keeps its new blob (tmp) to itself;
    # the counter made before is shared.
    mk = core.Net("mk")
    mk.CreateCounter([], ["c"])
    work = core.Net("work")
    work.Const(7, blob_out="tmp")
    work.CountUp(["c"])
    read = core.Net("read")
    read.RetrieveCount(["c"], ["total"])
    one = core.execution_step("one", work, create_workspace=True)
    session.run(plan(mk, core.execution_step("inst", one, num_concurrent_instances=3), read))
    assert fetch(session, "total") == 3
    assert not has_blob(session, "tmp")


def test_net_step_ignores_concurrency_flags(session):
    # Caffe2 only puts substeps on threads: a step made of nets runs them in order,
    # once per iteration, even with num_concurrent_instances or concurrent_substeps.
    mul = core.Net("mul")
    mul.Mul(["x", mul.Const(2)], ["x"])
    inc = add_net("inc", "x", 1)
    step = core.execution_step("nets", [inc, mul], num_concurrent_instances=3,
                               concurrent_substeps=True, num_iter=2)
    session.run(plan(set_net("init", "x", 0), step))
    assert fetch(session, "x") == ((0 + 1) * 2 + 1) * 2


def test_only_once_without_stop_blob_is_an_error(session):
    from dslc.ir.diagnostics import DSLError
    step = core.execution_step("once", add_net("inc", "x"), only_once=True)
    with pytest.raises(DSLError) as err:
        session.run(plan(set_net("init", "x", 0), step))
    assert err.value.loc is not None and err.value.hint


def test_negative_num_iter_is_an_error(session):
    from dslc.ir.diagnostics import DSLError
    step = core.execution_step("neg", add_net("inc", "x"), num_iter=-1)
    with pytest.raises(DSLError) as err:
        session.run(plan(set_net("init", "x", 0), step))
    assert err.value.loc is not None and err.value.hint


# ----------------------------------------------------------------------------- workspaces


def test_create_workspace_drops_new_blobs_and_updates_parent_blobs(session):
    child = core.Net("child")
    child.Const(41, blob_out="tmp")
    child.Add(["tmp", "acc"], ["acc"])
    cw = core.execution_step("cw", child, create_workspace=True)
    session.run(plan(set_net("init", "acc", 1), cw))
    assert fetch(session, "acc") == 42
    assert not has_blob(session, "tmp")


def test_create_workspace_is_fresh_each_execution(session):
    # tmp is new in the child each iteration: it is written before it is read, so
    # the result only depends on acc, which lives in the parent.
    child = core.Net("child")
    child.Const(2, blob_out="tmp")
    child.Mul(["tmp", "acc"], ["acc"])
    cw = core.execution_step("cw", child, create_workspace=True)
    session.run(plan(set_net("init", "acc", 1), core.execution_step("rep", cw, num_iter=5)))
    assert fetch(session, "acc") == 2 ** 5
    assert not has_blob(session, "tmp")


def test_create_workspace_child_reads_blob_only_it_made_before(session):
    # A blob made by an earlier net of the same child step is visible to later nets.
    a = core.Net("a")
    a.Const(5, blob_out="local")
    b = core.Net("b")
    b.Add(["local", "acc"], ["acc"])
    cw = core.execution_step("cw", [a, b], create_workspace=True)
    session.run(plan(set_net("init", "acc", 10), cw))
    assert fetch(session, "acc") == 15
    assert not has_blob(session, "local")


# ----------------------------------------------------------------------------- reporters


def _slow_loop_net(name, iters_blob, seconds):
    """A net that sleeps ``seconds`` and then bumps ``iters_blob`` (gives reporters time to fire)."""
    def nap(inputs, outputs):
        time.sleep(seconds)
    net = core.Net(name)
    net.Python(nap)([], [])
    net.Add([iters_blob, net.Const(1)], [iters_blob])
    return net


def test_run_every_ms_reporter_runs_periodically_and_at_the_end(session):
    mk = core.Net("mk")
    mk.CreateCounter([], ["reports"])
    report = core.Net("report")
    report.CountUp(["reports"])
    report.Copy(["work"], ["seen"])
    reporter = core.execution_step("reporter", report, run_every_ms=5)
    body = core.execution_step("work", _slow_loop_net("slow", "work", 0.01), num_iter=8)
    read = core.Net("read")
    read.RetrieveCount(["reports"], ["n_reports"])
    start = time.perf_counter()
    session.run(plan(mk, set_net("iw", "work", 0), core.execution_step("main", [body, reporter]), read))
    elapsed_ms = (time.perf_counter() - start) * 1000
    n_reports = fetch(session, "n_reports")
    assert fetch(session, "work") == 8
    # The final report runs after the body, so it saw the body's last value.
    assert fetch(session, "seen") == 8
    # At least the final run; each periodic run waited 5 ms first.
    assert 1 <= n_reports <= elapsed_ms / 5 + 1


def test_run_every_ms_reporter_runs_while_the_body_runs(session):
    # The body blocks until the reporter has run beside it (a 5 s timeout fails the
    # test instead of hanging): proves the periodic runs, not just the final one.
    reported = threading.Event()

    def report(inputs, outputs):
        reported.set()

    def wait(inputs, outputs):
        outputs[0].feed(reported.wait(5))

    report_net = core.Net("report")
    report_net.Python(report)([], [])
    body_net = core.Net("body")
    body_net.Python(wait)([], ["saw_report"])
    main = core.execution_step("main", [core.execution_step("body", body_net),
                                        core.execution_step("reporter", report_net, run_every_ms=2)])
    session.run(main)
    assert fetch(session, "saw_report") is True


def test_reporter_runs_once_even_for_an_instant_body(session):
    mk = core.Net("mk")
    mk.CreateCounter([], ["reports"])
    report = core.Net("report")
    report.CountUp(["reports"])
    reporter = core.execution_step("reporter", report, run_every_ms=10_000)
    read = core.Net("read")
    read.RetrieveCount(["reports"], ["n_reports"])
    main = core.execution_step("main", [core.execution_step("body", add_net("b", "x")), reporter])
    session.run(plan(mk, set_net("ix", "x", 0), main, read))
    assert fetch(session, "n_reports") == 1
    assert fetch(session, "x") == 1


def test_reporter_is_not_inline_in_an_iterated_step(session):
    # With num_iter the body repeats; the reporter is still a thread beside the
    # whole step, not a substep of every iteration: a 10 s interval means only the final run.
    mk = core.Net("mk")
    mk.CreateCounter([], ["reports"])
    report = core.Net("report")
    report.CountUp(["reports"])
    reporter = core.execution_step("reporter", report, run_every_ms=10_000)
    read = core.Net("read")
    read.RetrieveCount(["reports"], ["n_reports"])
    main = core.execution_step("main", [core.execution_step("body", add_net("b", "x")), reporter], num_iter=4)
    session.run(plan(mk, set_net("ix", "x", 0), main, read))
    assert fetch(session, "x") == 4
    assert fetch(session, "n_reports") == 1


def test_deprecated_report_net_runs_at_the_end(session):
    mk = core.Net("mk")
    mk.CreateCounter([], ["reports"])
    report = core.Net("report")
    report.CountUp(["reports"])
    report.Copy(["x"], ["seen"])
    read = core.Net("read")
    read.RetrieveCount(["reports"], ["n_reports"])
    main = core.execution_step("main", add_net("b", "x"), num_iter=3, report_net=report, report_interval=60)
    session.run(plan(mk, set_net("ix", "x", 0), main, read))
    assert (fetch(session, "n_reports"), fetch(session, "seen")) == (1, 3)


# ----------------------------------------------------------------------------- inside tasks


def test_ops_net_step_inside_a_task(session):
    inc = core.Net("inc")
    with Task() as task:
        total = ops.Const(100)
        inc.Add([total, inc.Const(2)], [total])
        ops.net(core.execution_step("thrice", inc, num_iter=3))
        ops.Add([total, ops.Const(1)], [total])
        out = final_output(total)
    session.run(task)
    assert out.fetch() == 100 + 3 * 2 + 1


def test_ops_net_step_with_stop_blob_inside_a_task(session):
    check = core.Net("check")
    bump = core.Net("bump")
    with Task() as task:
        x = ops.Const(0)
        bump.Add([x, bump.Const(1)], [x])
        check.GE([x, check.Const(6)], ["done"])
        ops.net(core.execution_step("until6", [bump, check], should_stop_blob="done"))
        out = final_output(x)
    session.run(task)
    assert out.fetch() == 6


def test_ops_net_makes_the_net_current(session):
    # Caffe2 quirk (spec 2.3): a Net passed to ops.net becomes the current net, so
    # the Mul is appended to my_net and runs on both uses: ((0+3)*10 + 3)*10.
    with Task() as task:
        total = ops.Const(0)
        net = core.Net("my_net")
        net.Add([total, net.Const(3)], [total])
        ops.net(net)
        ops.Mul([total, ops.Const(10)], [total])
        ops.net(net)
        out = final_output(total)
    session.run(task)
    assert out.fetch() == ((0 + 3) * 10 + 3) * 10
    assert [op.type for op in net.ops()][-1] == "Mul"


# ----------------------------------------------------------------------------- failures


def _failing_net(name):
    def boom(inputs, outputs):
        raise ValueError("boom")
    net = core.Net(name)
    net.Python(boom)([], [])
    return net


def test_failing_concurrent_substep_cancels_its_siblings(session):
    from dslc.ir.diagnostics import DSLError
    # The sibling would nap 1 ms for 2000 iterations (2 s); the failure must stop it
    # early and surface as a located error.
    busy = _slow_loop_net("busy", "spins", 0.001)
    spin = core.execution_step("spin", busy, num_iter=2000)
    fail = core.execution_step("fail", _failing_net("fail"))
    par = core.execution_step("par", [spin, fail], concurrent_substeps=True)
    with pytest.raises(DSLError) as err:
        session.run(plan(set_net("init", "spins", 0), par))
    assert "boom" in str(err.value) and err.value.loc is not None
    assert fetch(session, "spins") < 2000


def test_failing_reporter_fails_the_step_after_the_body(session):
    from dslc.ir.diagnostics import DSLError
    reporter = core.execution_step("reporter", _failing_net("bad_report"), run_every_ms=60_000)
    main = core.execution_step("main", [core.execution_step("body", add_net("b", "x")), reporter])
    with pytest.raises(DSLError) as err:
        session.run(plan(set_net("ix", "x", 0), main))
    assert "boom" in str(err.value)
    assert fetch(session, "x") == 1  # the body ran before the final report failed


def test_parallel_region_in_a_long_loop_leaves_no_cancel_tokens(session, backend):
    # Each execution of a concurrent step makes a cancel token for its threads; a
    # finished one must not stay attached to the run's token.
    if backend != "interp":
        pytest.skip("inspects the interpreter's executor")
    from dslc.backends.interp.executor import CancelToken
    made = []
    original = CancelToken.child

    def spy(self):
        t = original(self)
        made.append((self, t))
        return t
    bump = core.Net("bump")
    bump.CountUp(["c"])
    mk = core.Net("mk")
    mk.CreateCounter([], ["c"])
    par = core.execution_step("par", [core.execution_step(f"s{i}", bump) for i in range(2)],
                              concurrent_substeps=True, num_iter=50)
    CancelToken.child = spy
    try:
        session.run(plan(mk, par))
    finally:
        CancelToken.child = original
    assert len(made) == 50
    assert all(t not in parent.children for parent, t in made)


def test_a_task_nested_in_a_step_keeps_its_instances(session):
    """Task.get_step() inside another step: N concurrent instances, each with its own
    workspace for instance blobs, around one task init and one task exit."""
    n, k = 4, 3
    threads, lock = set(), threading.Lock()
    # every instance waits here for all n: they can only pass if they run at the same
    # time (a sleep made the overlap likely, not certain, on a loaded machine)
    all_running = threading.Barrier(n, timeout=30)

    def note_thread(inputs, outputs):
        with lock:
            threads.add(threading.get_ident())
        all_running.wait()

    with Task(num_instances=n) as inner:
        with ops.task_init():
            shared = ops.CreateCounter([], init_count=0)
        with ops.task_instance_init():
            mine = ops.CreateCounter([], init_count=0)
        with ops.loop(k):
            ops.CountUp([shared])
            ops.CountUp([mine])
        ops.Python(note_thread)([], [])
        with ops.task_instance_exit():
            with ops.loop(ops.RetrieveCount([mine])):  # k more per instance, if `mine` is its own
                ops.CountUp([shared])
        with ops.task_exit():
            total = ops.RetrieveCount([shared])
    with Task() as outer:
        ops.net(core.execution_step("outer", [inner.get_step()]))
    session.run(outer)
    assert fetch(session, total) == n * (k + k)
    assert len(threads) == n
    assert not has_blob(session, mine)  # instance blobs lived in the instances' workspaces
