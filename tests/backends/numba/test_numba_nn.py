"""The numba backend's training kernels: whole steps compiled, answers equal the interpreter's.

Each program runs on interp and on numba with every training island compiled (the
size threshold set to 0); results must agree to float32 rounding, and the numba
summary must show the training ops compiled, not interpreted.
"""
import numpy as np
import pytest

from dslc import brew, optimizer, workspace
from dslc.backends.numba import islands
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

B, D_IN, D_HID, D_OUT = 32, 8, 16, 5


def feed(ws):
    rng = np.random.default_rng(11)
    ws.feed_blob("data", rng.normal(size=(B, D_IN)).astype(np.float32))
    ws.feed_blob("label", rng.integers(0, D_OUT, B).astype(np.int32))
    ws.feed_blob("target", rng.normal(size=(B, D_OUT)).astype(np.float32))


def softmax_loss_momentum():
    model = ModelHelper(name="m")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "r1")
    fc2 = brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT)
    sm, loss = model.net.SoftmaxWithLoss([fc2, "label"], ["sm", "loss"])
    model.net.Accuracy([sm, "label"], "accuracy")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.2, momentum=0.9)
    return model, ["loss", "accuracy", "fc1_w", "fc2_b", "fc1_w_momentum"]


def tanh_sigmoid_l2():
    model = ModelHelper(name="m")
    h = brew.tanh(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "t1")
    s = brew.sigmoid(model, brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT), "s2")
    mm = model.net.MatMul([s, "target"], "mm", trans_b=1)
    d = model.net.SquaredL2Distance([s, "target"], "d")
    loss = model.net.AveragedLoss(d, "loss")
    model.net.AveragedLoss(mm, "mm_mean")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.5)
    return model, ["loss", "mm_mean", "fc1_w", "fc2_w", "fc2_b"]


def run(backend, build, steps=5):
    ws = workspace.Workspace()
    feed(ws)
    model, fetch = build()
    s = LocalSession(ws, backend=backend)
    s.run(model.param_init_net)
    out = []
    for _ in range(steps):
        s.run(model.net)
        out.append([np.array(ws.fetch_blob(b)) for b in fetch])
    return out, s, model


@pytest.mark.parametrize("build", [softmax_loss_momentum, tanh_sigmoid_l2])
def test_compiled_step_equals_interp(monkeypatch, build):
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    want, _, _ = run("interp", build)
    got, s, model = run("numba", build)
    for w_step, g_step in zip(want, got):
        for w, g in zip(w_step, g_step):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    summary = s.compile(model.net).program.summary()
    assert summary["ops compiled"] >= 8, summary
    assert not any(why.startswith("FC") for why in summary["ops interpreted, and why"]), summary


def test_small_steps_stay_interpreted(monkeypatch):
    # below the size threshold a straight-line step is not worth numba's compile time
    monkeypatch.setattr(islands, "NN_MIN_WORK", 100_000)  # the default (the suite runs with 0)
    _, s, model = run("numba", softmax_loss_momentum, steps=1)
    assert s.compile(model.net).program.summary()["ops compiled"] == 0


def plain_sgd():
    model = ModelHelper(name="m")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "r1")
    fc2 = brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT)
    _, loss = model.net.SoftmaxWithLoss([fc2, "label"], ["sm", "loss"])
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.3)
    return model, ["loss", "fc1_w", "fc1_b", "fc2_w", "fc2_b", "optimizer_iteration"]


@pytest.mark.parametrize("build", [plain_sgd, softmax_loss_momentum])
def test_training_step_is_one_function(monkeypatch, build):
    # the parameters are loaded where each layer first uses them, and the optimizer's
    # iteration counter and constants after the backward ops: those loads run before
    # the island, so forward, backward, Iter, LearningRate and the updates are one call
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    want, _, _ = run("interp", build, steps=3)
    got, s, model = run("numba", build, steps=3)
    for w_step, g_step in zip(want, got):
        for w, g in zip(w_step, g_step):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    summary = s.compile(model.net).program.summary()
    assert len(summary["regions compiled"]) == 1, summary
    # every op of the net is in it: only the loads and stores around it are interpreted
    assert summary["ops compiled"] == len(model.net.Proto().op), summary
    # and compiled once: the first step reads filled parameters and constants (read-only
    # arrays), later steps the step's own outputs (writeable); each mix was a new compile
    calls = [call for _, call in s.compile(model.net).program.stats.islands]
    assert [len(call.fn.overloads) for call in calls] == [1]
    if build is plain_sgd:
        assert got[-1][-1].tolist() == [3]  # the iteration counter went up once a step


STEP = """
module {
  group {existing = [@"b", @"d", @"data", @"n", @"w"]} body {
    task @"t" {workspace = "global"} body {
      %n = load @"n" : TYPE[4]
      %d = load @"d" : TYPE[4]
      %q = Div(%n, %d) : TYPE[4]
      %data = load @"data" : f32[32,8]
      %w = load @"w" : f32[5,8]
      %b = load @"b" : f32[5]
      %y = FC(%data, %w, %b) : f32[32,5]
      store @"q"(%q)
      store @"y"(%y)
    }
  }
}
"""


@pytest.mark.parametrize("dtype, hoisted", [("f32", True), ("i32", False)])
def test_loads_run_before_the_island_unless_an_op_may_fail(monkeypatch, dtype, hoisted):
    # a float Div cannot fail, so the loads after it run before the island and Div and FC
    # are one function; an integer Div may (by zero), and a load moved over it would
    # report an unset blob where the interpreter reports the division
    from dslc.ir import parse
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    body = parse(STEP.replace("TYPE", dtype)).walk()
    task = next(op for op in body if op.name == "task")
    items = islands.partition(max(task.regions, key=lambda r: len(r.ops)))
    kinds = [[o.name for o in it.ops] if isinstance(it, islands.Island) else it.name for it in items]
    if hoisted:
        assert kinds == ["load", "load", "load", "load", "load", ["Div", "FC"], "store", "store"]
    else:
        assert kinds == ["load", "load", "Div", "load", "load", "load", ["FC"], "store", "store"]


def test_matmul_axes_compiled(monkeypatch):
    # MatMul's axis_a / axis_b (inputs seen as matrices) and its gradients, which take their
    # inputs' shapes from a third input, compiled: the interpreter's answers
    from dslc import core
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    rng = np.random.default_rng(4)
    values = {"a": rng.normal(size=(2, 3, 4)), "b": rng.normal(size=(2, 2, 5)), "c": rng.normal(size=(5, 4))}
    out = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        for k, v in values.items():
            ws.feed_blob(k, v.astype(np.float32))
        net = core.Net("mm")
        y1 = net.MatMul(["a", "b"], "y1", axis_a=2, axis_b=-1)
        y2 = net.MatMul(["a", "c"], "y2", axis_a=-1, trans_b=1)
        s1, s2 = net.SumElements(y1, "s1"), net.SumElements(y2, "s2")
        net.AddGradientOperators([net.Add([s1, s2], "loss")])
        s = LocalSession(ws, backend=backend)
        s.run(net)
        out[backend] = {k: ws.fetch_blob(k) for k in ("y1", "y2", "a_grad", "b_grad", "c_grad")}
        if backend == "numba":
            why = s.compile(net).program.summary()["ops interpreted, and why"]
            assert not any(k.startswith("MatMul") for k in why), why
    a2, b2, c = values["a"].reshape(6, 4), values["b"].reshape(4, 5), values["c"]
    np.testing.assert_allclose(out["numba"]["y2"], a2 @ c.T, rtol=1e-5)
    np.testing.assert_allclose(out["numba"]["y1"], a2 @ b2, rtol=1e-5)
    for k, w in out["interp"].items():
        assert out["numba"][k].shape == w.shape == {"a_grad": (2, 3, 4), "b_grad": (2, 2, 5)}.get(k, w.shape)
        np.testing.assert_allclose(out["numba"][k], w, rtol=1e-5, atol=1e-6)


def test_training_loop_step_is_one_function(monkeypatch):
    # inside an execution step of several iterations the pass pipeline carries the
    # parameters through the loop, checking each is set where the net reads it (`must`):
    # the whole loop is one function, those checks the identity in it (an unset input
    # makes the interpreter run the loop, and report it)
    from dslc import core
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    got = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        feed(ws)
        model, fetch = plain_sgd()
        s = LocalSession(ws, backend=backend, passes="default")  # (the carried loop)
        s.run(model.param_init_net)
        loop = core.execution_step("train", [model.net], num_iter=4)
        s.run(loop)
        got[backend] = [np.array(ws.fetch_blob(b)) for b in fetch]
        if backend == "numba":
            summary = s.compile(loop).program.summary()
            assert len(summary["regions compiled"]) == 1, summary
            # the loop itself is compiled (issue 24): around the net's ops, its `must` checks
            assert summary["ops compiled"] > len(model.net.Proto().op), summary
            assert set(summary["ops interpreted, and why"]) == {"load: workspace access",
                                                                  "store: workspace access"}, summary
    for w, g in zip(got["interp"], got["numba"]):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    assert got["numba"][-1].tolist() == [4]


def dropout_softmax_xent(sgd=True):
    # the loss as three ops (Softmax, LabelCrossEntropy, AveragedLoss) and a Dropout
    # (Caffe2's optimizers keep float32 learning rates: float64 nets stop at the gradients)
    model = ModelHelper(name="m")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=D_IN, dim_out=D_HID), "r1")
    h, _ = model.net.Dropout([h], ["d1", "d1_mask"], ratio=0.3)
    fc2 = brew.fc(model, h, "fc2", dim_in=D_HID, dim_out=D_OUT)
    sm = model.net.Softmax(fc2, "sm")
    loss = model.net.AveragedLoss(model.net.LabelCrossEntropy([sm, "label"], "xent"), "loss")
    model.AddGradientOperators([loss])
    if sgd:
        optimizer.build_sgd(model, 0.2, momentum=0.9)
    return model, ["loss", "fc1_w", "fc2_b", "r1", "d1", "d1_mask", "fc1_w_grad" if not sgd else "fc1_w_momentum"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_training_loop_is_one_function_dropout_included(monkeypatch, dtype):
    # issue 24: an execution step of 20 iterations around the step is one numba call, at the
    # default thresholds, on the step's first run (its activations and gradients unset
    # then), with Dropout drawing from the interpreter's stream for it
    from dslc import core
    monkeypatch.setattr(islands, "MIN_WORK", 5000)  # the defaults (the suite runs with 0)
    monkeypatch.setattr(islands, "NN_MIN_WORK", 100_000)
    got = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        feed(ws)
        ws.feed_blob("data", ws.fetch_blob("data").astype(dtype))
        model, fetch = dropout_softmax_xent(sgd=dtype == np.float32)
        s = LocalSession(ws, backend=backend, passes="default")  # (the carried loop)
        s.run(model.param_init_net)
        for b in ("fc1_w", "fc1_b", "fc2_w", "fc2_b"):
            ws.feed_blob(b, ws.fetch_blob(b).astype(dtype))
        loop = core.execution_step("train", [model.net], num_iter=20)
        s.run(loop)
        got[backend] = [np.array(ws.fetch_blob(b)) for b in fetch]
        if backend == "numba":
            summary = s.compile(loop).program.summary()
            assert len(summary["regions compiled"]) == 1, summary
            assert set(summary["ops interpreted, and why"]) <= {
                "load: workspace access", "store: workspace access",
                "compilable, but under the work threshold (5000)"}, summary
    rtol = 2e-5 if dtype == np.float32 else 1e-10
    for w, g in zip(got["interp"], got["numba"]):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol / 10)
    loss, _, _, r1, d1, mask, _ = got["numba"]
    assert mask.dtype == np.bool_ and mask.tolist() == got["interp"][5].tolist()  # the same draws
    assert 0.55 < mask.mean() < 0.85  # kept with probability 0.7
    np.testing.assert_allclose(d1, r1 * mask / dtype(0.7), rtol=1e-6)  # Caffe2's inverted dropout


def test_a_training_job_does_not_compute_the_first_layers_input_gradient(backend):
    # in a task whose workspace goes away, nothing can read data_grad: the first FC's
    # gradient makes (dW, db) only; the losses are those of the same net run step by step
    # in a workspace (where data_grad is computed and kept)
    from dslc.net_builder import ops
    from dslc.task import Task, TaskGroup, WorkspaceType, final_output
    want = [step[0] for step in run(backend, plain_sgd, steps=3)[0]]
    ws = workspace.Workspace()
    feed(ws)
    model, _ = plain_sgd()
    with TaskGroup(workspace_type=WorkspaceType.PRIVATE) as group, Task():
        ops.net(model.param_init_net)
        with ops.loop(3):
            ops.net(model.net)
        loss = final_output("loss")
    s = LocalSession(ws, backend=backend, passes="default")  # (dce drops it: CI runs once without passes)
    s.run(group)
    np.testing.assert_allclose(loss.fetch(), want[-1], rtol=2e-6)
    grads = [op for op in s.compile(group).module.walk() if op.name == "FCGradient"]
    assert sorted(len(op.results) for op in grads) == [2, 3]  # (the second layer's dX is the first's dY)
