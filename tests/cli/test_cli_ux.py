"""The command line as people and scripts meet it: help, --version, progress on a
terminal, --json everywhere, one-line errors, and ``dslc compile``'s backend interface."""
from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

import dslc
from dslc.driver import cli, progress
from dslc.driver.cli_parser import build_parser
from dslc.ir.passes import DEFAULT_PIPELINE
import paths

ROOT = paths.ROOT


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_job(tmp_path, monkeypatch, text: str, name: str = "job.py") -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return name


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


# ----------------------------------------------------------------------------- help and version


def _subparsers():
    parser = build_parser(dslc.__version__, cli.COMMANDS)
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return parser, sub.choices


def test_every_command_has_help_with_an_example(capsys):
    parser, commands = _subparsers()
    assert set(commands) == {"run", "ir", "opt", "plan", "compile", "graph", "ops", "exec"}
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in commands:
        assert f"\n    {name} " in out  # listed with its one-line summary
    for name, sub in commands.items():
        code, out, _ = run(capsys, name, "--help")
        assert code == 0
        assert "example" in out and f"\n  dslc {name} " in out, name
        for action in sub._actions:
            assert action.help, f"dslc {name} {action.option_strings or action.dest} has no help"
            assert "\n" not in action.help


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"dslc {dslc.__version__}\n"


def test_usage_errors_are_one_line(capsys):
    code, out, err = run(capsys, "plan")
    assert code == 2 and out == ""
    assert err == ("dslc plan: error: the following arguments are required: JOB.py; "
                   "see 'dslc plan --help'\n")


# ----------------------------------------------------------------------------- progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_counts_on_one_line_and_clears_it():
    stream = FakeTTY()
    with progress.showing(stream, delay=0, interval=0):
        epochs = progress.counter("epoch", total=3)
        for _ in range(3):
            epochs.tick()
    assert stream.getvalue() == ("\repoch: 1/3 (33%)\x1b[K\repoch: 2/3 (66%)\x1b[K"
                                 "\repoch: 3/3 (100%)\x1b[K\r\x1b[K")


def test_counters_with_one_label_add_up_and_unknown_totals_just_count():
    stream = FakeTTY()
    with progress.showing(stream, delay=0, interval=0):
        a, b = progress.counter("loop", 2), progress.counter("loop", 2)
        a.tick(), b.tick(), a.tick(), b.tick()
        progress.counter("epoch").tick()
    shown = stream.getvalue().split("\r")
    assert "loop: 4/4 (100%)\x1b[K" in shown and shown[-2] == "epoch: 1\x1b[K"


def test_progress_waits_before_drawing_and_is_off_by_default():
    stream = FakeTTY()
    with progress.showing(stream, delay=60):
        progress.counter("epoch", 5).tick()
    assert stream.getvalue() == ""  # a short run prints nothing, and clears nothing
    assert not progress.active()
    progress.counter("epoch", 5).tick()  # off: a counter that does nothing


def test_showing_installs_the_hook_the_backends_count_through_and_puts_back_the_one_before():
    from dslc.runtime import hooks  # (the backends report through it; they never import progress)
    assert hooks.progress is None
    stream = FakeTTY()
    with progress.showing(stream, delay=0, interval=0):
        hooks.progress("loop at job.py:3", 4).tick(4)
        outer = hooks.progress
        with progress.showing(FakeTTY(), delay=60):
            assert hooks.progress is not outer
        assert hooks.progress is outer
    assert hooks.progress is None
    assert "\rloop at job.py:3: 4/4 (100%)\x1b[K" in stream.getvalue()


def test_progress_is_wanted_only_on_terminals_and_not_when_quiet():
    assert progress.wanted(False, FakeTTY(), FakeTTY())
    assert not progress.wanted(True, FakeTTY(), FakeTTY())
    assert not progress.wanted(False, FakeTTY(), io.StringIO())
    assert not progress.wanted(False, io.StringIO(), FakeTTY())


LOOP_JOB = """
    from dslc.net_builder import ops
    from dslc.task import Task, final_output


    def build_job():
        with Task():
            total = ops.Const(0)
            with ops.loop(20) as loop:
                ops.Add([total, loop.iter()], [total])
            return {"total": final_output(total)}
    """


def terminal(monkeypatch):
    """stdout and stderr are terminals; progress draws at once and on every tick.

    (Called in the test itself: pytest puts its own capture back between fixtures and test.)
    """
    out, err = FakeTTY(), FakeTTY()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(progress, "DELAY", 0)
    monkeypatch.setattr(progress, "INTERVAL", 0)
    return out, err


def test_run_shows_a_top_level_loop_on_a_terminal(tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, LOOP_JOB)
    out, err = terminal(monkeypatch)
    assert cli.main(["run", job]) == 0
    assert out.getvalue() == "total = 190\n"  # sum(range(20))
    assert "\rloop at job.py:8: 20/20 (100%)\x1b[K" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")


@pytest.mark.parametrize("argv", [["--quiet", "run"], ["run", "--quiet"]])
def test_quiet_keeps_a_terminal_clean(tmp_path, monkeypatch, argv):
    job = write_job(tmp_path, monkeypatch, LOOP_JOB)
    out, err = terminal(monkeypatch)
    assert cli.main(argv + [job]) == 0
    assert out.getvalue() == "total = 190\n" and err.getvalue() == ""


def test_no_progress_when_output_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "DELAY", 0)
    job = write_job(tmp_path, monkeypatch, LOOP_JOB)
    code, out, err = run(capsys, "run", job)
    assert code == 0 and out == "total = 190\n" and err == ""


# ----------------------------------------------------------------------------- --json everywhere


def test_json_from_every_command(capsys, at_root, tmp_path):
    code, out, _ = run(capsys, "run", "examples/setup.py", "--json")
    assert json.loads(out) == {"outputs": {"six": 6, "seven_1": 7, "seven_2": 7}}
    code, out, _ = run(capsys, "ir", "examples/setup.py", "--json", "--no-locs")
    (module,) = json.loads(out)["modules"]
    assert module.startswith("module {") and "Add" in module
    (tmp_path / "setup.dslir").write_text(module, encoding="utf-8")
    code, out, _ = run(capsys, "opt", tmp_path / "setup.dslir", "--json")
    assert json.loads(out)["module"].startswith("module {")
    code, out, _ = run(capsys, "plan", "examples/setup.py", "--json")
    (p,) = json.loads(out)["plans"]
    assert p["title"] == "plan of examples/setup.py" and p["text"].startswith("plan of examples/setup.py:\n")
    code, out, _ = run(capsys, "compile", "examples/setup.py", "--json")
    got = json.loads(out)
    assert got["backend"] == "interp" and got["artifacts"] == []
    assert got["modules"][0]["tasks"] == 1 and got["modules"][0]["listing"] is None
    code, out, _ = run(capsys, "graph", "examples/setup.py", "-o", tmp_path / "s.dot", "--json")
    assert json.loads(out) == {"written": str(tmp_path / "s.dot"), "format": "dot",
                               "graph": "structure", "name": None}


def test_errors_with_json_are_json_too(capsys, tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, "def build_job():\n    return undefined\n")
    for command in ("run", "plan", "compile", "graph"):
        code, out, err = run(capsys, command, job, "--json")
        assert code == 2
        assert err.startswith("job.py:2: error: NameError: name 'undefined' is not defined; ")
        assert len(err.strip().splitlines()) == 1
        got = json.loads(out)
        assert got["exit_code"] == 2
        assert got["error"]["file"] == "job.py" and got["error"]["line"] == 2
        assert got["error"]["message"] == "NameError: name 'undefined' is not defined"


@pytest.mark.parametrize("command", ["plan", "compile", "graph"])
def test_internal_failures_say_rerun_with_debug(capsys, at_root, monkeypatch, command):
    def fail(*args, **kwargs):
        raise RuntimeError("lowering exploded")
    monkeypatch.setattr("dslc.lower.lower_group", fail)
    code, out, err = run(capsys, command, "examples/setup.py")
    assert code == 1 and out == ""
    assert err == ("dslc: internal error: RuntimeError: lowering exploded; this is a bug in dslc, "
                   "not in the job: rerun with --debug for the traceback\n")


# ----------------------------------------------------------------------------- dslc compile


class FakeProgram:
    """A compiled program that uses every optional part of the interface."""

    def __init__(self, module):
        self.module = module

    def run(self, ws):
        raise AssertionError("compile must not run the job")

    def summary(self):
        return {"kernels": 2, "cache": "cold"}

    def listing(self):
        return "kernel k0: Add\nkernel k1: Mul\n"

    def write_artifacts(self, directory):
        path = Path(directory) / "kernels.txt"
        path.write_text("k0\nk1\n", encoding="utf-8")
        return [str(path)]


class FakeBackend:
    name = "fake"

    def __init__(self, **options):
        pass

    def compile(self, module):
        return FakeProgram(module)


@pytest.fixture
def fake_backend(monkeypatch):
    from dslc import backends
    real_get, real_names = backends.get, backends.names
    monkeypatch.setattr(backends, "get", lambda name: FakeBackend if name == "fake" else real_get(name))
    monkeypatch.setattr(backends, "names", lambda: sorted(real_names() + ["fake"]))


def test_compile_uses_the_programs_summary_listing_and_artifacts(capsys, at_root, tmp_path, fake_backend,
                                                                  default_pipeline):
    code, out, err = run(capsys, "compile", "examples/setup.py", "--backend", "fake", "-o", tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["kernel k0: Add", "kernel k1: Mul"]
    assert lines[2].startswith("compiled examples/setup.py for fake: 1 task, ")
    assert lines[2].endswith(f" ops after {len(DEFAULT_PIPELINE)} passes")  # compile optimizes
    assert lines[3:] == ["  kernels: 2", "  cache: cold", f"wrote {tmp_path / 'job.dslir'}",
                         f"wrote {tmp_path / 'kernels.txt'}"]
    assert (tmp_path / "kernels.txt").read_text(encoding="utf-8") == "k0\nk1\n"
    # the written IR is the optimized module: it runs and gives the job's outputs
    code, out, err = run(capsys, "run", tmp_path / "job.dslir", "--json")
    assert code == 0, err
    assert sorted(json.loads(out)["outputs"].values()) == [6, 7, 7]


def test_compile_json_with_the_interface(capsys, at_root, tmp_path, fake_backend):
    code, out, _ = run(capsys, "compile", "examples/setup.py", "--backend", "fake", "-o", tmp_path, "--json")
    assert code == 0
    got = json.loads(out)
    assert got["modules"][0]["summary"] == {"kernels": 2, "cache": "cold"}
    assert got["modules"][0]["listing"] == "kernel k0: Add\nkernel k1: Mul\n"
    assert got["artifacts"] == [str(tmp_path / "job.dslir"), str(tmp_path / "kernels.txt")]


def test_compile_with_the_text_backend_writes_the_plan(capsys, at_root, tmp_path, default_pipeline):
    code, out, _ = run(capsys, "compile", "examples/setup.py", "--backend", "text", "-o", tmp_path)
    assert code == 0
    plan = (tmp_path / "plan.txt").read_text(encoding="utf-8")
    assert out.startswith(plan)
    assert plan.startswith("plan of examples/setup.py:\n") and "seven_2 = Add(six, one)" in plan


def test_a_later_runnable_may_read_what_an_earlier_one_wrote(capsys, tmp_path, monkeypatch):
    # as in a session, where the second task runs after the first wrote `w`
    job = write_job(tmp_path, monkeypatch, """
        from dslc.net_builder import ops
        from dslc.task import Task, final_output

        def build_job():
            with Task() as make:
                ops.Const(3, blob_out="w")
            with Task() as use:
                out = final_output(ops.Mul(["w", "w"]))
            return make, use, {"square": out}
        """)
    code, out, err = run(capsys, "run", job)
    assert (code, out) == (0, "square = 9\n"), err
    code, out, err = run(capsys, "plan", job, "--no-locs")
    assert code == 0, err
    assert out == textwrap.dedent("""\
        plan of job.py:
          group on node local:
            task local/task, global workspace:
              w = 3

        plan of job.py:
          group on node local, reads w:
            task local/task:1, global workspace, outputs out:
              out = Mul(w, w)
        """)
    for command in ("ir", "compile"):
        code, _, err = run(capsys, command, job, "-o", tmp_path / command)
        assert code == 0, err


def test_a_job_runners_epochs_show_on_a_terminal(tmp_path, monkeypatch):
    job = write_job(tmp_path, monkeypatch, """
        from dslc import core
        from dslc.checkpoint import Job, epoch_limiter
        from dslc.net_builder import ops
        from dslc.task import Task

        def build_job():
            with Job() as job:
                with job.init_group:
                    init = core.Net("init")
                    total = init.Const(0, blob_out="total")
                    Task(step=init)
                with Task():
                    ops.Add([total, ops.Const(2)], [total])
                epoch_limiter(job, 3)
            fetch = Task(step=core.Net("empty"), outputs=[total])
            return job, fetch
        """)
    out, err = terminal(monkeypatch)
    assert cli.main(["run", job]) == 0
    assert out.getvalue() == "total = 6\n"  # three epochs of +2
    shown = err.getvalue()
    assert "\repochs: 1\x1b[K" in shown and "\repochs: 3\x1b[K" in shown and "epochs: 4" not in shown
    assert shown.endswith("\r\x1b[K")
