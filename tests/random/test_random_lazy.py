"""Random programs (tests/random/programs.py) on the numba backend compiling "hot", every
loop at the top of a region switched to the numba backend's code after its first
iteration (backends/numba/lazy.py): the carried values, counters, guards and early exits
crossing the switch give the evaluator's answers. The islands the switched loops hold stay
on the interpreter's code (the other random tests compile them)."""
from __future__ import annotations

import pytest
from hypothesis import given, note

import programs as P
from dslc.backends.numba import islands, lazy
from dslc.runtime.workspace import Workspace
from dslc.session import LocalSession
from test_random_programs import _settings, assert_same

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


@_settings()
@given(program=P.programs())
def test_loops_switched_after_their_first_iteration_give_the_evaluators_answers(program):
    P.fresh()
    note(P.render(program))
    task, outputs = P.build(program)
    want = P.evaluate(program)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(islands, "HOT_MS", 10 ** 9)  # (no island compiles, no region splits by itself)
        mp.setattr(lazy.Loop, "spent", lambda self, seconds: self.split())
        with LocalSession(Workspace(), backend="numba", when="hot") as session:
            session.run(task)
            got = {name: out.fetch() for name, out in outputs.items()}
            loops = [lz for lz in session.compile(task).program.lazies if isinstance(lz, lazy.Loop)]
    assert_same(got, want, "loops switched midway")
    assert all(not lz.failed for lz in loops)
