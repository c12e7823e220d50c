"""Random numeric programs (tests/random/programs_numeric.py): every backend, with and without
passes, and the IR text read back, give what the plain numpy evaluator computes, or
fail with the error it names.

CI runs a fixed, derandomized set (DSLC_NUMERIC_EXAMPLES, default 10 per backend); the
nightly run (bench/nightly_random.py) sets DSLC_HYPOTHESIS_EXAMPLES=N for N random ones.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, note

import programs as P
import programs_numeric as N
from dslc.ir.diagnostics import DSLError


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_NUMERIC_EXAMPLES", "10")))


def same(got, want) -> bool:
    """Same dtype; ints equal; floats equal with the same sign (zeros), or both NaN."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != () or g.dtype != w.dtype:
        return False
    if w.dtype.kind == "f":
        return bool((np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w)))
    return bool(g == w)


def check(how: str, run, want) -> None:
    """``run()`` gives outputs equal to ``want``, or fails as ``want`` (an N.Failed) says."""
    if isinstance(want, N.Failed):
        with pytest.raises(DSLError) as e:
            run()
        assert str(want) in e.value.one_line(), f"{how}: {e.value.one_line()}"
        return
    got = run()
    bad = {k: (got.get(k), w) for k, w in want.items() if not same(got.get(k), w)}
    assert not bad, f"{how}: (got, expected) {bad}"


@pytest.mark.own_pipeline  # runs itself with passes default and none
@_settings()
@given(program=N.programs())
def test_numeric_programs_agree_with_the_evaluator(backend, program):
    P.fresh()
    note(N.render(program))
    want = N.evaluate(program)
    task, outputs = N.build(program)
    for passes in ("default", "none"):
        check(f"{backend}, passes {passes}", lambda: P.run_task(task, outputs, backend, passes), want)
    text = P.ir_text(task)
    check(f"{backend}, the IR text", lambda: P.run_text(text, backend), want)
