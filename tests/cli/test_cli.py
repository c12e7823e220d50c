"""The ``dslc`` command line: outputs, exit codes, and one-line error messages.

Most tests call ``dslc.driver.cli.main([...])`` in-process and read what it printed with
``capsys``; a few run the installed ``dslc`` command in a subprocess.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from dslc.driver import cli
import paths

ROOT = paths.ROOT
EXAMPLES = ROOT / "examples"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.py"))


def run_cli(capsys, *argv):
    """``dslc ARGV`` in-process: (exit code, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def documented_output(path: Path) -> list[str]:
    """The lines an example's docstring lists under 'Expected output (...):'."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Expected output"))
    expected = []
    for line in lines[start + 1:]:
        if not line.startswith(" ") or not line.strip():
            break
        expected.append(line.strip())
    assert expected, f"{path.name} documents no expected output"
    return expected


def loops_totals() -> dict:
    """examples/loops.py's sums, computed in plain Python."""
    totals = {"total": 0, "large": 0, "small": 0, "tiny": 0}
    for i in range(10):
        for j in range(i):
            val = 10 * i + j
            totals["total"] += val
            totals["large" if val >= 80 else "small" if val >= 50 else "tiny"] += val
    return totals


def write_job(tmp_path, monkeypatch, text: str, name="job.py") -> str:
    """A job file in a fresh working directory; returns its name relative to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return name


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    return lines[0]


# ----------------------------------------------------------------------------- dslc run


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_run_prints_each_examples_documented_output(capsys, example):
    code, out, err = run_cli(capsys, "run", EXAMPLES / example)
    assert code == 0, err
    assert out.splitlines() == documented_output(EXAMPLES / example)


def test_loops_documented_output_is_right():
    # the docstring itself is checked against a plain-Python computation
    expected = [f"{k} = {v}" for k, v in loops_totals().items()]
    assert documented_output(EXAMPLES / "loops.py") == expected


def test_run_json(capsys):
    code, out, _ = run_cli(capsys, "run", EXAMPLES / "loops.py", "--json")
    assert code == 0
    assert json.loads(out) == {"outputs": loops_totals()}


def test_run_json_of_phases(capsys):
    code, out, _ = run_cli(capsys, "run", EXAMPLES / "setup.py", "--json")
    assert code == 0
    # accum = (1 + 1) + 3 = 5 before the body's increment, 6 after it
    assert json.loads(out)["outputs"] == {"six": 6, "seven_1": 7, "seven_2": 7}


# ----------------------------------------------------------------------------- dslc ir


def _loc_lines(text: str) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for m in re.finditer(r'loc\("([^"]+)":(\d+)\)', text)]


def test_ir_prints_a_module_with_source_locations(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(capsys, "ir", "examples/setup.py")
    assert code == 0
    assert out.startswith("module")
    locs = _loc_lines(out)
    assert locs and {f for f, _ in locs} == {"examples/setup.py"}
    source = (EXAMPLES / "setup.py").read_text(encoding="utf-8").splitlines()
    const_one = source.index("            one = ops.Const(1)") + 1
    assert const_one in {line for _, line in locs}
    assert all(1 <= line <= len(source) for _, line in locs)


def test_ir_no_locs(capsys):
    code, out, _ = run_cli(capsys, "ir", EXAMPLES / "setup.py", "--no-locs")
    assert code == 0
    assert out.startswith("module") and "Add" in out
    assert "loc(" not in out


def test_ir_output_file(capsys, tmp_path):
    code, shown, _ = run_cli(capsys, "ir", EXAMPLES / "loops.py")
    assert code == 0
    target = tmp_path / "loops.ir"
    code, out, _ = run_cli(capsys, "ir", EXAMPLES / "loops.py", "-o", target)
    assert code == 0 and out == ""
    stamp, text = target.read_text(encoding="utf-8").split("\n", 1)
    assert text == shown and stamp.startswith("// dslir 1, written by dslc ")  # (the file's version)


def test_ir_output_file_in_a_missing_directory(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ir", EXAMPLES / "loops.py", "-o", tmp_path / "nowhere" / "x.ir")
    assert code == 2
    line = one_error_line(err)
    assert "cannot write" in line and "directory" in line


# ----------------------------------------------------------------------------- bad job files


def test_job_without_build_job(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, "x = 1\n")
    code, out, err = run_cli(capsys, "run", job)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert line.startswith("job.py:1: error: ")
    assert "no build_job()" in line and "define build_job()" in line


def test_job_with_a_syntax_error(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """\
        def build_job():
            return [1, 2
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:2: error: syntax error")
    assert "fix" in line


def test_runtime_error_in_the_jobs_own_code(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """\
        from dslc.net_builder import ops
        from dslc.task import Task

        def lookup(table):
            return table["missing"]

        def build_job():
            with Task():
                ops.Const(1)
                lookup({})
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:5: error: KeyError")  # the line that raised
    assert "job's own code" in line and "--debug" in line


def test_runtime_error_in_a_module_next_to_the_job(capsys, tmp_path, monkeypatch):
    (tmp_path / "job_helpers.py").write_text("def settings():\n    raise ValueError('no settings')\n",
                                             encoding="utf-8")
    job = write_job(tmp_path, monkeypatch, """\
        import job_helpers


        def build_job():
            job_helpers.settings()
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    # the job's own line that led to it (the helper is importable: the job's folder is on the path)
    assert line.startswith("job.py:5: error: ValueError: no settings")


def test_dsl_error_in_a_job_names_its_line(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """\
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                n = ops.Const(-2)
                with ops.loop(n):
                    ops.Const(1)
                return final_output(n)
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:7: runtime error: in task 'local/task': ")
    assert "negative" in line


def test_errors_after_the_job_ran_are_not_placed_in_the_launcher(capsys, tmp_path, monkeypatch):
    # the output's only writer is skipped, so fetching it fails after build_job() returned;
    # the error names the final_output line, never the CLI's caller (here: this test)
    job = write_job(tmp_path, monkeypatch, """\
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task():
                with ops.If(ops.Const(False)):
                    x = ops.Const(1)
                return final_output(x)
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:8: error: ") and "never written" in line


def test_build_job_that_takes_arguments(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """\
        import os

        def build_job(config):
            pass
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:3: error: build_job() must take no arguments")


def test_build_job_returning_something_unrunnable(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """\


        def build_job():
            return 42
        """)
    code, _, err = run_cli(capsys, "run", job)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("job.py:3: error: build_job() returned an int")
    assert "final_output" in line


def test_missing_job_file(capsys, tmp_path):
    missing = tmp_path / "no_such_job.py"
    code, out, err = run_cli(capsys, "run", missing)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert line.startswith(f"{missing}: error: cannot read the job file: No such file")
    assert "check the path" in line


# ----------------------------------------------------------------------------- internal failures, --debug


@pytest.fixture
def broken_lowering(monkeypatch):
    """Make lowering fail the way a bug in dslc would."""
    def fail(*args, **kwargs):
        raise RuntimeError("lowering exploded")
    monkeypatch.setattr("dslc.driver.session.lower_group", fail)


def test_internal_failure_exits_1_and_suggests_debug(capsys, broken_lowering):
    code, out, err = run_cli(capsys, "run", EXAMPLES / "setup.py")
    assert code == 1 and out == ""
    line = one_error_line(err)
    assert "internal error" in line and "RuntimeError: lowering exploded" in line
    assert "--debug" in line


def test_internal_failure_while_tracing_is_not_blamed_on_the_job(capsys, monkeypatch):
    # a bug inside dslc, hit while build_job() records ops, is still an internal error:
    # here making an op's record fails inside dslc.trace.net_record
    monkeypatch.setattr("dslc.trace.net_record.OpRecord", None)
    code, _, err = run_cli(capsys, "run", EXAMPLES / "setup.py")
    assert code == 1
    assert one_error_line(err).startswith("dslc: internal error: TypeError")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(capsys, broken_lowering, where):
    argv = ["--debug", "run", EXAMPLES / "setup.py"] if where == "before" else \
        ["run", EXAMPLES / "setup.py", "--debug"]
    code, _, err = run_cli(capsys, *argv)
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "in fail" in err  # the frame that raised
    assert err.strip().splitlines()[-1].startswith("dslc: internal error: RuntimeError")


def test_debug_shows_the_traceback_of_a_user_error(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, "def build_job():\n    return 1 / 0\n")
    code, _, err = run_cli(capsys, "--debug", "run", job)
    assert code == 2
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("job.py:2: error: ZeroDivisionError")


# ----------------------------------------------------------------------------- help and version


def test_help(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for word in ("run", "ir", "--version", "--debug", "traceback", "dslc run examples/loops.py"):
        assert word in out


def test_run_help(capsys):
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    # each option is listed with an explanation
    assert re.search(r"--backend \S*\s+\w+", out)
    assert re.search(r"--json\s+print the outputs", out)
    assert re.search(r"--debug\s+\w+", out)
    assert "example:" in out and "dslc run examples/" in out


def test_version(capsys):
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.strip() == f"dslc {version}"


def test_no_command_is_a_usage_error(capsys):
    code, out, err = run_cli(capsys)
    assert code == 2 and out == ""
    assert "usage: dslc" in err and "choose a command" in err


def test_bad_option_is_a_usage_error(capsys):
    code, _, err = run_cli(capsys, "run", EXAMPLES / "loops.py", "--backend", "nope")
    assert code == 2
    assert "invalid choice: 'nope'" in err


# ----------------------------------------------------------------------------- the real command


def _dslc(*argv, cwd):
    # the console script of the environment under test (beside its interpreter), not
    # whichever `dslc` comes first on PATH (another checkout's, say)
    beside = Path(sys.executable).parent / "dslc"
    exe = str(beside) if beside.exists() else shutil.which("dslc")
    cmd = [exe] if exe else [sys.executable, "-m", "dslc.cli"]
    return subprocess.run(cmd + [str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_command_runs_an_example():
    proc = _dslc("run", "examples/loops.py", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == documented_output(EXAMPLES / "loops.py")


def test_command_reports_a_bad_job(tmp_path):
    (tmp_path / "bad.py").write_text("def build_job():\n    return undefined_name\n", encoding="utf-8")
    proc = _dslc("run", "bad.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == ("bad.py:2: error: NameError: name 'undefined_name' is not defined; "
                                   "the exception came from the job's own code; fix it there "
                                   "(rerun with --debug for the traceback)")
