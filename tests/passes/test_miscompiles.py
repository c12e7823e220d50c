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

from dslc.driver import cli
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


# The job (37.5): in a PRIVATE task, dce removes the Copy (c is never read) and
# leaves each loop body holding only the `must` check of d; numba's island wrote the
# `for` (and the `while`'s rest after its break) with nothing but a comment in it, and
# Python's SyntaxError was reported as the user's nesting depth.
EMPTIED_LOOP_BODIES = """
from dslc.net_builder import ops
from dslc.task import Task, TaskGroup, final_output, WorkspaceType

def build_job():
    with TaskGroup(workspace_type=WorkspaceType.PRIVATE) as tg:
        with Task(workspace_type=WorkspaceType.PRIVATE):
            with ops.task_init():
                ops.Const(3, blob_out='d')
                ops.Const(0, blob_out='g')
            with ops.loop(2):
                ops.Copy(['d'], ['c'])
            with ops.loop():
                ops.stop_if(ops.GE(['g', ops.Const(3)]))
                ops.Add(['g', ops.Const(1)], ['g'])
                ops.Copy(['d'], ['c'])
            out = final_output(ops.Add(['d', 'g']))
    return tg, {'out': out}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_bodies_dce_empties_run(tmp_path, capsys, backend):
    """g counts to 3, d stays 3: out = 6. The real Caffe2 (torch 1.10.2, this job under
    LocalSession through ../shared/tools/caffe2-ref/run.sh) prints 6 too."""
    for got in every_way(tmp_path, capsys, EMPTIED_LOOP_BODIES, backend):
        assert got == {"out": 6}


# Every construct whose block holds only a `must` (a comment in numba's source): a
# `for`, an `if`'s then and else, a `while`'s rest after its break, carried or not.
MUST_ONLY_BLOCKS = """
module {source = "must.dslir", outputs = [["g", @"g"], ["n", @"n"]]} {
  group body {
    task @"t" {workspace = "global"} body {
      %d = Const {value = dense<i64: 3>} : i64
      store @"d"(%d)
      %d1 = load @"d" {optional = 1} : i64
      %c = Const {value = dense<bool: true>} : bool
      %n = Const {value = dense<i64: 2>} : i64
      for(%n) {
      ^(%i: i64):
        %m1 = must @"d"(%d1) : i64
        yield
      }
      if(%c) then {
        %m2 = must @"d"(%d1) : i64
        yield
      } else {
        yield
      }
      if(%c) then {
        yield
      } else {
        %m3 = must @"d"(%d1) : i64
        yield
      }
      %g0 = Const {value = dense<i64: 0>} : i64
      %g = loop(%g0) : i64 {
      ^(%gi: i64):
        %one = Const {value = dense<i64: 1>} : i64
        %gn = Add(%gi, %one) : i64
        %k = Const {value = dense<i64: 4>} : i64
        %stop = GE(%gn, %k) : bool
        break_if(%stop, %gn)
        %m4 = must @"d"(%d1) : i64
        yield(%gn)
      }
      store @"g"(%g)
      %cnt = CreateCounter {init_count = 3} : !counter
      loop {
        %down = CountDown(%cnt) : bool
        break_if(%down)
        %m5 = must @"d"(%d1) : i64
        yield
      }
      %left = RetrieveCount(%cnt) : i64
      store @"n"(%left)
    }
  }
}
"""


@pytest.mark.parametrize("passes", ["none", "default"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_blocks_holding_only_a_must_run(tmp_path, capsys, backend, passes):
    """g: 1, 2, 3 continue, 4 breaks: g = 4. The counter counts down 3, 2, 1, 0 (not
    done) and breaks at the fifth CountDown, which leaves it at -1 (spec 1.8)."""
    ir = tmp_path / "must.dslir"
    ir.write_text(MUST_ONLY_BLOCKS)
    assert run_json(capsys, "run", ir, "--backend", backend, "--passes", passes) == {"g": 4, "n": -1}


def test_generated_code_that_does_not_compile_is_an_internal_error_naming_the_backend(
        tmp_path, capsys, monkeypatch):
    """Not the user's nesting depth: a block the numba source writer leaves empty (here,
    made so by dropping its `pass`) is dslc's bug, exit 1, naming the backend."""
    from dslc.backends.numba import source

    emit = source.Writer.emit
    monkeypatch.setattr(source.Writer, "emit", lambda w, indent, text: None if text == "pass" else emit(w, indent, text))
    ir = tmp_path / "must.dslir"
    ir.write_text(MUST_ONLY_BLOCKS)
    code = cli.main(["run", str(ir), "--backend", "numba", "--passes", "none"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "internal error" in err and "the numba backend generated Python that does not compile" in err, err
    assert "deeper than Python" not in err and "must.dslir:" in err, err  # (the op's line, in the message)


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
