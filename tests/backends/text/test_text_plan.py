"""The text backend's plans (``dslc plan``): whole expected plans, written by hand.

Each expected plan is what a person would write to explain the job: the job's own
variable names, constants as literals, loops and conditionals as Python blocks,
phases and instance counts as labelled blocks, and nothing the job cannot observe
(stores to auto-named blobs nobody reads, loop counters nobody looks at).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dslc.driver import cli
from dslc.ir import OPS
from dslc.ir.diagnostics import DSLError
import paths

ROOT = paths.ROOT
EXAMPLES = ROOT / "examples"


def plan(capsys, *argv) -> str:
    code = cli.main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def job_file(tmp_path, monkeypatch, text: str, name: str = "job.py") -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return name


def expected(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root, so the examples are shown as examples/NAME.py."""
    monkeypatch.chdir(ROOT)


# ----------------------------------------------------------------------------- the examples


def test_loops_example(capsys, at_root):
    assert plan(capsys, "examples/loops.py", "--no-locs") == expected("""
        plan of examples/loops.py:
          group on node local:
            task local/task, outputs total, total_large, total_small, total_tiny:
              total = 0
              total_large = 0
              total_small = 0
              total_tiny = 0
              for i in range(10):
                outer = Mul(i, 10)
                for j in range(i):
                  val = Add(outer, j)
                  if GE(val, 80):
                    total_large = Add(total_large, val)
                  elif GE(val, 50):
                    total_small = Add(total_small, val)
                  else:
                    total_tiny = Add(total_tiny, val)
                  total = Add(total, val)
        """)


def test_loops_example_after_passes_is_the_same_story(capsys, at_root):
    # promotion turns the blobs into loop-carried values; the plan reads the same
    before = plan(capsys, "examples/loops.py", "--no-locs")
    after = plan(capsys, "examples/loops.py", "--no-locs", "--after-passes")
    assert after == before


def test_setup_example_phases(capsys, at_root):
    assert plan(capsys, "examples/setup.py", "--no-locs") == expected("""
        plan of examples/setup.py:
          group on node local:
            task local/task, outputs six, seven_1, seven_2:
              init:
                one = 1
                three = 3
              body:
                two = Add(one, one)
                accum = Add(two, three)
                six = Add(accum, one)
                accum = Add(accum, one)
                seven_2 = Add(accum, one)
              exit:
                seven_1 = Add(accum, one)
        """)


def test_setup_example_after_passes_shows_the_shared_value(capsys, at_root):
    # CSE merges `six` and the in-place `accum + one`: accum is then a copy of six
    text = plan(capsys, "examples/setup.py", "--no-locs", "--after-passes")
    assert text == expected("""
        plan of examples/setup.py:
          group on node local:
            task local/task, outputs six, seven_1, seven_2:
              init:
                one = 1
                three = 3
              body:
                two = Add(one, one)
                accum = Add(two, three)
                six = Add(accum, one)
                seven_2 = Add(six, one)
                accum = six
              exit:
                seven_1 = Add(accum, one)
        """)


def test_multi_instance_example(capsys, at_root):
    assert plan(capsys, "examples/multi_instance.py", "--no-locs") == expected("""
        plan of examples/multi_instance.py:
          group on node local:
            task local/task, 10 instances, outputs total1, total2, total3:
              init (once):
                global_counter = CreateCounter()
                global_counter2 = CreateCounter()
                global_counter3 = CreateCounter()
              each instance:
                init:
                  task_counter = CreateCounter()
                body:
                  local_counter = CreateCounter()
                  for _ in range(15):
                    CountUp(global_counter)
                    CountUp(task_counter)
                    CountUp(local_counter)
                  count3 = RetrieveCount(local_counter)
                  for _ in range(Mul(count3, count3)):
                    CountUp(global_counter3)
                exit:
                  count2 = RetrieveCount(task_counter)
                  for _ in range(Mul(count2, count2)):
                    CountUp(global_counter2)
              exit (once):
                total1 = RetrieveCount(global_counter)
                total2 = RetrieveCount(global_counter2)
                total3 = RetrieveCount(global_counter3)
        """)


def test_python_op_example(capsys, at_root):
    assert plan(capsys, "examples/python_op.py", "--no-locs") == expected("""
        plan of examples/python_op.py:
          group on node local:
            task local/task, 64 instances, global workspace, outputs instances, calls:
              each instance:
                for _ in range(4):
                  Python(python_op_builder)()
              exit (once):
                instances, calls = Python(report)()
        """)


# ----------------------------------------------------------------------------- locations, stops


STOP_JOB = """
    from dslc.net_builder import ops
    from dslc.task import Task, final_output


    def build_job():
        with Task():
            x = ops.Const(5)
            steps = ops.Const(0)
            with ops.loop():
                ops.stop_if(ops.EQ([x, ops.Const(0)]))
                ops.Add([x, ops.Const(-1)], [x])
                ops.Add([steps, ops.Const(1)], [steps])
            return final_output(steps)
    """


def test_plan_with_locations_and_a_stop(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, STOP_JOB)
    assert plan(capsys, job) == (
        "plan of job.py:\n"
        "  group on node local:\n"
        "    task local/task, outputs steps:  # line 6\n"
        "      x = 5                          # line 7\n"
        "      steps = 0                      # line 8\n"
        "      while True:                    # line 9\n"
        "        if EQ(x, 0): break           # line 10\n"
        "        x = Add(x, -1)               # line 11\n"
        "        steps = Add(steps, 1)        # line 12\n")


def test_compile_with_the_text_backend_prints_the_optimized_plan(capsys, tmp_path, monkeypatch, default_pipeline):
    job = job_file(tmp_path, monkeypatch, STOP_JOB)
    code = cli.main(["compile", job, "--backend", "text"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan_text, summary = out.split("compiled ", 1)
    # after promotion the start values are copied in at the loop (line 9)
    assert plan_text == (
        "plan of job.py:\n"
        "  group on node local:\n"
        "    task local/task, outputs steps:  # line 6\n"
        "      x = 5                          # line 9\n"
        "      steps = 0                      # line 9\n"
        "      while True:                    # line 9\n"
        "        if EQ(x, 0): break           # line 10\n"
        "        x = Add(x, -1)               # line 11\n"
        "        steps = Add(steps, 1)        # line 12\n")
    assert summary.startswith("job.py for text: 1 task, ")


def test_counted_loop_that_stops_early_keeps_its_exit_index(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                k = ops.Const(0)
                with ops.loop(4) as lp:
                    ops.Add([k, lp.iter()], [k])
                    ops.stop_if(ops.GE([k, ops.Const(3)]))
                after = ops.Add([lp.iter(), ops.Const(100)])
                return final_output(after)
        """)
    # loop.iter() after the loop is the count, or the index where the stop fired
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/task, outputs after:
              k = 0
              iters = 4
              for i in range(4):
                k = Add(k, i)
                if GE(k, 3):
                  iters = i
                  break
              after = Add(iters, 100)
        """)


def test_while_net_and_stop_blob_steps(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, """
        from dslc import core
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                n = ops.Const(3)
                with ops.WhileNet():
                    with ops.Condition():
                        ops.GT([n, ops.Const(0)])
                    ops.Sub([n, ops.Const(1)], [n])
                init = core.Net("init")
                init.Const(0, blob_out="count")
                body = core.Net("body")
                body.Add(["count", body.Const(1)], ["count"])
                body.GE(["count", body.Const(3)], ["done"])
                ops.net(core.execution_step("all", [
                    init, core.execution_step("until_done", body, should_stop_blob="done")]))
                return final_output(n)
        """)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/task, outputs n:
              n = 3
              while True:
                if Not(GT(n, 0)): break
                n = Sub(n, 1)
              count = 0
              while True:
                count = Add(count, 1)
                done = GE(count, 3)
                if done: break
        """)


def test_concurrency_reporters_and_fresh_workspaces(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, """
        from dslc import core
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task(name="t") as task:
                init = core.Net("init")
                init.Const(0, blob_out="x")
                body = core.Net("body")
                body.Add(["x", body.Const(1)], ["x"])
                report = core.Net("report")
                report.Print(["x"], [])
                side = core.Net("side")
                side.Const(7, blob_out="y")
                rep = core.execution_step("rep", report)
                rep.RunEveryMillis(50)
                ops.net(core.execution_step("main", [
                    init,
                    core.execution_step("work", [core.execution_step("inc", body, num_iter=100), rep]),
                    core.execution_step("inst", [core.execution_step("w", body)], num_concurrent_instances=3),
                    core.execution_step("both", [core.execution_step("a", body), core.execution_step("b", side)],
                                        concurrent_substeps=True),
                    core.execution_step("fresh", side, create_workspace=True)]))
                out = final_output(ops.Copy("x"))
            return task, {"x": out}
        """)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/t, global workspace, outputs out:
              x = 0
              with reporters:
                run:
                  for _ in range(100):
                    x = Add(x, 1)
                every 50 ms, and once at the end:
                  Print(x)
              3 instances, concurrently:
                x = Add(x, 1)
              concurrently:
                step 1:
                  x = Add(x, 1)
                step 2:
                  y = 7
              in a fresh workspace:
                y = 7
              out = Copy(x)
        """)


# ----------------------------------------------------------------------------- names


def test_a_helper_called_twice_gets_two_names(capsys, tmp_path, monkeypatch):
    # both Adds come from the helper's line `d = ...`; the first is still needed when the
    # second is made, so the second is d_2. The unnamed output keeps its blob's base name,
    # in lower case (Add_3 -> add_3), as every name Caffe2 made up from an op type
    job = job_file(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def double(v):
            d = ops.Add([v, v])
            return d

        def build_job():
            with Task():
                a = double(ops.Const(1))
                b = double(a)
                return final_output(ops.Add([a, b]))
        """)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/task, outputs add_3:
              d = Add(1, 1)
              d_2 = Add(d, d)
              add_3 = Add(d, d_2)
        """)


def test_names_the_user_gave_blobs_win(capsys, tmp_path, monkeypatch):
    # "hits" is the blob's own name; constants are literals (long ones by type); the
    # lines come in the IR's order: constants are written where they are stored, which is
    # before the counter is read (a synchronising op)
    job = job_file(tmp_path, monkeypatch, """
        import numpy as np
        from dslc import core
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                counter = ops.CreateCounter([], ["hits"], init_count=3)
                weights = ops.Const(np.arange(20, dtype=np.float32))
                small = ops.Const(np.array([1.5, 2.5], dtype=np.float32))
                half = ops.Scale(ops.Sum([weights, weights]), scale=0.5)
                label = ops.Const("spam")
                as_int = ops.Cast(ops.Const(2.0), to=core.DataType.INT64)
                return [final_output(x) for x in (ops.RetrieveCount(counter), half, small, label, as_int)]
        """)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/task, outputs retrievecount, half, small, label, as_int:
              hits = CreateCounter(init_count=3)
              half = Scale(Sum(array(f32[20]), array(f32[20])), scale=0.5)
              as_int = Cast(2.0, to=10)
              small = [1.5, 2.5]
              label = 'spam'
              retrievecount = RetrieveCount(hits)
        """)


# ----------------------------------------------------------------------------- queues and IR files


@pytest.mark.skipif("CreateBlobsQueue" not in OPS, reason="the queue ops are not declared yet")
def test_queue_ops_read_as_method_calls(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, TaskGroup, WorkspaceType, final_output

        def build_job():
            with TaskGroup(WorkspaceType.GLOBAL) as tg:  # the consumer sees the producer's queue
                with Task(name="producer"):
                    q = ops.CreateBlobsQueue([], ["q"], capacity=4, num_blobs=1)
                    with ops.loop(5) as lp:
                        ops.EnqueueBlobs([q, lp.iter()], [lp.iter()])
                    ops.CloseBlobsQueue([q], [])
                with Task(name="consumer"):
                    total = ops.Const(0)
                    with ops.loop():
                        item, done = ops.SafeDequeueBlobs(["q"], 2)
                        ops.stop_if(done)
                        ops.Add([total, item], [total])
                    out = final_output(total)
            return tg, {"total": out}
        """)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/producer, global workspace:
              q = Queue(capacity=4)
              for i in range(5):
                q.put(i)
              q.close()
            task local/consumer, global workspace, outputs total:
              total = 0
              while True:
                item, done = q.get_unless_closed()
                if done: break
                total = Add(total, item)
        """)


def test_plan_of_an_ir_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.dslir").write_text(textwrap.dedent("""\
        module {
          group body {
            task @"t" {outputs = [@"y"]} body {
              %x = load @"x" : i64
              %c = Const {value = dense<i64: 2>} : i64
              %y = Mul(%x, %c) : i64
              store @"y"(%y)
            }
          }
        }
        """), encoding="utf-8")
    assert plan(capsys, "job.dslir") == expected("""
        plan:
          group on node local:
            task t, outputs y:
              y = Mul(x, 2)
        """)


def test_plan_json(capsys, at_root):
    import json
    code = cli.main(["plan", "examples/multi_instance.py", "--json", "--no-locs"])
    out, _ = capsys.readouterr()
    assert code == 0
    (got,) = json.loads(out)["plans"]
    assert got["tasks"] == [{"name": "local/task", "instances": 10, "workspace": "private",
                             "node": "local", "outputs": ["total1", "total2", "total3"]}]
    assert got["source"] == "examples/multi_instance.py"
    assert got["lines"][0] == {"depth": 0, "text": "plan of examples/multi_instance.py:", "loc": None}
    # the second CountUp of the instance body's loop (examples/multi_instance.py:31)
    assert {"depth": 6, "text": "CountUp(task_counter)", "loc": "examples/multi_instance.py:31"} in got["lines"]


@pytest.mark.slow
def test_the_same_job_gives_the_same_text_in_another_process(tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, (EXAMPLES / "multi_instance.py").read_text(encoding="utf-8"))
    runs = []
    for seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-m", "dslc.cli", "plan", job, "--after-passes"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert proc.returncode == 0, proc.stderr
        runs.append(proc.stdout)
    assert runs[0] == runs[1] and "CountUp(global_counter3)" in runs[0]


def test_a_plan_cannot_be_run(capsys):
    code = cli.main(["run", str(EXAMPLES / "loops.py"), "--backend", "text"])
    _, err = capsys.readouterr()
    assert code == 2  # (run offers only the backends that run: issue 42)
    assert err.startswith("dslc run: error: argument --backend: invalid choice: 'text' (choose from 'interp', "
                          "'numba'")  # (and any other backend that runs: xla when installed)
    assert err.strip().endswith("); the text backend writes plans, it does not run them: dslc plan JOB.py "
                                "shows the plan; see 'dslc run --help'")


def test_text_backend_run_raises_a_user_error():
    from dslc.backends.text import TextBackend
    from dslc.ir import parse
    module = parse('module {\n  group body {\n  }\n}\n')
    with pytest.raises(DSLError, match="writes plans"):
        TextBackend().run(module, None)


def test_values_handed_round_a_loop_are_assigned_together(capsys, tmp_path, monkeypatch):
    # Fibonacci: the body yields (b, a + b); copying one by one would lose the old b
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fib.dslir").write_text(textwrap.dedent("""\
        module {
          group body {
            task @"t" {outputs = [@"a", @"b"]} body {
              %one = Const {value = dense<i64: 1>} : i64
              %two = Const {value = dense<i64: 2>} : i64
              %n = Const {value = dense<i64: 3>} : i64
              %ra, %rb = for(%n, %one, %two) : i64, i64 {
              ^(%i: i64, %a: i64, %b: i64):
                %c = Add(%a, %b) : i64
                yield(%b, %c)
              }
              store @"a"(%ra)
              store @"b"(%rb)
            }
          }
        }
        """), encoding="utf-8")
    assert plan(capsys, "fib.dslir") == expected("""
        plan:
          group on node local:
            task t, outputs a, b:
              a = 1
              b = 2
              for _ in range(3):
                c = Add(a, b)
                a, b = b, c
        """)


def test_checkpoint_ops_name_their_blobs(capsys, tmp_path, monkeypatch):
    job = job_file(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                w = ops.Const(3, blob_out="w")
                ops.Save([w], [], db="ck.db", db_type="dslcdb", input_names=["w"])
                back = ops.Load([], ["w2"], db="ck.db", db_type="dslcdb", source_blob_names=["w"])
                return final_output(ops.Add([back, w]))
        """)
    # the saved value is a constant, but a checkpoint is about the blob: Save(w)
    assert plan(capsys, job, "--no-locs") == expected("""
        plan of job.py:
          group on node local:
            task local/task, outputs add:
              w = 3
              Save(w, db='ck.db', db_type='dslcdb')
              w2 = Load(db='ck.db', db_type='dslcdb', source_blob_names=['w'])
              add = Add(w2, w)
        """)


# ----------------------------------------------------------------------------- plans that run
#
# The strongest check that the plan's names never mislead: run the plan's own lines as
# Python (ops as numpy functions below, blocks of the outline as `if True:`) and compare
# with the plain-Python evaluator of random programs (tests/random/programs.py).


class _Counter:
    def __init__(self, n):
        self.n = int(n)


def _num(x):
    """Plan literals are Python numbers: give them the dtypes the programs use."""
    if isinstance(x, bool):
        return np.bool_(x)
    if isinstance(x, int):
        return np.int64(x)
    if isinstance(x, float):
        return np.float32(x)
    return x


def _binary(f):
    return lambda a, b: f(np.asarray(_num(a)), np.asarray(_num(b)))[()]


def _count_down(c):
    done = c.n <= 0
    c.n -= 1
    return np.bool_(done)


def _reset(c, init_count=0):
    old, c.n = c.n, int(init_count)
    return np.int64(old)


def _count_up(c):
    old, c.n = c.n, c.n + 1
    return np.int64(old)


CASTS = {1: np.float32, 5: np.bool_, 10: np.int64}
PLAN_OPS = {
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
    "Max": _binary(np.maximum), "Min": _binary(np.minimum),
    "GE": _binary(np.greater_equal), "GT": _binary(np.greater), "LE": _binary(np.less_equal),
    "LT": _binary(np.less), "EQ": _binary(np.equal), "NE": _binary(np.not_equal),
    "And": _binary(np.logical_and), "Or": _binary(np.logical_or), "Xor": _binary(np.logical_xor),
    "Not": lambda a: np.logical_not(_num(a)),
    "Scale": lambda a, scale=1.0: (np.asarray(_num(a)) * np.float32(scale))[()],
    "Cast": lambda a, to: CASTS[to](_num(a)),
    "Copy": lambda a: _num(a),
    "CreateCounter": lambda init_count=0: _Counter(init_count),
    "CountUp": _count_up, "CountDown": _count_down, "ResetCounter": _reset,
    "RetrieveCount": lambda c: np.int64(c.n), "CheckCounterDone": lambda c: np.bool_(c.n <= 0),
}
PYTHON_HEADS = ("for ", "while ", "if ", "elif ", "else:")


def run_plan(writer) -> dict:
    """Execute a plan's lines; returns the namespace they leave."""
    code = []
    for ln in writer.lines:
        outline = ln.text.endswith(":") and not ln.text.startswith(PYTHON_HEADS)
        code.append("  " * ln.depth + ("if True:" if outline else ln.text))
    ns = dict(PLAN_OPS)
    with np.errstate(all="ignore"):
        exec(compile("\n".join(code) + "\n", "<plan>", "exec"), ns)
    return ns


@pytest.mark.slow
@pytest.mark.random  # (random programs: the nightly run widens them too)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("passes", ["none", "default"])
def test_random_programs_plans_compute_what_the_programs_compute(passes):
    from hypothesis import HealthCheck, given, note, settings

    import programs as P
    from dslc import workspace
    from dslc.trace import names as dslc_names
    from dslc.backends.text.render import PlanWriter
    from dslc.backends.common.source import SourceNames
    from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
    from dslc.lower import lower_group
    from dslc.session import LocalSession

    asked = os.environ.get("DSLC_HYPOTHESIS_EXAMPLES")  # wider runs on request, as elsewhere
    @settings(max_examples=int(asked) if asked else 40, derandomize=not asked, database=None,
              deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(program=P.programs())
    def check(program):
        dslc_names.reset()
        workspace.ResetWorkspace()
        task, _ = P.build(program)
        module = lower_group(LocalSession.as_group(task), "", {})
        if passes == "default":
            PassManager(list(DEFAULT_PIPELINE)).run(module)
        writer = PlanWriter(module, SourceNames())
        note(P.render(program))
        note(writer.text())
        ns = run_plan(writer)
        for name, want in P.evaluate(program).items():
            got = np.asarray(ns[writer.names.blob(name)])
            if isinstance(want, np.float32):
                assert np.isclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), name
            else:
                assert got.item() == want, name

    check()
