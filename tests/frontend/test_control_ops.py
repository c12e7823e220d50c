"""Caffe2's control ops inside a net (If, While, Do; brew.cond and brew.loop): the
values worked out by hand, on both backends, and the structured IR they lower to."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import brew, core, workspace
from dslc.control_ops_util import ControlOpError, add_if_op
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]


def _run(net, backend):
    with LocalSession(backend=backend) as s:
        s.run(net)


def _cond_model():
    then_model = ModelHelper(name="then")
    then_model.net.Scale("x", "y", scale=2.0)
    else_model = ModelHelper(name="else")
    tmp = else_model.net.Add(["x", "x"], "tmp")  # a blob local to the branch
    else_model.net.Add([tmp, "x"], "y")
    model = ModelHelper(name="cond")
    brew.cond(model, "c", ["x", "y"], then_model, else_model)
    return model


@pytest.mark.parametrize("backend", BACKENDS)
def test_cond_runs_the_branch_its_condition_picks(backend):
    model = _cond_model()
    x = np.array([1.0, -2.0, 3.5], np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("y", np.zeros(3, np.float32))
    for c, want in ((True, 2 * x), (False, 3 * x)):
        workspace.FeedBlob("c", np.array(c))
        _run(model.net, backend)
        np.testing.assert_array_equal(workspace.FetchBlob("y"), want)
    assert not workspace.HasBlob("tmp")  # the else branch's own blob stays inside it


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_with_a_condition_net(backend):
    """counter counts 1..10 in the condition net; the body adds 2 while counter < 10: 9 times."""
    for name, v in dict(cond=True, ONE=1, TWO=2, TEN=10, counter=0, out=0).items():
        workspace.FeedBlob(name, np.array(v))
    body = ModelHelper(name="body")
    body.net.Add(["out", "TWO"], "out")
    check = ModelHelper(name="check")
    check.net.Add(["counter", "ONE"], "counter")
    check.net.Copy(check.net.LT(["counter", "TEN"]), "cond")
    model = ModelHelper(name="loop")
    brew.loop(model, "cond", ["cond", "ONE", "TWO", "TEN", "counter", "out"], body, check)
    _run(model.net, backend)
    assert int(workspace.FetchBlob("out")) == 18
    assert int(workspace.FetchBlob("counter")) == 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_while_without_condition_net_stops_when_its_body_clears_the_flag(backend):
    """n halves until it is 1 (16 -> 8 -> 4 -> 2 -> 1): 4 iterations."""
    for name, v in dict(go=True, n=16, steps=0, ONE=1, TWO=2).items():
        workspace.FeedBlob(name, np.array(v))
    body = ModelHelper(name="halve")
    body.net.Div(["n", "TWO"], "n")
    body.net.Add(["steps", "ONE"], "steps")
    body.net.GT(["n", "ONE"], "go")
    model = ModelHelper(name="halving")
    brew.loop(model, "go", ["go", "n", "steps", "ONE", "TWO"], body)
    _run(model.net, backend)
    assert (int(workspace.FetchBlob("n")), int(workspace.FetchBlob("steps"))) == (1, 4)


def test_if_lowers_to_an_if_region():
    from dslc.ir import print_module
    from dslc.ir.types import TensorType
    from dslc.lower import lower_group
    model = _cond_model()
    existing = {"x": TensorType("f32", (3,)), "y": TensorType("f32", (3,)), "c": TensorType("bool", ())}
    text = print_module(lower_group(LocalSession.as_group(model.net), "", existing))
    ifs = [line.strip() for line in text.splitlines() if "if(" in line]
    assert len(ifs) == 1 and ifs[0].startswith("if(%c)"), text
    assert '%tmp_do' in text and 'store @"tmp' not in text  # the branch-local blob: an SSA value only
    assert "Scale(%x" in text and 'store @"y"' in text


def test_a_branch_reading_outside_its_scope_is_a_located_error():
    then_net = core.Net("then")
    then_net.Copy("secret", "y")
    with pytest.raises(ControlOpError) as err:
        add_if_op(core.Net("outer"), "c", ["y"], then_net)
    assert "secret" in str(err.value) and "test_control_ops.py" in str(err.value)


def test_get_ssa_counts_versions():
    net = core.Net("ssa")
    net.Add(["a", "b"], "c")
    net.Add(["c", "a"], "c")
    net.Copy("c", "a")
    ssa, versions = core.get_ssa(net)
    assert ssa[1] == ([("c", 1), ("a", 0)], [("c", 2)])
    assert versions == {"a": 1, "b": 0, "c": 2}
    assert core.get_undefined_blobs(ssa) == {"a", "b"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_of_an_if_is_the_gradient_of_the_branch_taken(backend):
    """then: y = 2x, so dy/dx = 2; else: y = x*x + x, so dy/dx = 2x + 1 (by hand)."""
    then_model = ModelHelper(name="then")
    then_model.net.Scale("x", "y", scale=2.0)
    else_model = ModelHelper(name="else")
    sq = else_model.net.Mul(["x", "x"], "sq")
    else_model.net.Add([sq, "x"], "y")
    model = ModelHelper(name="cond_grad")
    brew.cond(model, "c", ["x", "y"], then_model, else_model)
    loss = model.net.SumElements("y", "loss")
    grads = model.net.AddGradientOperators([loss])
    assert str(grads["x"]) == "x_grad"
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for c, want in ((True, np.full(3, 2.0)), (False, 2 * x + 1)):
        workspace.FeedBlob("x", x)
        workspace.FeedBlob("y", np.zeros(3, np.float32))
        workspace.FeedBlob("c", np.array(c))
        _run(model.net, backend)
        np.testing.assert_allclose(workspace.FetchBlob("x_grad"), want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_control_op_netbuilder_gives_one_net_with_if_and_while_ops(backend):
    """NetBuilder(_use_control_ops=True): IfNet/Else and WhileNet become If and While ops of
    one net. y = x + 1 if c else x - 1; then n doubles while n < 20 (3 -> 6 -> 12 -> 24)."""
    from dslc.net_builder import NetBuilder, ops
    for name, v in dict(x=np.float32(5.0), one=np.float32(1.0), n=np.int64(3), two=np.int64(2),
                        limit=np.int64(20)).items():
        workspace.FeedBlob(name, np.array(v))
    with NetBuilder(_use_control_ops=True, initial_scope=["x", "one", "c", "n", "two", "limit"]) as nb:
        y = ops.Copy("x", "y")
        with ops.IfNet("c"):
            ops.Add([y, "one"], y)
        with ops.Else():
            ops.Sub([y, "one"], y)
        with ops.WhileNet():
            with ops.Condition():
                ops.LT(["n", "limit"])
            ops.Mul(["n", "two"], "n")
    (net,) = nb.get()
    assert [op.type for op in net.Proto().op].count("If") == 1
    assert [op.type for op in net.Proto().op].count("While") == 1
    for c, want in ((True, 6.0), (False, 4.0)):
        workspace.FeedBlob("c", np.array(c))
        workspace.FeedBlob("n", np.array(3, np.int64))
        _run(net, backend)
        assert float(workspace.FetchBlob("y")) == want
        assert int(workspace.FetchBlob("n")) == 24


# ----------------------------------------------------------------------------- nesting (37.4)
# Control-op NetBuilders nested in each way. Every figure was read off the real Caffe2
# (torch 1.10.2's caffe2.python): the same builder code run through
# ../shared/tools/caffe2-ref/run.sh, workspace.RunNetOnce, then FetchBlob / HasBlob.
# A blob listed as None is not in the workspace afterwards (local to a branch).


def _run_builder(build, backend, names, **feed):
    from dslc.net_builder import NetBuilder
    for name, v in feed.items():
        workspace.FeedBlob(name, np.array(v, np.int64))
    with NetBuilder(_use_control_ops=True, initial_scope=list(feed)) as nb:
        build()
    (net,) = nb.get()
    _run(net, backend)
    return {n: int(workspace.FetchBlob(n)) if workspace.HasBlob(n) else None for n in names}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_while_with_its_condition_inside_an_ifnet(backend):
    """The issue's case: the condition blob (LT's output) is made inside the branch.
    n = 0 steps by 2 while n < 5: 6."""
    from dslc.net_builder import ops

    def build():
        with ops.IfNet(ops.GT(["n", ops.Const(-1)])):
            with ops.WhileNet():
                with ops.Condition():
                    ops.LT(["n", ops.Const(5)])
                ops.Add(["n", ops.Const(2)], "n")
    assert _run_builder(build, backend, ["n"], n=0) == {"n": 6}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_while_in_a_while_reads_the_outer_body_s_blob(backend):
    """acc = sum of i * j for i < 3, j < 4 = 6 * 3 = 18; j is local to the outer body."""
    from dslc.net_builder import ops

    def build():
        ops.Const(0, blob_out="i")
        with ops.WhileNet():
            with ops.Condition():
                ops.LT(["i", ops.Const(3)])
            ops.Const(0, blob_out="j")
            with ops.WhileNet():
                with ops.Condition():
                    ops.LT(["j", ops.Const(4)])
                ops.Add(["acc", ops.Mul(["i", "j"])], "acc")
                ops.Add(["j", ops.Const(1)], "j")
            ops.Add(["i", ops.Const(1)], "i")
    assert _run_builder(build, backend, ["acc", "i", "j"], acc=0) == {"acc": 18, "i": 3, "j": None}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_else_chain_in_a_while_with_conditions_made_in_the_body(backend):
    """k = 0..5: k < 2 adds 1 to a, k < 4 adds 10 to b, else 100 to a: a = 202, b = 20."""
    from dslc.net_builder import ops

    def build():
        ops.Const(0, blob_out="k")
        with ops.WhileNet():
            with ops.Condition():
                ops.LT(["k", ops.Const(6)])
            with ops.IfNet(ops.LT(["k", ops.Const(2)])):
                ops.Add(["a", ops.Const(1)], "a")
            with ops.Else():
                with ops.IfNet(ops.LT(["k", ops.Const(4)])):
                    ops.Add(["b", ops.Const(10)], "b")
                with ops.Else():
                    ops.Add(["a", ops.Const(100)], "a")
            ops.Add(["k", ops.Const(1)], "k")
    assert _run_builder(build, backend, ["a", "b", "k"], a=0, b=0) == {"a": 202, "b": 20, "k": 6}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_branch_local_written_by_a_nested_if_is_read_after_it(backend):
    """t = 30 is local to the branch; the inner If (t > 20) makes it 31; y = t + x = 34."""
    from dslc.net_builder import ops

    def build():
        with ops.IfNet(ops.GT(["x", ops.Const(0)])):
            ops.Mul(["x", ops.Const(10)], "t")
            with ops.IfNet(ops.GT(["t", ops.Const(20)])):
                ops.Add(["t", ops.Const(1)], "t")
            ops.Add(["t", "x"], "y")
        with ops.Else():
            ops.Const(-1, blob_out="y")
    assert _run_builder(build, backend, ["x", "y", "t"], x=3, y=0) == {"x": 3, "y": 34, "t": None}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blob_first_written_in_a_branch_stays_local_to_it(backend):
    """z is local to each IfNet (the second does not write the first's): v = 7 + 9 = 16,
    no z after. Once the top level writes w, w is outer for the next IfNet: 5 + 1."""
    from dslc.net_builder import ops

    def build():
        with ops.IfNet(ops.GT(["v", ops.Const(0)])):
            ops.Add(["v", ops.Const(1)], "z")
        with ops.IfNet(ops.GT(["v", ops.Const(0)])):
            ops.Add(["v", ops.Const(2)], "z")
            ops.Add(["z", "v"], "v")
        with ops.IfNet(ops.GT(["v", ops.Const(0)])):
            ops.Const(50, blob_out="w")
        ops.Const(5, blob_out="w")
        with ops.IfNet(ops.GT(["v", ops.Const(0)])):
            ops.Add(["w", ops.Const(1)], "w")
    assert _run_builder(build, backend, ["v", "z", "w"], v=7) == {"v": 16, "z": None, "w": 6}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_if_in_a_while_whose_condition_writes_an_outer_blob(backend):
    """m counts 1..5 in the condition (runs while m <= 4); s adds 5 when m == 2, else m:
    1 + 5 + 3 + 4 = 13."""
    from dslc.net_builder import ops

    def build():
        with ops.WhileNet():
            with ops.Condition():
                ops.Add(["m", ops.Const(1)], "m")
                ops.LE(["m", ops.Const(4)])
            with ops.IfNet(ops.EQ(["m", ops.Const(2)])):
                ops.Add(["s", ops.Const(5)], "s")
            with ops.Else():
                ops.Add(["s", "m"], "s")
    assert _run_builder(build, backend, ["s", "m"], s=0, m=0) == {"s": 13, "m": 5}


def test_a_branch_local_read_after_its_block_is_a_located_error():
    """Caffe2 fails when the net runs ("Encountered a non-existing input blob: u");
    dslc names the read's line before running."""
    from dslc.ir.diagnostics import DSLError
    from dslc.net_builder import ops

    def build():
        with ops.IfNet(ops.GT(["v", ops.Const(0)])):
            ops.Const(50, blob_out="u")
        ops.Add(["u", ops.Const(1)], "r")  # @read-u
    with pytest.raises(DSLError) as err:
        _run_builder(build, "interp", ["r"], v=1)
    e = err.value
    assert "blob 'u' is local to the IfNet/WhileNet block" in e.message and e.hint, e
    with open(__file__) as f:
        line = next(n for n, text in enumerate(f, 1) if text.rstrip().endswith("# @read-u"))
    assert (e.loc.file.endswith("test_control_ops.py"), e.loc.line) == (True, line)
