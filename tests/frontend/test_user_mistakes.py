"""User mistakes that used to exit 0 silently, or fail without a line or with a misleading
message: each is now one ``file:line: error: ...`` line on stderr and exit code 2.

Each job file marks the line to blame with ``# @here``; the test finds it in the text
it wrote, runs the job through the CLI, and checks the line, the code and key words.
"""
from __future__ import annotations

import textwrap

import pytest

from dslc.driver import cli
import paths

BACKENDS = ["interp", "numba"]


def marked_job(tmp_path, monkeypatch, text: str, name: str = "job.py") -> tuple[str, int]:
    """Write the job; (its name, the 1-based line marked ``# @here`` or ``// @here``)."""
    monkeypatch.chdir(tmp_path)
    text = textwrap.dedent(text).lstrip("\n")
    (tmp_path / name).write_text(text, encoding="utf-8")
    (line,) = [i + 1 for i, t in enumerate(text.splitlines()) if t.rstrip().endswith("@here")]
    return name, line


def error_line(capsys, *argv) -> str:
    """Run the CLI, which must fail with a user error; its one stderr line."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, err
    (line,) = err.splitlines()
    return line


def fails_at(capsys, tmp_path, monkeypatch, text, *words, argv=("run",), name="job.py") -> str:
    job, line = marked_job(tmp_path, monkeypatch, text, name)
    got = error_line(capsys, *argv, job)
    assert got.startswith(f"{job}:{line}: "), got
    for w in words:
        assert w in got, f"{w!r} not in {got!r}"
    return got


# ----------------------------------------------------------------------------- silent nonsense


def test_a_task_with_zero_instances(capsys, tmp_path, monkeypatch):
    fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task(num_instances=0):  # @here
                return final_output(ops.Const(1))
    """, "num_instances", "got 0", ">= 1")


PIPE_JOB = """
    import numpy as np
    from dslc import core
    from dslc.dataset import Dataset
    from dslc.pipeline import pipe
    from dslc.schema import Scalar, Struct
    from dslc.task import Task, TaskGroup, WorkspaceType

    def build_job():
        with TaskGroup(WorkspaceType.GLOBAL) as setup:
            init = core.Net("init")
            ds = Dataset(Struct(("x", Scalar(np.int64))))
            ds.init_empty(init)
            Task(step=init)
        with TaskGroup(WorkspaceType.GLOBAL) as work:
            {body}
        return setup, work
"""


@pytest.mark.parametrize("processor", ["processor=lambda rec: rec, ", ""])
@pytest.mark.parametrize("threads", ["num_runtime_threads=0", "num_threads=0"])
def test_a_pipe_without_threads_whose_reader_nothing_reads(capsys, tmp_path, monkeypatch, threads,
                                                           processor):
    body = f"pipe(ds.reader(), {processor}{threads})  # @here"
    fails_at(capsys, tmp_path, monkeypatch, PIPE_JOB.format(body=body),
             threads, "nothing in the job reads that reader", "does nothing")


@pytest.mark.parametrize("processor", ["processor=lambda rec: rec, ", ""])
def test_a_pipe_without_threads_whose_reader_is_piped_on_is_fine(capsys, tmp_path, monkeypatch,
                                                                  processor):
    body = (f"reader = pipe(ds.reader(), {processor}num_runtime_threads=0)\n"
            "            pipe(reader, num_runtime_threads=1)")
    job, _ = marked_job(tmp_path, monkeypatch, PIPE_JOB.format(body=body + "  # @here"))
    assert cli.main(["run", job]) == 0


@pytest.mark.parametrize("threads", ["num_runtime_threads=-1", "num_threads=-2"])
def test_a_pipe_with_a_negative_thread_count(capsys, tmp_path, monkeypatch, threads):
    body = f"pipe(ds.reader(), {threads})  # @here"
    what = threads.split("=")[0]
    got = fails_at(capsys, tmp_path, monkeypatch, PIPE_JOB.format(body=body), f"{what} must be an int >= 0")
    assert "num_instances" not in got


@pytest.mark.parametrize("argv, words", [
    (["--print-ir-after", "bogus"], ["--print-ir-after: unknown pass 'bogus'"]),
    (["--print-ir-after", "cs"], ["--print-ir-after: unknown pass 'cs'", "did you mean cse"]),
    (["--passes", "cse", "--print-ir-after", "dce"], ["--print-ir-after dce", "do not include dce"]),
    (["--passes", "none", "--print-ir-after", "dce"], ["(none) do not include dce"]),
    (["--passes", "cse,bogus"], ["--passes: unknown pass 'bogus'"]),
])
def test_pass_options_that_would_do_nothing(capsys, tmp_path, monkeypatch, argv, words):
    job, _ = marked_job(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                return final_output(ops.Const(1))  # @here
    """)
    for command in ("run", "ir", "compile"):
        got = error_line(capsys, command, job, *argv)
        assert got.startswith(f"dslc {command}: error: "), got
        for w in words:
            assert w in got, got


# ----------------------------------------------------------------------------- located and right


def test_final_output_of_something_that_is_not_a_blob(capsys, tmp_path, monkeypatch):
    got = fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                ops.Const(1)
                return final_output(5)  # @here
    """, "got int 5", "final_output(ops.Const(5))")
    assert "'5'" not in got  # the int is not taken for a blob name


@pytest.mark.parametrize("returns", ["task, final_output(x)  # @here",
                                     "group, {'x': final_output(x)}  # @here"])
def test_final_output_after_the_task_block(capsys, tmp_path, monkeypatch, returns):
    # final_output outside every Task makes a task of its own; the runnables build_job
    # returns never run it, so its output could never be fetched
    fails_at(capsys, tmp_path, monkeypatch, f"""
        from dslc.net_builder import ops
        from dslc.task import Task, TaskGroup, final_output

        def build_job():
            with TaskGroup() as group:
                with Task() as task:
                    x = ops.Const(1)
            return {returns}
    """, "outside any Task", "inside the `with Task():` block")


def test_final_output_alone_after_the_task_block_runs(capsys, tmp_path, monkeypatch):
    job, _ = marked_job(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                x = ops.Const(7)
            # nothing else is returned, so final_output's own task runs
            return final_output(x)  # @here
    """)
    assert cli.main(["run", job]) == 0
    assert capsys.readouterr().out.strip().endswith("= 7")


def test_a_task_output_nothing_stores(capsys, tmp_path, monkeypatch):
    fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                ops.Const(1)
                return final_output("nobody")  # @here
    """, "output 'nobody' was never written")


def test_a_job_without_a_stop_condition(capsys, tmp_path, monkeypatch):
    fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.checkpoint import Job
        from dslc.net_builder import ops
        from dslc.task import Task

        def build_job():
            with Job() as job:  # @here
                with Task():
                    ops.Const(1)
            return job
    """, "no stop condition", "add_stop_condition")


def test_a_blob_written_in_another_tasks_private_workspace(capsys, tmp_path, monkeypatch):
    got = fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, TaskGroup, final_output

        def build_job():
            with TaskGroup() as group:
                with Task(name="writer"):
                    ops.Const(1, blob_out="x")
                with Task(name="reader"):
                    y = final_output(ops.Add(["x", ops.Const(1)]))  # @here
            return group, y
    """, "'x'", "only task 'local/writer' writes it", "private workspace", "WorkspaceType.GLOBAL")
    assert "nothing writes it" not in got


def test_a_blob_shared_through_a_global_group_is_fine(capsys, tmp_path, monkeypatch):
    job, _ = marked_job(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, TaskGroup, WorkspaceType, final_output

        def build_job():
            with TaskGroup(WorkspaceType.GLOBAL) as group:
                with Task(name="writer"):
                    ops.Const(1, blob_out="x")
            with TaskGroup(WorkspaceType.GLOBAL) as later:
                with Task(name="reader"):
                    y = final_output(ops.Add(["x", ops.Const(1)]))  # @here
            return group, later, y
    """)
    assert cli.main(["run", job]) == 0
    assert capsys.readouterr().out.endswith(" = 2\n")


def test_a_loop_count_beyond_int64(capsys, tmp_path, monkeypatch):
    got = fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task

        def build_job():
            with Task():
                with ops.loop(2**70):  # @here
                    ops.Const(1)
    """, str(2**70), "does not fit in an int64")
    assert "str" not in got


def test_count_until_a_negative_number(capsys, tmp_path, monkeypatch):
    got = fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.dataio import CountUntil
        from dslc.pipeline import pipe

        def build_job():
            pipe(CountUntil(-5))  # @here
    """, "got -5", ">= 0")
    assert "CreateCounter" not in got


def test_a_task_inside_a_task(capsys, tmp_path, monkeypatch):
    got = fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                x = ops.Const(1)
                with Task():  # @here
                    y = ops.Add([x, x])
                return final_output(y)
    """, "a Task cannot be opened inside another Task", "opened at job.py:5")
    assert "GivenTensorInt64Fill" not in got


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_time_error_in_an_ir_file_without_locations(capsys, tmp_path, monkeypatch, backend):
    fails_at(capsys, tmp_path, monkeypatch, """
        module {
          group body {
            task @"t" {outputs = [@"y"]} body {
              %x = Const {value = dense<i64: 7>} : i64
              %c = Const {value = dense<i64: 0>} : i64
              %y = Div(%x, %c) : i64  // @here
              store @"y"(%y)
            }
          }
        }
    """, "runtime error", "division by zero", argv=("run", "--backend", backend), name="job.dslir")


# ----------------------------------------------------------------------------- compile and ops


def _ir_op_lines(text: str) -> int:
    """Ops in printed IR, counted as a reader would: every line but closing braces, region
    labels and block arguments, less the ``module`` line (the printer's grammar)."""
    skip = ("}", "^(")
    lines = [t.strip() for t in text.splitlines() if t.strip()]
    return sum(1 for t in lines if not t.startswith(skip) and not t.startswith("module ")) 


def test_compile_for_numba_says_what_compiled_and_why_not(capsys, monkeypatch, default_pipeline):
    import re
    monkeypatch.chdir(paths.ROOT)
    assert cli.main(["ir", "-O", "--no-locs", "examples/loops.py"]) == 0
    ir_ops = _ir_op_lines(capsys.readouterr().out)
    from dslc.backends.numba import islands
    monkeypatch.setattr(islands, "MIN_WORK", 5000)  # the default (the suite may run with 0)
    assert cli.main(["compile", "examples/loops.py", "--backend", "numba"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "'" not in out  # no Python dict or repr
    from dslc.ir.passes import DEFAULT_PIPELINE
    assert f": 1 task, {ir_ops} ops after {len(DEFAULT_PIPELINE)} passes\n" in out and f"\n  ops: {ir_ops}\n" in out
    assert "\n  regions compiled: none\n" in out
    why = dict((what, int(n)) for n, what in re.findall(r"\n +(\d+)  ([^\n]+)", out))
    assert why["compilable, but under the work threshold (5000)"] > 0
    assert why["store: workspace access"] == 4  # the four outputs (examples/loops.py returns four)
    assert "set DSLC_NUMBA_MIN_WORK=0 to compile every compilable region" in out


def test_ops_prints_the_reference_an_installed_dslc_lacks(capsys, tmp_path):
    from dslc.ir import OPS
    assert cli.main(["ops"]) == 0
    text = capsys.readouterr().out
    names = [d.name for d in OPS]
    assert f"\n{len(names)} operators in " in text
    assert all(f"| `{n}` |" in text for n in names)
    assert cli.main(["ops", "Div"]) == 0
    (row,) = [t for t in capsys.readouterr().out.splitlines() if t.startswith("| `")]
    assert row.startswith("| `Div` | 2 | 1 |")
    got = error_line(capsys, "ops", "Cnst")
    assert got == "error: no operator 'Cnst' in the op table; did you mean Const or Cast or Concat?"


def test_an_unknown_operator_points_to_dslc_ops_with_the_tables_count(capsys, tmp_path, monkeypatch):
    from dslc.ir import OPS
    fails_at(capsys, tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task

        def build_job():
            with Task():
                ops.Qwertyuiop([], [])  # @here
    """, f"`dslc ops` lists all {len(list(OPS))} operators")


def test_help_tells_the_truth_about_defaults_and_ir_files(capsys):
    assert cli.main(["compile", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: $DSLC_PIPELINE if set, else default)" in text and "(default: none)" not in text
    assert cli.main(["ir", "--help"]) == 0
    assert ".dslir" in capsys.readouterr().out
