"""Random tensor programs run again with other fed sizes (issue 40's shape-generic compiles).

A program of the ops whose meaning does not tie a dim to an attribute (tests/random/
programs_tensor.py's elementwise and binary ops, reductions, Transpose, ExpandDims, Squeeze,
Softmax, MatMul, FC, SquaredL2Distance) is created once as a net and run three
times: with the sizes it was drawn with, then twice with every dim other than 1 grown
(each size to one new size everywhere it occurs, so every shape the ops need to agree still
does). The second run compiles the net once more with those dims unknown; the third reuses
that compile. Every run gives what the numpy evaluator computes for its inputs, on every
backend (so numba's compiled results equal the interpreter's), and the net is compiled twice.

CI runs a fixed, derandomized set (DSLC_SIZES_EXAMPLES, default 4 per backend); the nightly
run (bench/nightly_random.py) sets DSLC_HYPOTHESIS_EXAMPLES=N for N random ones.
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import given, note

import programs as P
import programs_tensor as T
from dslc import workspace
from dslc.driver import runner

SIZE_FREE = frozenset(T.ELEMENTWISE + T.BINARY) | {
    "ReduceSum", "ReduceMean", "Transpose", "ExpandDims", "Squeeze", "SumElements", "Softmax",
    "MatMul", "FC", "SquaredL2Distance"}  # (Accumulate, a loop, needs a Task: build_net makes a Net)


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_SIZES_EXAMPLES", "4")))


def grown(values: dict, step: int, seed: int) -> dict:
    """New inputs: each dim size d > 1 becomes d + step wherever it occurs (1 stays 1, so
    what broadcasts or was reduced still does); values float32-exact, as Program.arrays."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, v in values.items():
        shape = tuple(d + step if d > 1 else d for d in v.shape)
        out[name] = rng.uniform(-1.5, 1.5, shape).astype(np.float32).astype(v.dtype)
    return out


@given(program=T.programs(only=SIZE_FREE))
@_settings()
def test_programs_fed_other_sizes_compile_once_more_and_agree(backend, program, monkeypatch):
    P.fresh()
    note(T.render(program))
    monkeypatch.setenv("DSLC_BACKEND", backend)  # (the session RunNet uses)
    net, values = T.build_net(program)
    runs = [values, grown(values, 1, program.seed + 1), grown(values, 3, program.seed + 2)]
    for k, feeds in enumerate(runs):
        for name, v in feeds.items():
            workspace.FeedBlob(name, v)
        if k == 0:
            workspace.CreateNet(net)
        workspace.RunNet(net.Name())
        want = T.evaluate(program, feeds)
        got = {name: workspace.FetchBlob(name) for name in want}
        P.assert_floats_close(got, want, program.dtype, f"{backend}, run {k + 1}, inputs {[v.shape for v in feeds.values()]}")
    # the drawn sizes, then once with the grown dims unknown (the third run reuses it); a
    # program that reads only 1-sized inputs is fed the same sizes every time
    read = {o for s in program.body for o in s.operands}
    grew = any(d > 1 for name, v in values.items() if name in read for d in v.shape)
    assert runner.current().session().compiles == (2 if grew else 1)
