"""The IR's text form: print -> parse -> print is the identity, and bad text is reported
at its line and column, saying what was found and what was expected.

Negative tests are .dslir text in which the offending line ends with
``// error: MESSAGE``: the error must be at that line and contain MESSAGE.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc.driver import cli, jobfile
from dslc.runtime.workspace import Workspace
from dslc.ir import ParseError, VerifyError, parse, print_module
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
from dslc.lower import lower_group
from dslc.net_builder import ops
from dslc.runtime.values import type_of_value
from dslc.checkpoint import Job
from dslc.session import LocalSession
from dslc.task import Task
import paths

ROOT = paths.ROOT
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def runnables(job, session):
    """(runnable, types of the blobs before it) for each runnable of the loaded job.

    A Job is its groups, as a JobRunner runs them: the init group is run in ``session``,
    and the epoch and exit groups are lowered against what it left in the workspace.
    """
    out, existing = [], {}
    for r in job.runnables:
        if not isinstance(r, Job):
            out.append((r, existing))
            continue
        out.append((r.init_group, {}))
        session.run(r.init_group)
        ws = session.workspace
        existing = {n: type_of_value(ws.fetch(n)) for n in ws.names()}
        out += [(g, existing) for g in (r.epoch_group, r.exit_group) if g is not None]
    return out


def round_trip(module, when: str) -> str:
    """Assert print(parse(print(m))) == print(m) (parse also verifies); returns the text."""
    text = print_module(module)
    assert print_module(parse(text, f"<{when}>")) == text, f"the text does not round-trip {when}"
    return text


# ----------------------------------------------------------------------------- round trips


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_examples_modules_round_trip_after_lowering_and_after_each_pass(path):
    job = jobfile.load(str(path))
    session = LocalSession(Workspace(), passes="none")
    for runnable, existing in runnables(job, session):
        module = lower_group(session.as_group(runnable), str(path), existing)
        round_trip(module, "after lowering")
        for name in DEFAULT_PIPELINE:
            PassManager([name]).run(module)
            round_trip(module, f"after {name}")


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_examples_compiled_module_round_trips_without_locations(path):
    job = jobfile.load(str(path))
    session = LocalSession(Workspace())
    for runnable, _ in runnables(job, session):
        module = session.compile(runnable).module
        round_trip(module, "after the default pipeline")
        text = print_module(module, with_locs=False)
        assert "loc(" not in text
        assert print_module(parse(text), with_locs=False) == text


def lowered(fn):
    """The module lowered from a Task whose body ``fn`` records."""
    with Task() as task:
        fn()
    return lower_group(LocalSession(passes="none").as_group(task), "", {})


def test_blob_names_and_strings_with_quotes_escapes_and_newlines_round_trip():
    awkward = ['a"b', "back\\slash", "new\nline", "é ü", "tab\tx", "{brace}", 'loc("x":1)', "%v", '@"x"', "//"]

    def body():
        for i, name in enumerate(awkward):
            ops.Const(i, blob_out=name)
            ops.Const(name)
    text = round_trip(lowered(body), "with awkward names")
    module = parse(text)
    stored = {str(op.attrs["blob"]) for op in module.walk() if op.name == "store"}
    assert set(awkward) <= stored


def test_float_constants_and_attributes_keep_their_exact_values():
    values = [float("inf"), -float("inf"), float("nan"), -0.0, 1e-45, 3.4e38, 0.1, 1e16]

    def body():
        for x in values:
            ops.Scale([ops.Const(x)], scale=x)
    module = parse(round_trip(lowered(body), "with float edge values"))
    consts = [op.attrs["value"] for op in module.walk() if op.name == "Const" and op.attrs["value"].dtype == np.float32]
    scales = [op.attrs["scale"] for op in module.walk() if op.name == "Scale"]
    assert np.array_equal(np.array(consts), np.array(values, np.float32), equal_nan=True)
    assert np.array_equal(np.array(scales), np.array(values), equal_nan=True)
    assert str(np.array(scales)[3]) == "-0.0"


def test_numpy_scalar_attribute_equal_to_its_default_round_trips():
    # init_count=np.int64(0) used to print as `{init_count = 0}` and then vanish on the
    # next print, since the parser fills in the plain int default.
    def body():
        ops.CreateCounter([], init_count=np.int64(0))
        ops.CreateCounter([], init_count=np.int64(3))
    text = round_trip(lowered(body), "with numpy attributes")
    assert text.count("init_count = 3") == 1
    assert "init_count = 0" not in text


def test_attributes_print_in_declaration_order_whatever_the_dict_order():
    module = lowered(lambda: ops.Print([ops.Const(1)], every_n=2, to_file=0))
    (op,) = [o for o in module.walk() if o.name == "Print"]
    before = print_module(module)
    op.attrs = dict(reversed(list(op.attrs.items())))
    assert print_module(module) == before


def test_comments_may_follow_any_line_and_fill_lines_of_their_own():
    commented = """\
// a job, by hand
module {  // the module
  // a comment-only line, then a blank one

  group body {
    task @"t" {outputs = [@"x"]} body {
      %a = Const {value = dense<i64: 1>} : i64  loc("j.py":3)  // after a loc
      %c = GE(%a, %a) : bool
      %b = if(%c) : i64 then {  // taken
        yield(%a)
      } else {  // never
        yield(%c)
      }
      store @"x"(%b)
    }
  }
}
// the end
"""
    with pytest.raises(VerifyError) as info:  # the comments do not hide the else's bad yield
        parse(commented, "c.dslir")
    assert info.value.loc.line == 12  # the yield(%c) line
    text = print_module(parse(commented.replace("yield(%c)", "yield(%a)")))
    assert "//" not in text and text.count("yield(%a)") == 2


# ----------------------------------------------------------------------------- errors in text

GOOD = """\
module {
  group body {
    task @"t" {outputs = [@"x"]} body {
      %a = Const {value = dense<i64: 1>} : i64  loc("j.py":3)
      %b = Add(%a, %a) : i64  loc("j.py":4)
      store @"x"(%b)  loc("j.py":5)
    }  loc("j.py":2)
  }
}
"""


def marked(text: str) -> tuple[int, str]:
    """The line (1-based) ending in ``// error: MSG``, and MSG."""
    for n, line in enumerate(text.splitlines(), 1):
        if "// error: " in line:
            return n, line.split("// error: ", 1)[1].strip()
    raise AssertionError("no `// error:` line in the test text")


def expect_error(text: str, kind=ParseError):
    """Parse ``text``: it must fail with ``kind`` at its marked line, saying the marked message."""
    line, message = marked(text)
    with pytest.raises(kind) as info:
        parse(text, "t.dslir")
    e = info.value
    assert (e.loc.file, e.loc.line) == ("t.dslir", line), e.one_line()
    assert message in e.one_line()
    return e


def test_good_text_parses_and_runs():
    assert LocalSession(Workspace(), passes="none").run_module(parse(GOOD)) == {"x": 2}


def test_syntax_error_gives_line_column_found_and_expected():
    text = GOOD.replace("Add(%a, %a) : i64  loc", "Add(%a, %a : i64  loc") \
        .replace('"j.py":4)', '"j.py":4)  // error: unexpected')
    e = expect_error(text)
    assert e.one_line() == "t.dslir:5:23: error: unexpected ':'; expected ')', ','"


def test_unexpected_character_names_the_offending_text():
    e = expect_error(GOOD.replace('%b = Add(%a, %a) : i64  loc("j.py":4)',
                                  '%b = Add(%a, %a) : i64 $$ loc("j.py":4)  // error: unexpected \'$$\''))
    assert e.col == 30
    assert "expected" in e.hint


def test_text_that_ends_too_early_says_so():
    text = GOOD[:GOOD.index("    }  loc")]
    with pytest.raises(ParseError) as info:
        parse(text, "t.dslir")
    assert info.value.loc.line == 6
    assert "unexpected end of the text; expected '}'" in info.value.one_line()


def test_unknown_op_is_a_parse_error_at_its_line_with_a_suggestion():
    e = expect_error(GOOD.replace('Add(%a, %a) : i64  loc("j.py":4)',
                                  'Addd(%a, %a) : i64  loc("j.py":4)  // error: unknown op \'Addd\''))
    assert e.hint == "did you mean Add?"
    assert e.col == 12


def test_use_of_an_undefined_value_is_a_parse_error_at_its_line():
    expect_error(GOOD.replace('Add(%a, %a) : i64  loc("j.py":4)',
                              'Add(%a, %zz) : i64  loc("j.py":4)  // error: %zz is used before it is defined'))


def test_a_value_from_another_tasks_region_is_undefined_there():
    expect_error("""\
module {
  group body {
    task @"t" {outputs = [@"x"]} body {
      %a = Const {value = dense<i64: 1>} : i64
    }
    task @"u" {outputs = [@"x"]} body {
      store @"x"(%a)  // error: %a is used before it is defined
    }
  }
}
""")


def test_a_value_defined_twice_is_a_parse_error():
    expect_error(GOOD.replace('%b = Add(%a, %a) : i64  loc("j.py":4)',
                              '%a = Add(%a, %a) : i64  loc("j.py":4)  // error: %a is defined twice'))


def test_an_unclosed_string_is_reported_on_its_own_line():
    e = expect_error(GOOD.replace('loc("j.py":4)', 'loc("j.py:4)  // error: unexpected \'loc\''))
    assert 'a location (loc("file":line))' in e.hint


def test_a_region_given_twice_is_a_parse_error():
    expect_error("""\
module {
  group body {
    task @"t" {outputs = [@"x"]} body {
      %c = Const {value = dense<bool: true>} : bool
      if(%c) then {
      } then {  // error: if has its then region twice
      }
    }
  }
}
""")


def test_unknown_type_and_unknown_argument_are_parse_errors():
    expect_error(GOOD.replace('Add(%a, %a) : i64  loc("j.py":4)',
                              'Add(%a, %a) : i65  loc("j.py":4)  // error: unknown type \'i65\''))
    expect_error(GOOD.replace('Const {value = dense<i64: 1>} : i64  loc("j.py":3)',
                              'Const {valu = 1} : i64  loc("j.py":3)  // error: did you mean \'value\' for \'valu\'?'))


def test_text_that_is_not_a_module_is_refused_at_its_first_line():
    text = GOOD.replace("module {", "group {  // error: the text must hold a module, not 'group'", 1)
    expect_error(text)


def test_verifier_error_in_text_points_at_the_text_line_not_the_recorded_loc():
    e = expect_error(GOOD.replace('%b = Add(%a, %a) : i64  loc("j.py":4)',
                                  '%b = Add(%a, %a) : f32  loc("j.py":4)  // error: result types (f32) differ'),
                     kind=VerifyError)
    assert e.loc.file != "j.py"


def test_passes_run_on_a_parsed_module_and_keep_it_valid():
    module = parse(GOOD, "t.dslir")
    PassManager(list(DEFAULT_PIPELINE), verify_each=True).run(module)
    assert LocalSession(Workspace(), passes="none").run_module(module) == {"x": 2}


# ----------------------------------------------------------------------------- the command line

JOB = """\
from dslc.net_builder import ops
from dslc.task import Task, final_output


def build_job():
    with Task():
        total = ops.Const(0, blob_out="total")
        odd = ops.Const(0, blob_out="odd")
        with ops.loop(7) as loop:
            ops.Add([total, loop.iter()], [total])
            half = ops.Div([loop.iter(), ops.Const(2)])
            with ops.If(ops.NE([ops.Mul([half, ops.Const(2)]), loop.iter()])):
                ops.Add([odd, ops.Const(1)], [odd])
        return {"total": final_output(total), "odd": final_output(odd)}
"""
JOB_OUTPUT = {"total": sum(range(7)), "odd": sum(i % 2 for i in range(7))}


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def job_ir(tmp_path, capsys):
    """``dslc ir job.py -o job.dslir`` for JOB (no passes: the lowered module)."""
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    ir = tmp_path / "job.dslir"
    code, _, err = run_cli(capsys, "ir", tmp_path / "job.py", "-o", ir)
    assert code == 0, err
    return ir


def outputs_of(out: str) -> dict:
    return {k: int(v) for k, v in (line.split(" = ") for line in out.splitlines())}


@pytest.mark.parametrize("passes", ["none", "default"])
def test_cli_runs_an_ir_file(capsys, job_ir, passes):
    code, out, err = run_cli(capsys, "run", job_ir, "--passes", passes)
    assert code == 0, err
    assert outputs_of(out) == JOB_OUTPUT


def test_cli_opt_runs_the_named_passes_and_its_output_runs_the_same(capsys, job_ir, tmp_path):
    text = job_ir.read_text(encoding="utf-8")
    code, out, err = run_cli(capsys, "opt", job_ir, "--passes", "promote-blobs,fold-constants,dce")
    assert code == 0, err
    assert out != text and print_module(parse(out)) == out
    assert "load" not in out.split("for(", 1)[1]  # promoted: the loop carries the sums
    opt = tmp_path / "opt.dslir"
    opt.write_text(out, encoding="utf-8")
    code, out, err = run_cli(capsys, "run", opt, "--passes", "none")
    assert code == 0, err
    assert outputs_of(out) == JOB_OUTPUT


def test_cli_reports_a_bad_ir_file_in_one_line_with_line_and_column(capsys, tmp_path):
    bad = tmp_path / "bad.dslir"
    bad.write_text(GOOD.replace("Add(%a, %a)", "Addd(%a, %a)"), encoding="utf-8")
    for command in ("run", "opt"):
        code, out, err = run_cli(capsys, command, bad)
        assert code == 2 and out == ""
        assert err.strip() == f"{bad}:5:12: error: unknown op 'Addd'; did you mean Add?"
