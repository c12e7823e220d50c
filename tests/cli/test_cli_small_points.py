"""Issue 42's smaller points, through the CLI as a user runs it: typos get a suggestion and the
right command's help, `opt` on a job file says what to do, `compile -o` leaves no empty folder,
a single unnamed output prints under the job's name for it, float32 values print short."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests import paths

pytestmark = pytest.mark.slow

DSLC = os.path.join(os.path.dirname(sys.executable), "dslc")

JOB = textwrap.dedent("""\
    from dslc.net_builder import ops
    from dslc.task import Task, final_output


    def build_job():
        with Task():
            x = ops.ConstantFill([], shape=[2], value=0.9)
            y = ops.Add([x, x])
            return final_output(y)
    """)


def _dslc(cwd, *argv):
    return subprocess.run([DSLC, *map(str, argv)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_typos_get_a_suggestion_and_the_commands_own_help(tmp_path):
    done = _dslc(tmp_path, "rn", "job.py")
    assert done.returncode == 2 and "did you mean 'run'?; see 'dslc --help'" in done.stderr, done.stderr
    (tmp_path / "job.py").write_text(JOB)
    done = _dslc(tmp_path, "run", "job.py", "--bakend", "numba")
    assert done.returncode == 2 and done.stderr.strip() == (
        "dslc run: error: unrecognized arguments: --bakend numba; did you mean --backend?; see 'dslc run --help'")


def test_opt_on_a_job_file_says_how_to_see_its_ir(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    done = _dslc(tmp_path, "opt", "job.py")
    assert done.returncode == 2 and "dslc opt reads IR files (.dslir), and job.py is Python" in done.stderr
    assert "dslc ir job.py" in done.stderr and "parse" not in done.stderr


def test_a_single_unnamed_output_prints_under_the_jobs_name_and_float32_prints_short(tmp_path):
    """0.9 as float32 is 0.89999997615814208984375; its shortest text is 0.9 (and 2 * 0.9 = 1.8)."""
    (tmp_path / "job.py").write_text(JOB)
    done = _dslc(tmp_path, "run", "job.py")
    assert done.returncode == 0 and done.stdout == "y = [1.8, 1.8]\n", done.stderr
    plan = _dslc(tmp_path, "plan", "job.py", "--no-locs")
    assert "y = Add([0.9, 0.9], [0.9, 0.9])" in plan.stdout and "0.8999" not in plan.stdout
    ir = _dslc(tmp_path, "ir", "job.py", "-O", "--no-locs")
    assert "dense<f32[2]: 1.8, 1.8>" in ir.stdout, ir.stdout


def test_compile_o_writes_no_empty_kernels_folder(tmp_path):
    done = _dslc(tmp_path, "compile", "--backend", "numba", "-o", "out", paths.EXAMPLES / "loops.py")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["job.dslir"]


def test_ctrl_c_while_dslc_starts_is_one_line(tmp_path):
    """A Ctrl-C that lands while the dslc command still imports its modules (simulated here: a
    sitecustomize makes the import of dslc.ir.core raise KeyboardInterrupt, where a real Ctrl-C
    lands at random) printed the import's traceback. (One that lands inside Python's own start,
    before dslc runs any code, is Python's to report.)"""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""\
        import sys

        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "dslc.ir.core":
                    raise KeyboardInterrupt

        sys.meta_path.insert(0, Interrupt())
        """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([DSLC, "run", str(paths.EXAMPLES / "loops.py")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.stderr == "dslc: interrupted\n" and done.returncode != 0, done.stderr[-2000:]
