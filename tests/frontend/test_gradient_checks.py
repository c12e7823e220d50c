"""The checks Caffe2's reverse pass makes before it derives a gradient (issue 37: the four
its core_gradients_test has that dslc lacked, found by running that test renamed to
dslc's imports). Each net below was given to the real Caffe2 (/tmp/caffe2-venv):

- a StopGradient whose output no op reads: ValueError "StopGradient's output 'hs' is orphan";
- a blob written twice, the first value read by nothing, the second with a gradient:
  RuntimeError 'Gradient name "x_grad" is expected to correspond to version 1 of "x", but
  currently we have version 2'; the same with a fill as the first writer: no error (no
  gradient op reads the name), d a = 10 for h = 2 a, out = 5 h;
- LSTMUnit with a loss on its hidden output only: "Gradient of output cell_t is not
  provided!", and no error once ``ZeroGradient(cell_t, [])`` follows it;
- the Sum that adds up a blob's gradients: its device option is its parts' with
  ``is_auto_gen_sum_ops:1`` added, or that tag alone when the parts' option holds
  ``only_keep_is_auto_gen_sum_ops_tag:1``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc.core import IR, CreateOperator, GradientRegistry
from dslc.ir.diagnostics import DSLError
from dslc.proto import caffe2_pb2
from dslc.session import LocalSession

HERE = __file__.rsplit("/", 1)[-1]


def _here(err) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


def test_a_stop_gradient_no_op_reads_is_refused():
    net = core.Net("orphan")
    net.Scale("a", "h", scale=2.0)
    net.StopGradient("h", "hs")  # (hs is read by nothing: h's gradient still flows below)
    net.Scale("h", "out", scale=5.0)
    with pytest.raises(ValueError) as e:
        net.AddGradientOperators(["out"])
    assert isinstance(e.value, DSLError) and "'hs' is read by no op" in str(e.value) and _here(e.value)
    # in place, as Caffe2's error suggests, it stops h's gradient
    ops = [CreateOperator("Scale", "a", "h", scale=2.0), CreateOperator("StopGradient", "h", "h"),
           CreateOperator("Scale", "h", "out", scale=5.0)]
    _, grads = GradientRegistry.GetBackwardPass(ops, {"out": "out_grad"})
    assert "a" not in grads and "out" in grads


@pytest.mark.parametrize("ops", [
    [("x", "x"), ("y", "x"), ("x", "y")],  # (core_gradients_test's, with Scale for its Direct op)
    [("a", "h"), ("b", "h"), ("h", "out")],  # (h's first value is dead; its second has a gradient)
])
def test_a_gradient_of_another_version_of_a_blob_is_refused(ops):
    net = core.Net("versions")
    for src, dst in ops:
        net.Scale(src, dst, scale=2.0)
    with pytest.raises(RuntimeError, match="version") as e:
        net.AddGradientOperators([ops[-1][1]])
    assert isinstance(e.value, DSLError) and _here(e.value)
    with pytest.raises(RuntimeError, match="version"):
        GradientRegistry.GetBackwardPass([CreateOperator("Scale", s, d, scale=2.0) for s, d in ops],
                                         {ops[-1][1]: ops[-1][1] + "_grad"})


def test_a_fill_overwritten_before_any_read_is_not_a_version_mismatch():
    # (Caffe2 makes no gradient op for the fill, so nothing reads the later value's gradient:
    # /tmp/caffe2-venv gave d a = [10, 10] for this net, and refused it with a Relu in place
    # of the fill; Caffe2's gradient_check_test TestIf writes Y_noise this way)
    from dslc import workspace
    net = core.Net("fill_then_write")
    net.ConstantFill([], "h", shape=[2], value=0.0)
    net.Scale("a", "h", scale=2.0)
    net.Scale("h", "out", scale=5.0)
    grads = net.AddGradientOperators(["out"])
    workspace.FeedBlob("a", np.array([1.0, -2.0], np.float32))
    LocalSession(workspace.C.Workspace.current).run(net)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["a"])), [10.0, 10.0])
    relu = core.Net("relu_then_write")
    relu.Relu("a", "h")
    relu.Scale("a", "h", scale=2.0)
    relu.Scale("h", "out", scale=5.0)
    with pytest.raises(RuntimeError, match="version"):
        relu.AddGradientOperators(["out"])


def test_in_place_writes_keep_their_gradients():
    # (each value is read by the next write: no mismatch; d y / d x = 2 * 3)
    net = core.Net("chain")
    net.Scale("x", "x", scale=2.0)
    net.Scale("x", "y", scale=3.0)
    grads = net.AddGradientOperators(["y"])
    x = np.array([1.0, -2.0], np.float32)
    from dslc import workspace
    workspace.FeedBlob("x", x)
    LocalSession(workspace.C.Workspace.current).run(net)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["x"])), [6.0, 6.0])


def test_lstm_unit_needs_the_gradient_of_both_outputs(backend):
    from dslc import workspace
    net = core.Net("lstm")
    h, c, gates, lengths, t = net.AddExternalInput("h", "c", "g", "s", "t")
    hidden, cell = net.LSTMUnit([h, c, gates, lengths, t], ["hidden_t", "cell_t"])
    with pytest.raises(DSLError, match="ZeroGradient") as e:
        net.AddGradientOperators([hidden])
    assert _here(e.value)
    net.ZeroGradient(cell, [])
    grads = net.AddGradientOperators([hidden])
    # run it: one step, batch 1, state 1; with a zero cell gradient the gates' gradient is the
    # hidden output's through its output gate: hidden = o * tanh(cell), cell = f c + i g~
    rng = np.random.default_rng(3)
    feeds = {"h": rng.normal(size=(1, 1, 1)), "c": rng.normal(size=(1, 1, 1)), "g": rng.normal(size=(1, 1, 4))}
    for k, v in feeds.items():
        workspace.FeedBlob(k, v.astype(np.float32))
    workspace.FeedBlob("s", np.array([1], np.int32))
    workspace.FeedBlob("t", np.array([0], np.int32))
    LocalSession(workspace.C.Workspace.current, backend=backend).run(net)
    gi, gf, go, gg = feeds["g"].reshape(4)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, o, g_ = sig(gi), sig(gf), sig(go), np.tanh(gg)
    cell_v = f * feeds["c"].reshape(()) + i * g_
    d_cell = o * (1 - np.tanh(cell_v) ** 2)  # (d hidden / d cell; hidden's gradient is 1)
    want = [d_cell * g_ * i * (1 - i), d_cell * feeds["c"].reshape(()) * f * (1 - f),
            np.tanh(cell_v) * o * (1 - o), d_cell * i * (1 - g_ ** 2)]
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["g"])).reshape(4), want, rtol=1e-5)


@pytest.mark.parametrize("only_keep", [True, False])
def test_the_sum_of_gradients_runs_where_its_parts_ran(only_keep):
    extra = ["parallelize:shard_by_1"] + ([f"{IR.ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG}:1"] if only_keep else [])
    option = core.DeviceOption(caffe2_pb2.CPU, extra_info=extra)
    ops = [CreateOperator("Scale", "in", "hidden1", device_option=option, scale=2.0),
           CreateOperator("Scale", "in", "hidden2", device_option=option, scale=3.0),
           CreateOperator("Sum", ["hidden1", "hidden2"], "out")]
    grad_ops, _ = GradientRegistry.GetBackwardPass(ops, {"out": "out_grad"})
    assert grad_ops[-1].type == "Sum"
    want = ["is_auto_gen_sum_ops:1"] if only_keep else ["parallelize:shard_by_1", "is_auto_gen_sum_ops:1"]
    assert list(grad_ops[-1].device_option.extra_info) == want
    assert IR.IS_AUTO_GEN_SUM_OPS_TAG == "is_auto_gen_sum_ops"
