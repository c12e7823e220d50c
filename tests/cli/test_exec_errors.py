"""Whose error it is under ``dslc exec`` and ``dslc run``: the script's own exceptions print
as ``python script.py`` prints them (exit 1); dslc's failures are internal errors; a Caffe2
module or name dslc lacks is a located user error pointing to the list of what exists."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests import paths

pytestmark = pytest.mark.slow  # (each case runs dslc in a fresh process)

DSLC = os.path.join(os.path.dirname(sys.executable), "dslc")


def _run(tmp_path, *argv, timeout=120):
    return subprocess.run([*map(str, argv)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def _script(tmp_path, name, text):
    (tmp_path / name).write_text(textwrap.dedent(text))
    return name


def test_the_scripts_own_exception_prints_exactly_as_python_prints_it(tmp_path):
    """A chained exception from the script and numpy: byte for byte what `python` prints."""
    s = _script(tmp_path, "own.py", """\
        import numpy as np


        def shapes(a, b):
            return a @ b


        def main():
            try:
                {}["k"]
            except KeyError as e:
                raise ValueError("while looking up k") from e


        try:
            main()
        except ValueError:
            shapes(np.zeros((2, 3)), np.zeros((2, 3)))
        """)
    python = _run(tmp_path, sys.executable, s)
    dslc = _run(tmp_path, DSLC, "exec", s)
    assert python.returncode == 1 and "matmul" in python.stderr and "while looking up k" in python.stderr
    assert (dslc.returncode, dslc.stderr) == (1, python.stderr)


def test_a_keyword_typo_through_brew_is_the_users_error_with_a_suggestion(tmp_path):
    s = _script(tmp_path, "typo.py", """\
        from caffe2.python import brew, model_helper

        m = model_helper.ModelHelper(name="t")


        def build():
            brew.fc(m, "data", "fc", dim_in=3, dim_outt=2)


        build()
        """)
    done = _run(tmp_path, DSLC, "exec", s)
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    at = tmp_path / "typo.py"  # (absolute, as python names its script's frames)
    assert lines[:5] == ["Traceback (most recent call last):", f'  File "{at}", line 10, in <module>',
                         "    build()", f'  File "{at}", line 7, in build',
                         '    brew.fc(m, "data", "fc", dim_in=3, dim_outt=2)']
    assert lines[5] == "  [1 frame inside dslc]"
    assert lines[6].startswith("TypeError: fc() missing 1 required positional argument: 'dim_out'")
    assert lines[7] == "did you mean dim_out= where you wrote dim_outt=?"


def test_the_same_typo_in_a_job_file_names_the_jobs_line(tmp_path):
    s = _script(tmp_path, "job.py", """\
        from dslc import brew, model_helper
        from dslc.task import Task


        def build_job():
            m = model_helper.ModelHelper(name="t")
            with Task():
                brew.fc(m, "data", "fc", dim_in=3, dim_outt=2)
        """)
    done = _run(tmp_path, DSLC, "run", s)
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr
    assert done.stderr.startswith("job.py:8: error: TypeError: fc() missing 1 required positional argument")
    assert "dim_out= where you wrote dim_outt=" in done.stderr


def test_a_failure_inside_dslc_is_an_internal_error(tmp_path):
    """The script breaks dslc's runner from outside: the TypeError is raised in dslc's code."""
    s = _script(tmp_path, "broken.py", """\
        import numpy as np
        import dslc.driver.runner
        from caffe2.python import workspace

        dslc.driver.runner.CURRENT[0] = None
        workspace.FeedBlob("x", np.ones(2))
        """)
    done = _run(tmp_path, DSLC, "exec", s)
    assert done.returncode == 1 and done.stderr.startswith("dslc: internal error: AttributeError"), done.stderr
    assert "bug in dslc" in done.stderr


@pytest.mark.parametrize("line, says", [
    ("from caffe2.python import layer_model_helperz",
     "dslc does not provide the Caffe2 module caffe2.python.layer_model_helperz"),
    ("import caffe2.python.cli", "dslc does not provide the Caffe2 module caffe2.python.cli"),
    ("from caffe2.python import trace", "dslc does not provide the Caffe2 module caffe2.python.trace"),
    ("from caffe2.python import driver", "dslc does not provide the Caffe2 module caffe2.python.driver"),
    ("from caffe2.python.core import NoSuchThing", "dslc's caffe2.python.core has no 'NoSuchThing'"),
    ("from caffe2.python import core; core.NoSuchThing", "dslc's caffe2.python.core has no 'NoSuchThing'"),
    ("import caffe2.python.worksapce", "did you mean caffe2.python.workspace?"),
])
def test_what_dslc_lacks_is_a_located_user_error_pointing_to_the_list(tmp_path, line, says):
    s = _script(tmp_path, "need.py", f"import numpy\n{line}\n")
    done = _run(tmp_path, DSLC, "exec", s)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("need.py:2: error: ") and says in done.stderr, done.stderr
    assert "dslc exec --list" in done.stderr and "docs/caffe2-surface.md" in done.stderr


def test_a_script_may_catch_the_import_error_and_the_listed_modules_are_dslcs(tmp_path):
    s = _script(tmp_path, "fallback.py", """\
        import caffe2.python as c2
        from caffe2.python import core
        import caffe2.python.predictor.predictor_exporter as pe
        import dslc.core
        import dslc.predictor.predictor_exporter
        try:
            from caffe2.python import layer_model_helperz
        except ImportError as e:
            print("fallback:", e.name)
        print(core is dslc.core, c2.core is core, c2.workspace.FeedBlob is not None,
              pe is dslc.predictor.predictor_exporter)
        """)
    done = _run(tmp_path, DSLC, "exec", s)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fallback: caffe2.python.layer_model_helperz", "True True True True"]


def test_the_list_is_the_docs_page_and_holds_no_internals(tmp_path):
    done = _run(tmp_path, DSLC, "exec", "--list")
    assert done.returncode == 0, done.stderr
    with open(paths.ROOT / "docs" / "caffe2-surface.md", encoding="utf-8") as f:
        assert done.stdout == f.read(), "docs/caffe2-surface.md is stale: python -m dslc.driver.surface > it"
    listed = {line[3:-1] for line in done.stdout.splitlines() if line.startswith("- `")}
    assert {"caffe2.python.core", "caffe2.python.workspace", "caffe2.python.brew", "caffe2.proto.caffe2_pb2"} <= listed
    assert not {f"caffe2.python.{m}" for m in ("cli", "compat", "driver", "trace", "lower", "autodiff",
                                               "distributed", "brew_helpers")} & listed
    assert "## caffe2.python.workspace" in done.stdout and "`FeedBlob`" in done.stdout


def test_every_top_level_module_of_dslc_is_on_the_list_or_one_of_its_internals():
    """A module added to dslc/ for Caffe2 scripts is one line in CAFFE2_PYTHON (this fails
    until it is there); dslc's internals stay off the list."""
    import pkgutil

    import dslc
    from dslc.compat import CAFFE2_PYTHON
    internals = {"autodiff", "brew_helpers", "checkpoint_managers", "cli", "compat", "distributed", "driver", "lower",
                 "trace",
                 "proto"}  # (proto is caffe2.proto, not caffe2.python.proto)
    found = {m.name for m in pkgutil.iter_modules(dslc.__path__)}
    assert found - internals == set(CAFFE2_PYTHON), "add the module to dslc/compat.py's CAFFE2_PYTHON " \
        "(and regenerate docs/caffe2-surface.md: python -m dslc.driver.surface)"
    assert list(CAFFE2_PYTHON) == sorted(CAFFE2_PYTHON)


@pytest.mark.parametrize("command", ["run", "plan", "ir", "graph"])
def test_a_caffe2_script_given_to_a_job_command_says_to_use_exec_without_running_it(tmp_path, command):
    s = _script(tmp_path, "train.py", """\
        import os
        open("ran", "w").close()
        from caffe2.python import workspace
        """)
    done = _run(tmp_path, DSLC, command, s)
    assert done.returncode == 2 and not (tmp_path / "ran").exists(), done.stderr
    assert done.stderr.strip() == ("train.py:3: error: this is a Caffe2 script (it imports caffe2), not a job file; "
                                   "run it as it is with: dslc exec train.py [ARGS]")


def test_a_script_of_dslc_calls_without_build_job_is_not_run_by_plan(tmp_path):
    """It ran the whole training, then said 'no build_job()'."""
    s = _script(tmp_path, "train.py", """\
        from dslc import workspace
        open("ran", "w").close()
        """)
    done = _run(tmp_path, DSLC, "plan", s)
    assert done.returncode == 2 and not (tmp_path / "ran").exists(), done.stderr
    assert done.stderr.startswith("train.py:1: error: no build_job() function in the job file")
    assert "dslc exec train.py" in done.stderr


def test_a_python_ops_own_exception_prints_the_users_traceback(tmp_path):
    # the function is the user's code: its traceback from the script's RunNetOnce line to
    # the raise (dslc's frames between folded), exit 1 as python's; then the op it ran as
    s = _script(tmp_path, "pyop.py", """\
        import numpy as np
        from caffe2.python import core, workspace


        def check(value):
            if value.sum() > 2:
                raise ValueError(f"sum too large: {value.sum()}")


        def op(inputs, outputs):
            check(inputs[0].data)


        workspace.FeedBlob("x", np.ones(4, np.float32))
        net = core.Net("n")
        net.Python(op)(["x"], [])
        workspace.RunNetOnce(net)
        """)
    r = _run(tmp_path, DSLC, "exec", s)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    files = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    assert [f.split(", ")[1] for f in files] == ["line 17", "line 11", "line 7"], r.stderr
    assert "frames inside dslc]" in r.stderr and "internal error" not in r.stderr
    assert "ValueError: sum too large: 4.0" in lines
    assert lines[-1].startswith("dslc: raised in ") and "pyop.py:16" in lines[-1], lines[-1]
