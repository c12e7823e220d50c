"""Random programs (tests/random/programs.py): every way of running one gives the evaluator's answer.

For each drawn program, on each backend: the default pipeline, no passes, and the
lowered and optimized modules parsed back from their text all give the outputs the
plain-Python evaluator computes. And the IR text round-trips (print, parse, print)
straight from the lowering and after each pass of the default pipeline.

CI runs a fixed, derandomized set of examples (DSLC_PROGRAM_EXAMPLES, default 12 per
backend, of the pipelines and text tests); set DSLC_HYPOTHESIS_EXAMPLES=N to explore N
random ones instead (the nightly run, bench/nightly_random.py).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import example, given, note

import programs as P
from dslc.runtime.workspace import Workspace
from dslc.ir import parse, print_module
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
from dslc.lower import lower_group
from dslc.session import LocalSession


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_PROGRAM_EXAMPLES", "12")))


# int64 wraparound is the semantics, not an accident: numpy's overflow warnings are noise here
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


fresh = P.fresh


def assert_same(got: dict, want: dict, how: str) -> None:
    """Ints and bools exactly; float32 to a relative 1e-5 (inf and nan must match)."""
    assert set(got) == set(want), how
    for name, w in want.items():
        g = np.asarray(got[name])
        assert g.shape == (), f"{how}: {name} has shape {g.shape}"
        if isinstance(w, np.float32):
            assert g.dtype == np.float32, f"{how}: {name} is {g.dtype}"
            assert np.isclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True), f"{how}: {name} = {g}, expected {w}"
        elif isinstance(w, bool):
            assert g.dtype == np.bool_ and bool(g) == w, f"{how}: {name} = {g!r}, expected {w}"
        else:
            assert g.dtype == np.int64 and int(g) == w, f"{how}: {name} = {g!r}, expected {w}"


def run_task(task, outputs, backend, passes):
    """Run ``task`` in a fresh session: its outputs, and the module the backend compiled."""
    with LocalSession(Workspace(), backend=backend, passes=passes) as session:
        session.run(task)
        return {name: out.fetch() for name, out in outputs.items()}, session.compile(task).module


def run_text(text: str, backend, passes) -> dict:
    """Parse IR text and run it on a fresh workspace: outputs by blob name."""
    module = parse(text)
    return LocalSession(Workspace(), backend=backend, passes=passes).run_module(module)


def assert_round_trips(module, when: str) -> str:
    """print(parse(print(m))) == print(m), and the parsed module verifies; returns the text."""
    text = print_module(module)
    again = print_module(parse(text, f"<{when}>"))  # parse() verifies
    assert again == text, f"the IR text does not round-trip {when}"
    return text


def lowered(task):
    """The module straight from the lowering, before any pass."""
    return lower_group(LocalSession.as_group(task), "", {})


# Found by this test (seed 31): without passes each op loads the counter blob afresh, so
# one compiled region held two values of counter c1; each got its own copy of the count,
# and the ResetCounter through one was lost when the other's count was written back.
_TWO_VALUES_OF_ONE_COUNTER = P.Program(
    ints=(), floats=(), bools=(True,), counters=(0, 0), guards=0,
    body=(P.Guard(dst=0, body=()),
          P.If(cond=P.BVar(k=0), body=(), elifs=(), orelse=(P.Loop(count=3, exit_to=None, body=(P.If(
              cond=P.CounterDone(counter=1), body=(), orelse=(),
              elifs=(P.Elif(cond=P.CounterDone(counter=1), body=(), before=(P.Reset(counter=1, init=0, dst=None),)),
                     P.Elif(cond=P.Not(c=P.CountDown(counter=1)), body=(), before=()))),)),))))


# The job (37.5): in a PRIVATE task whose variables are set in its init phase, the
# loop body only copies into a blob nothing reads; dce leaves it holding only the check of
# v0, and numba's island wrote an empty `for`. Caffe2 (that job through
# ../shared/tools/caffe2-ref/run.sh) runs it; v0 stays 3.
_A_LOOP_BODY_DCE_EMPTIES = P.Program(ints=(3,), floats=(), bools=(), counters=(0,), guards=0,
                                     body=(P.Loop(count=1, body=(P.Scratch(src=0),)),), private=True, in_init=True)


@pytest.mark.own_pipeline  # runs itself with passes default and none
@_settings()
@given(program=P.programs())
@example(program=_TWO_VALUES_OF_ONE_COUNTER)
@example(program=_A_LOOP_BODY_DCE_EMPTIES)
def test_pipelines_text_and_evaluator_agree(backend, program):
    """The default pipeline, no passes, the lowered and the optimized module read back
    from their text: all give the evaluator's outputs."""
    fresh()
    note(P.render(program))
    task, outputs = P.build(program)
    want = P.evaluate(program)
    got, optimized = run_task(task, outputs, backend, "default")
    assert_same(got, want, "default pipeline")
    got, unoptimized = run_task(task, outputs, backend, "none")
    assert_same(got, want, "no passes")
    assert_same(run_text(print_module(unoptimized), backend, "default"), want, "lowered module parsed from text")
    assert_same(run_text(print_module(optimized), backend, "none"), want, "optimized module parsed from text")


@pytest.mark.own_pipeline  # applies the passes itself
@_settings()
@given(program=P.programs())
def test_ir_text_round_trips_after_lowering_and_after_every_pass(program):
    """The text does not depend on the backend: this runs once."""
    fresh()
    note(P.render(program))
    task, _ = P.build(program)
    module = lowered(task)
    text = assert_round_trips(module, "after lowering")
    for name in DEFAULT_PIPELINE:
        PassManager([name]).run(module)
        if print_module(module) != text:  # the same text again would parse the same
            text = assert_round_trips(module, f"after {name}")


def _in_pieces(backend, program, monkeypatch):
    from dslc.backends.interp import codegen
    monkeypatch.setattr(codegen, "PIECE_LINES", 2)
    fresh()
    note(P.render(program))
    task, outputs = P.build(program)
    want = P.evaluate(program)
    assert_same(run_task(task, outputs, backend, "default")[0], want, "default pipeline, in pieces")
    assert_same(run_task(task, outputs, backend, "none")[0], want, "no passes, in pieces")


@pytest.mark.own_pipeline  # runs itself with passes default and none
@P.hypothesis_settings(12)
@given(program=P.programs())
def test_regions_compiled_in_pieces_give_the_evaluators_answers(program, monkeypatch):
    """A region's function is compiled in pieces of PIECE_LINES lines (a NetDef of 200k ops
    is one region): here of 2, so every construct meets a cut, and the values a piece
    makes reach the pieces after it through their list, loop-carried ones included."""
    _in_pieces("interp", program, monkeypatch)


@pytest.mark.own_pipeline  # runs itself with passes default and none
@pytest.mark.numba
@P.hypothesis_settings(2)
@given(program=P.programs())
def test_numba_regions_compiled_in_pieces_give_the_evaluators_answers(program, monkeypatch):
    """The same with numba's islands among the pieces (fewer examples: each compiles)."""
    _in_pieces("numba", program, monkeypatch)
