"""Random lookup programs (tests/random/programs_lookup.py): every lookup op at negative and edge
ids gives the evaluator's values on every backend, with and without passes and from its IR
text; an id an op refuses stops the run with a located error naming the op and the id; the
tables' gradients (dense or sparse) match central finite differences of the evaluator.

CI runs a fixed, derandomized set (DSLC_LOOKUP_EXAMPLES, default 4 per backend, and fixed examples); the
nightly run (bench/nightly_random.py) sets DSLC_HYPOTHESIS_EXAMPLES=N for N random ones.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import assume, example, given, note

import programs as P
import programs_lookup as L
from dslc import workspace
from dslc.ir.diagnostics import DSLError
from dslc.session import LocalSession

H = 1e-6


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_LOOKUP_EXAMPLES", "4")))


_close = P.assert_floats_close


def _refused(run, refused, how: str) -> None:
    """``run()`` stops at one of the ``refused`` statements (any whose inputs were made: the
    passes may order independent ones either way), located in programs_lookup.py."""
    try:
        run()
    except DSLError as e:
        assert any(f"{r.op}: id {r.id} is outside" in e.message for r in refused), f"{how}: {e.message}"
        assert e.loc is not None and e.loc.file.endswith("programs_lookup.py"), f"{how}: {e.loc}"
        return
    raise AssertionError(f"{how}: ran, but {refused[0]} should have stopped it")


def _examples(programs):
    def add(test):
        for p in programs:
            test = example(program=p)(test)
        return test
    return add


@pytest.mark.own_pipeline  # runs itself with passes default and none
@_settings()
@given(program=L.programs())
@_examples(L.EXAMPLES)
def test_lookup_programs_agree_with_the_evaluator(backend, program):
    P.fresh()
    note(L.render(program))
    want, refused = L.evaluate(program)
    task, outputs = L.build(program)
    text = P.ir_text(task)
    for passes in ("default", "none"):
        run = lambda: P.run_task(task, outputs, backend, passes)  # noqa: E731
        if refused:
            _refused(run, refused, f"{backend}, {passes}")
        else:
            _close(run(), want, program.dtype, f"{backend}, {passes}")
    if refused:
        _refused(lambda: P.run_text(text, backend), refused, f"{backend}, the IR text")
    else:
        _close(P.run_text(text, backend), want, program.dtype, f"{backend}, the IR text")


@_settings()
@given(program=L.programs(dtypes=("float64",), only=L.DIFFERENTIABLE))
@_examples(L.GRADIENT_EXAMPLES)
def test_lookup_gradients_match_finite_differences(backend, program):
    P.fresh()
    note(L.render(program))
    want, refused = L.evaluate(program, strict=True)
    assume(not refused)
    net, values = L.build_net(program)
    last = f"x{program.body[-1].dst}"
    r = np.random.default_rng(program.seed).uniform(-1, 1, want[last].shape)
    for name, v in dict(values, R=r).items():
        workspace.FeedBlob(name, v)
    net.Mul([last, "R"], "projected")
    net.SumElements(["projected"], "loss")
    grads = net.AddGradientOperators(["loss"])
    with LocalSession(backend=backend) as session:
        session.run(net)
    got = P.dense_gradient(grads["x0"], values["x0"])
    x = values["x0"].copy()
    numeric = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        saved = x[idx]
        x[idx] = saved + H
        up = float(np.sum(L.evaluate(program, dict(values, x0=x))[0][last] * r))
        x[idx] = saved - H
        down = float(np.sum(L.evaluate(program, dict(values, x0=x))[0][last] * r))
        x[idx] = saved
        numeric[idx] = (up - down) / (2 * H)
    np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-6, err_msg="d loss / d x0")
