"""Programs the passes or a backend once got wrong, run as a user runs them: job files
through the CLI on every backend (numba with every island compiled, see conftest), with
the pass pipeline and without, and through the IR text (``dslc ir -o``, then ``dslc run``
of the ``.dslir``). The expected outputs are worked out by hand in each docstring.

Also: a pass that breaks the IR is dslc's error (exit 1, naming the pass), never the
user's (exit 2 at their line).
"""
from __future__ import annotations

import json
import textwrap

import pytest

from dslc import cli
from dslc.ir.passes import manager

BACKENDS = ["interp", "numba"]

# An integer Div (may fail, so DCE keeps it though nothing uses it) of an Abs, in the Elif
# branch of an If inside a loop with a stop_if: fusion grouped the two into a `fused` op
# with no result, which make_op refused as the user's error at the Div's line.
UNUSED_FUSED_GROUP = """
from dslc.net_builder import ops
from dslc.task import Task, final_output

def build_job():
    with Task():
        ops.Const(0, blob_out='guard0')
        with ops.loop():
            ops.Add(['guard0', ops.Const(1)], ['guard0'])
            ops.stop_if(ops.GE(['guard0', ops.Const(2)]))
            with ops.If(ops.Const(True)) as br0:
                ops.Const([0], blob_out='d')
            ops.Copy(['guard0'], ['a'])
            with br0.Elif(ops.GT(['a', ops.Const(0)])) as br0:
                ops.Div([ops.Const([0]), ops.Abs(['d'])], ['local/v'])
        return {'d': final_output('d')}
"""

# Relu then Sqr, and their gradients: the init net's constant folds the forward ops, and
# fusion groups Sqr's gradient (Mul, Scale) with ReluGradient, which had no scalar form
# in numba's fused kernels (an internal TypeError).
RELU_SQR_GRADIENT = """
import numpy as np
from dslc import core
from dslc.net_builder import ops
from dslc.task import Task, final_output

def build_job():
    init = core.Net('init')
    init.Const(np.array([[0.5, -0.25]], dtype=np.float32), 'x')
    net = core.Net('train')
    net.Relu(['x'], 'h0')
    net.Sqr(['h0'], 'h1')
    net.SumElements(['h1'], 'loss')
    net.AddGradientOperators(['loss'])
    with Task() as task:
        ops.net(init)
        ops.net(net)
        return task, {'loss': final_output('loss'), 'x_grad': final_output('x_grad')}
"""

# The same chain through Clip and its gradient (Clip had no numba kernel at all).
CLIP_CHAIN_GRADIENT = """
import numpy as np
from dslc import core
from dslc.net_builder import ops
from dslc.task import Task, final_output

def build_job():
    init = core.Net('init')
    init.Const(np.array([[0.5, -0.25, 2.0, -3.0]], dtype=np.float32), 'x')
    net = core.Net('train')
    net.Negative(['x'], 'n')
    net.Clip(['n'], 'c', min=-1.0, max=1.0)
    net.Sqr(['c'], 'h')
    net.SumElements(['h'], 'loss')
    net.AddGradientOperators(['loss'])
    with Task() as task:
        ops.net(init)
        ops.net(net)
        return task, {'c': final_output('c'), 'x_grad': final_output('x_grad')}
"""


def run_json(capsys, *argv) -> dict:
    code = cli.main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["outputs"]


def every_way(tmp_path, capsys, text: str, backend: str) -> list:
    """The job's outputs: with and without the passes, and from its IR text."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(text))
    got = [run_json(capsys, "run", job, "--backend", backend, "--passes", p) for p in ("default", "none")]
    ir = tmp_path / "job.dslir"
    assert cli.main(["ir", str(job), "-o", str(ir)]) == 0
    capsys.readouterr()
    got.append(run_json(capsys, "run", ir, "--backend", backend))
    return got


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unused_failing_fused_group_in_an_elif_runs(tmp_path, capsys, backend):
    """The If's condition is true on both iterations, so the Elif never runs: d = [0]."""
    for got in every_way(tmp_path, capsys, UNUSED_FUSED_GROUP, backend):
        assert got == {"d": [0]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_relu_then_sqr_gradient(tmp_path, capsys, backend):
    """x = [0.5, -0.25]: h0 = [0.5, 0], loss = 0.25; d loss / dx = 2 h0 where x > 0, else 0."""
    for got in every_way(tmp_path, capsys, RELU_SQR_GRADIENT, backend):
        assert got == {"loss": 0.25, "x_grad": [[1.0, 0.0]]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_chain_gradient(tmp_path, capsys, backend):
    """n = -x = [-0.5, 0.25, -2, 3]; c = clip(n, -1, 1) = [-0.5, 0.25, -1, 1]; loss = sum c^2.
    d loss / dx = -(2 c) where -1 < n < 1, else 0 = [1, -0.5, 0, 0]."""
    for got in every_way(tmp_path, capsys, CLIP_CHAIN_GRADIENT, backend):
        assert got == {"c": [[-0.5, 0.25, -1.0, 1.0]], "x_grad": [[1.0, -0.5, 0.0, 0.0]]}


# ----------------------------------------------------------------------------- broken passes
class _DropYields(manager.Pass):
    """A deliberately broken pass: drops the yield ending every branch of an if with results."""

    name = "test-drop-yields"

    def run(self, module):
        for op in module.walk():
            if op.name == "if" and op.results:
                for r in op.regions:
                    r.ops = r.ops[:-1]


class _Raises(manager.Pass):
    """A deliberately broken pass: makes an op its declaration refuses (a VerifyError)."""

    name = "test-raises"

    def run(self, module):
        from dslc.ir.builder import make_op
        make_op("fused", [], result_types=[], loc=module.body.ops[0].loc)


@pytest.fixture(autouse=True)
def broken_passes(monkeypatch):
    for p in (_DropYields, _Raises):
        monkeypatch.setitem(manager.PASSES, p.name, p)


IF_JOB = """
from dslc.net_builder import ops
from dslc.task import Task, final_output

def build_job():
    with Task():
        x = ops.Const(1, blob_out='x')
        with ops.loop(3):
            with ops.If(ops.GT([x, ops.Const(0)])):
                ops.Add([x, ops.Const(1)], [x])
        return {'x': final_output(x)}
"""


@pytest.mark.parametrize("broken", ["test-drop-yields", "test-raises"])
def test_a_pass_that_breaks_the_ir_is_an_internal_error_naming_it(tmp_path, capsys, broken):
    job = tmp_path / "job.py"
    job.write_text(IF_JOB)
    code = cli.main(["run", str(job), "--passes", f"infer-types,promote-blobs,{broken}"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "internal error" in err and f"the pass {broken} broke the IR" in err, err
    assert not err.startswith(str(job)), err  # not reported at the user's line


def test_the_pass_is_named_without_verifying_after_each(tmp_path, capsys):
    """Without --verify-each, the final verification finds the broken IR; the passes run
    again on a fresh lowering, verifying after each, to name the one that broke it."""
    job = tmp_path / "job.py"
    job.write_text(IF_JOB)
    code = cli.main(["run", str(job), "--passes", "infer-types,promote-blobs,test-drop-yields,dce"])
    err = capsys.readouterr().err
    assert code == 1 and "the pass test-drop-yields broke the IR" in err, err
