"""A job's IR text works like the job file: Python op functions are named by where they
are defined (so another process imports them again), output names survive, and a
function that cannot be named is a located error when the text is written.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from dslc.driver import cli
from dslc.ir import pyrefs
from dslc.ir.diagnostics import DSLError
from test_job_files import JOB
import paths

ROOT = paths.ROOT


def _run_json(capsys, *argv) -> dict:
    assert cli.main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("example", ["loops.py", "python_op.py"])
def test_a_job_file_and_its_ir_text_print_the_same_outputs(capsys, tmp_path, backend, example):
    """loops.py: total 2970, large 1514, small 1146, tiny 310 (its docstring, summed by
    hand); python_op.py: 64 instances, 64 * 4 calls."""
    expected = {"loops.py": {"total": 2970, "large": 1514, "small": 1146, "tiny": 310},
                "python_op.py": {"instances": 64, "calls": 256}}[example]
    job, ir = str(ROOT / "examples" / example), str(tmp_path / "job.dslir")
    assert _run_json(capsys, job, "--backend", backend)["outputs"] == expected
    assert cli.main(["ir", job, "-o", ir]) == 0
    assert _run_json(capsys, ir, "--backend", backend)["outputs"] == expected


@pytest.mark.slow
def test_another_process_imports_the_python_op_functions_again(tmp_path):
    """The functions are not registered in the process that runs the text: it imports
    the job file by the path the text names."""
    ir = tmp_path / "job.dslir"
    assert cli.main(["ir", str(ROOT / "examples" / "python_op.py"), "-o", str(ir)]) == 0
    assert 'pyref<"report", ' in ir.read_text()
    env = dict(os.environ, DSLC_PIPELINE="default")
    run = [sys.executable, "-m", "dslc.cli", "run", str(ir), "--json"]
    # IR text is code: without the user's consent it does not import the job file (issue 23)
    refused = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and "--trust" in refused.stderr, refused.stderr
    for consent in (["--trust"], ["--trust-module", str(ROOT / "examples" / "python_op.py")]):
        done = subprocess.run(run + consent, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["outputs"] == {"instances": 64, "calls": 256}


LOCAL = textwrap.dedent("""\
    from dslc.net_builder import ops
    from dslc.task import Task, final_output


    def build_job():
        def local(inputs, outputs):
            outputs[0].feed(3)
        with Task():
            x = ops.Python({fn})([], 1)
            return {{"x": final_output(x)}}
""")


@pytest.mark.parametrize("fn, why", [("local", "it is local to build_job()"),
                                     ("lambda i, o: o[0].feed(3)", "it is a lambda")])
@pytest.mark.parametrize("command", ["ir", "compile"])
def test_writing_the_text_of_an_unnameable_function_is_a_located_error(capsys, tmp_path, fn, why,
                                                                       command):
    job = tmp_path / "job.py"
    job.write_text(LOCAL.format(fn=fn))
    out = str(tmp_path / ("job.dslir" if command == "ir" else "out"))
    assert cli.main(["run", str(job)]) == 0  # the job itself runs
    capsys.readouterr()
    assert cli.main([command, str(job), "-o", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("job.py:9: error: cannot write") or ":9: error: cannot write" in err
    assert why in err and "top level" in err


def test_a_text_whose_function_lives_in_no_process_is_a_located_error(capsys, tmp_path):
    text = textwrap.dedent("""\
        module {outputs = [["x", @"x"]]} {
          group body {
            task @"t" {outputs = [@"x"]} body {
              %0 = Python {func = pyref<7, "gone", "it is a lambda">, name = "gone"} : any
              store @"x"(%0)
            }
          }
        }
    """)
    path = tmp_path / "gone.dslir"
    path.write_text(text)
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "gone.dslir:4" in err and "'gone' cannot be found: it is a lambda" in err


def test_a_token_from_another_process_never_finds_what_this_one_registered():
    """CI once ran the test above in a worker that had registered a callable object (no
    __qualname__) as token 7: the text's 'gone' resolved to it and ran."""
    made = [pyrefs.register(functools.partial(int, base=2)) for _ in range(10)]
    made.append(pyrefs.register(lambda x: x, "gone"))
    for ref in made:  # what this process made resolves, under its own name only
        assert pyrefs.resolve(ref) is not None
        with pytest.raises(DSLError, match="cannot be found"):
            pyrefs.resolve(dataclasses.replace(ref, name="other"))
    for token in range(1, 64):  # small numbers another process would print
        with pytest.raises(DSLError, match="cannot be found"):
            pyrefs.resolve(pyrefs.PyRef(token, "gone", why="it is a lambda"))



def test_a_job_and_its_ir_text_run_the_same_epochs(capsys, tmp_path, backend):
    """100 from the init group, + 5 in each of 3 epochs: [115], under the job's name."""
    job, ir = tmp_path / "job.py", tmp_path / "job.dslir"
    job.write_text(JOB.format(epochs=3))  # (test_job_files' job)
    assert _run_json(capsys, str(job), "--backend", backend)["outputs"] == {"total": [115]}
    assert cli.main(["ir", str(job), "-o", str(ir)]) == 0
    assert ir.read_text().count("\nmodule {") >= 2  # one module per group, and the fetcher
    assert _run_json(capsys, str(ir), "--backend", backend)["outputs"] == {"total": [115]}
