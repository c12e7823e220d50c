"""Random tensor programs (tests/random/programs_tensor.py): every backend, with and without
passes, and the IR text read back, give what the plain numpy evaluator computes; the
gradients AddGradientOperators derives for them match central finite differences of
that evaluator.

CI runs a fixed, derandomized set (DSLC_TENSOR_EXAMPLES, default 4 per backend;
DSLC_WINDOW_EXAMPLES, default 2, of the window programs: each compiles its own numba
kernels, minutes on two cores at the former 12 and 6); the nightly run
(bench/nightly_random.py) sets DSLC_HYPOTHESIS_EXAMPLES=N for N random ones of each.
The window programs are drawn on image batches, of convolutions (grouped, every
legacy_pad mode), transposed convolutions (grouped) and pooling, between activations.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

import programs as P
import programs_tensor as T
import programs_windows as windows
from dslc import workspace
from dslc.ir.gradients import GRADIENTS
from dslc.session import LocalSession

H = 1e-6
# the ops whose gradient the op table declares (loops aside: a blob rewritten in a loop has none)
DIFFERENTIABLE = frozenset(op for op in T.ALL_OPS if op in GRADIENTS)
WINDOW_PROGRAMS = frozenset(windows.OPS) | {"Relu", "Sigmoid", "Add"}


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_TENSOR_EXAMPLES", "4")))


def _window_settings():
    # (fewer: each program compiles its own numba regions, a window program's many)
    return P.hypothesis_settings(int(os.environ.get("DSLC_WINDOW_EXAMPLES", "2")))


_close = P.assert_floats_close


@pytest.mark.own_pipeline  # runs itself with passes default and none
@_settings()
@given(program=T.programs())
def test_tensor_programs_agree_with_the_evaluator(backend, program):
    _agrees(backend, program)


@pytest.mark.own_pipeline  # runs itself with passes default and none
@_window_settings()
@given(program=T.programs(only=WINDOW_PROGRAMS, images=True))
def test_window_programs_agree_with_the_evaluator(backend, program):
    _agrees(backend, program)


def _agrees(backend, program):
    P.fresh()
    note(T.render(program))
    want = T.evaluate(program)
    task, outputs = T.build(program)
    for passes in ("default", "none"):
        _close(P.run_task(task, outputs, backend, passes), want, program.dtype, f"{backend}, {passes}")
    _close(P.run_text(P.ir_text(task), backend), want, program.dtype, f"{backend}, the IR text")


def _numeric_grad(program, values, name, project):
    x = values[name]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        saved = x[idx]
        x[idx] = saved + H
        up = project(values)
        x[idx] = saved - H
        down = project(values)
        x[idx] = saved
        g[idx] = (up - down) / (2 * H)
    return g


@_settings()
@given(program=T.programs(dtypes=("float64",), only=DIFFERENTIABLE), inline=st.booleans())
def test_tensor_program_gradients_match_finite_differences(backend, program, inline):
    """``inline``: the inputs are constants of the net, as in a job file's init net; the
    passes then fold the forward ops and fuse the backward ones."""
    _gradients_match(backend, program, inline)


@_window_settings()
@given(program=T.programs(dtypes=("float64",), only=WINDOW_PROGRAMS & DIFFERENTIABLE, images=True),
       inline=st.booleans())
def test_window_program_gradients_match_finite_differences(backend, program, inline):
    _gradients_match(backend, program, inline)


def _gradients_match(backend, program, inline):
    P.fresh()
    note(T.render(program) + (", inputs inline" if inline else ""))
    net, values = T.build_net(program)
    assume(T.kink_distance(program, values) > 1e-3)
    last = f"x{program.body[-1].dst}"
    r = np.random.default_rng(program.seed).uniform(-1, 1, np.shape(T.evaluate(program)[last]))
    for name, v in ({"R": r} if inline else dict(values, R=r)).items():
        workspace.FeedBlob(name, v)
    net.Mul([last, "R"], "projected")
    net.SumElements(["projected"], "loss")
    grads = net.AddGradientOperators(["loss"])
    with LocalSession(backend=backend) as session:
        session.run(T.with_inputs(net, values) if inline else net)

    def project(vals):
        return float(np.sum(T.evaluate(program, vals)[last] * r))

    for name in values:
        if name not in grads:
            continue
        got = P.dense_gradient(grads[name], values[name])
        want = _numeric_grad(program, dict(values), name, project)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale, err_msg=f"d loss / d {name}")
