"""The op-test harness (dslc.hypothesis_test_util) and the gradient API under it.

The harness must run ops on both devices (the interpreter and numba with every region
compiled), pass a right reference or gradient and fail a wrong one. References are
numpy written here; gradients are checked by the harness's own finite differences,
and the hand-worked ones are in the docstrings.
"""
from __future__ import annotations

import time

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from dslc import core, workspace
from dslc import hypothesis_test_util as hu
from dslc.backends import BUILTIN
from dslc.backends.interp import InterpBackend
from dslc.ir.gradients import GRADIENTS

FEW = settings(max_examples=4, deadline=None, derandomize=True)


def _sigmoid(x):
    return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)


class TestHarness(hu.HypothesisTestCase):
    """The harness's own checks, written as users write op tests (pytest collects unittest cases)."""

    @FEW
    @given(X=hu.tensor(), **hu.gcs)
    def test_sigmoid_reference_devices_and_gradient(self, X, gc, dc):
        op = core.CreateOperator("Sigmoid", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (_sigmoid(X),))
        self.assertDeviceChecks(dc, op, [X], [0])
        self.assertGradientChecks(gc, op, [X], 0, [0])

    @FEW
    @given(inputs=hu.tensors(n=2), **hu.gcs)
    def test_mul_gradient_of_each_input(self, inputs, gc, dc):
        op = core.CreateOperator("Mul", ["A", "B"], ["C"])
        self.assertReferenceChecks(gc, op, inputs, lambda a, b: (a * b,))
        for i in range(2):
            self.assertGradientChecks(gc, op, inputs, i, [0])

    def test_a_wrong_reference_fails(self):
        op = core.CreateOperator("Relu", ["X"], ["Y"])
        x = np.array([[-1.0, 2.0]], dtype=np.float32)
        for gc in hu.device_options:
            with self.assertRaises(AssertionError):
                self.assertReferenceChecks(gc, op, [x], lambda X: (X,))  # (Relu is not the identity)

    def test_a_wrong_gradient_fails(self):
        """dY/dX of Sigmoid is Y (1 - Y), never 1: feeding dY straight through must fail."""
        op = core.CreateOperator("Sigmoid", ["X"], ["Y"])
        wrong = [core.CreateOperator("Copy", ["Y_grad"], ["X_grad"])]
        x = np.array([0.3, -0.7, 1.1], dtype=np.float32)
        for gc in hu.device_options:
            with self.assertRaises(AssertionError):
                self.assertGradientChecks(gc, op, [x.copy()], 0, [0], grad_ops=wrong)

    def test_the_op_raises(self):
        op = core.CreateOperator("Add", ["A", "B"], ["C"])
        a, b = np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)
        for gc in hu.device_options:
            self.assertRunOpRaises(gc, op, [a, b])


def test_both_devices_really_run():
    """numba_do runs the op on numba (every region compiled), cpu_do on the interpreter."""
    from dslc.trace.devices import backend_of
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    for name, do in (("interp", hu.cpu_do), ("numba", hu.numba_do)):
        got = hu.runOpOnInput(do, core.CreateOperator("Tanh", ["X"], ["Y"]), [x])[0]
        np.testing.assert_allclose(got, np.tanh(x), rtol=1e-6)
        backend, options = backend_of(do)
        session = workspace.current().session(backend, **options)
        assert session.backend.name == name
    assert backend_of(hu.numba_do) == ("numba", {"min_work": 0, "nn_min_work": 0})


class _Skewed(InterpBackend):
    """A backend that gets Relu wrong (adds 1 to blob Y): the device check must notice."""

    name = "skewed"

    def compile(self, module):
        program = super().compile(module)
        run = program.run

        def skewed(ws):
            run(ws)
            cell = ws.lookup("Y")
            if cell is not None and cell.v is not None:
                cell.v = cell.v + 1
        program.run = skewed
        return program


def test_a_device_that_disagrees_fails(monkeypatch):
    monkeypatch.setitem(BUILTIN, "skewed", f"{__name__}:_Skewed")
    from dslc.trace.devices import BackendOption
    op = core.CreateOperator("Relu", ["X"], ["Y"])
    x = np.array([-1.0, 2.0], dtype=np.float32)
    case = hu.HypothesisTestCase()
    case.assertDeviceChecks([hu.cpu_do, hu.numba_do], op, [x], [0])
    with pytest.raises(AssertionError):
        case.assertDeviceChecks([hu.cpu_do, BackendOption("skewed")], op, [x], [0])


# ----------------------------------------------------------------------------- gradient API

def test_get_gradient_for_op_names_caffe2s_gradients():
    op = core.CreateOperator("Sigmoid", ["X"], ["Y"])
    ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
    assert [(o.type, list(o.input), list(o.output)) for o in ops] == \
        [("SigmoidGradient", ["Y", "Y_grad"], ["X_grad"])]
    assert [str(g) for g in g_input] == ["X_grad"]


def test_get_backward_pass_fills_the_seed_with_one():
    """Y = A * B, seed dY = 1: dA = B, dB = A."""
    op = core.CreateOperator("Mul", ["A", "B"], ["Y"])
    ops, grads = core.GradientRegistry.GetBackwardPass([op], ["Y"])
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, -4.0], np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("A", a)
    workspace.FeedBlob("B", b)
    workspace.RunOperatorOnce(op)
    workspace.RunOperatorsOnce(ops)
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["A"])), b)
    np.testing.assert_array_equal(workspace.FetchBlob(str(grads["B"])), a)


def test_gradient_ops_run_where_their_forward_ops_run():
    """Caffe2 gives each gradient op its forward op's device option (read off the real
    Caffe2: both SigmoidGradient and ReluGradient carry device_type 1, device_id 1)."""
    option = core.DeviceOption(1, 1)
    ops = [core.CreateOperator("Sigmoid", ["X"], ["H"]), core.CreateOperator("Relu", ["H"], ["Y"])]
    for op in ops:
        op.device_option.CopyFrom(option)
    grads, _ = core.GradientRegistry.GetBackwardPass(ops, {"Y": "Y_grad"})
    assert [g.type for g in grads] == ["ReluGradient", "SigmoidGradient"]
    assert all(g.device_option == option for g in grads)


def test_get_backward_pass_without_losses_is_empty():
    """The low-level pass has nothing to do for no losses (Caffe2 returns no ops); only
    AddGradientOperators treats a loss that reaches no input as the user's mistake."""
    ops = [core.CreateOperator("Sigmoid", ["X"], ["Y"])]
    grads, grad_map = core.GradientRegistry.GetBackwardPass(ops, {})
    assert list(grads) == [] and grad_map == {}


@pytest.fixture
def resize_like_gradient():
    """A Python gradient for ResizeLike (dslc declares none), removed afterwards: resized
    like a tensor of its own shape the op is the identity, so dY passes straight through."""
    assert "ResizeLike" not in GRADIENTS

    @core.GradientRegistry.RegisterGradient("ResizeLike")
    def resize_like_grad(op, g_output):
        name = op.input[0] + "_grad"
        return [core.CreateOperator("Scale", [g_output[0]], [name], scale=1.0)], [name, None]

    yield resize_like_grad
    GRADIENTS.pop("ResizeLike", None)
    core.GradientRegistry.gradient_registry_.pop("ResizeLike", None)


def test_a_registered_python_gradient_is_the_one_add_gradient_operators_uses(resize_like_gradient):
    """loss = sum(ResizeLike(x, like) * w) = sum(x * w): d loss / dx = w."""
    net = core.Net("py_grad")
    net.ResizeLike(["x", "like"], ["c"])
    net.Mul(["c", "w"], ["m"])
    net.SumElements(["m"], ["loss"])
    grads = net.AddGradientOperators(["loss"])
    x, w = np.array([[1.0], [2.0], [3.0]], np.float32), np.array([[0.5], [-1.0], [2.0]], np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("w", w)
    workspace.FeedBlob("like", np.zeros((3, 1), np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(grads["x"]), w)
    op = core.CreateOperator("ResizeLike", ["x", "like"], ["c"])
    ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["c_grad"])
    assert [o.type for o in ops] == ["Scale"] and [str(g) for g in g_input] == ["x_grad", "None"]


def test_an_op_without_a_gradient_is_a_located_error():
    from dslc.ir.diagnostics import DSLError
    op = core.CreateOperator("LT", ["X", "Z"], ["Y"])
    with pytest.raises(DSLError) as e:
        core.GradientRegistry.GetGradientForOp(op, ["Y_grad"])
    assert "LT has no gradient" in str(e.value) and e.value.loc.file.endswith("test_hypothesis_util.py")


def test_an_unknown_operator_is_a_located_error_naming_it():
    from dslc.ir.diagnostics import UnknownOperatorError
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", np.zeros(3, np.float32))
    with pytest.raises(UnknownOperatorError) as e:
        workspace.RunOperatorOnce(core.CreateOperator("NoSuchOp", ["X"], ["Y"]))
    assert "NoSuchOp" in str(e.value) and e.value.loc.file.endswith("test_hypothesis_util.py")


@given(data=st.data(), n=st.integers(1, 3))
@settings(max_examples=5, deadline=None)
def test_strategies_draw_what_they_promise(data, n):
    """tensors(n) draws n arrays of one shape, float32 in [-1, 1]; lengths add up to the size."""
    drawn = data.draw(hu.tensors(n=n))
    assert len(drawn) == n and len({a.shape for a in drawn}) == 1
    assert all(a.dtype == np.float32 and np.all(np.abs(a) <= 1) for a in drawn)
    size = data.draw(st.integers(1, 20))
    lengths = data.draw(hu.lengths(size))
    assert lengths.sum() == size and np.all(lengths >= 0)


def test_net_gradient_checker():
    """A whole net's gradient against finite differences; two nets computing 2 x agree, and a
    net computing 3 x does not."""
    from dslc.gradient_checker import NetGradientChecker
    x = np.array([[0.3, -0.2, 0.8]], np.float32)
    net = core.Net("tanh_sq")
    net.Tanh(["x"], "t")
    net.Sqr(["t"], "s")
    NetGradientChecker.Check(net, ["s"], {"x": x}, "x", step_size=1e-3, threshold=1e-2)
    double = core.Net("double")
    double.Scale(["x"], "y", scale=2.0)
    twice = core.Net("twice")
    twice.Add(["x", "x"], "y2")
    NetGradientChecker.CompareNets([double, twice], [["y"], ["y2"]], [0], ["x"], {"x": x})
    triple = core.Net("triple")
    triple.Scale(["x"], "y3", scale=3.0)
    with pytest.raises(AssertionError):
        NetGradientChecker.CompareNets([double, triple], [["y"], ["y3"]], [0], ["x"], {"x": x})


def test_workspace_calls_raise_runtime_errors_as_caffe2s_do():
    """Caffe2 raises RuntimeError from RunOperatorOnce/RunNetOnce whatever went wrong; dslc's
    error keeps its own class (and location) and is a RuntimeError too."""
    from dslc.ir.diagnostics import DSLTypeError, UnknownOperatorError
    workspace.ResetWorkspace()
    workspace.FeedBlob("a", np.zeros(3, np.float32))
    workspace.FeedBlob("b", np.zeros(3, np.int64))
    with pytest.raises(RuntimeError) as e:
        workspace.RunOperatorOnce(core.CreateOperator("Add", ["a", "b"], ["c"]))
    assert isinstance(e.value, DSLTypeError) and e.value.loc.file.endswith("test_hypothesis_util.py")
    with pytest.raises(RuntimeError) as e:
        workspace.RunOperatorOnce(core.CreateOperator("NoSuchOp", ["a"], ["c"]))
    assert isinstance(e.value, UnknownOperatorError)
    net = core.Net("bad_types")
    net.Add(["a", "b"], "c")
    with pytest.raises(DSLTypeError):  # (the dslc class still catches it)
        workspace.RunNetOnce(net)
    workspace.CreateNet(net, overwrite=True)
    with pytest.raises(RuntimeError):
        workspace.RunNet(net.Name())


# ----------------------------------------------------------------------------- deadlines vs compiling
# Caffe2's op tests run each example under a deadline; numba compiling an op's kernels in the
# first example must not count against it (hu takes compile time out of the measured time).
# Compiles are made slow here by sleeping inside them, so the figures do not depend on load.
SLOW = 0.4  # seconds a compile takes here
SHORT = settings(max_examples=3, deadline=150, derandomize=True, database=None)


def _deadline_failure(fn):
    """The name of the exception hypothesis raised for ``fn``, or None when it passed."""
    try:
        fn()
    except Exception as e:  # DeadlineExceeded, or FlakyFailure when only some runs were slow
        return type(e).__name__ + str(e)
    return None


def test_compile_time_is_not_counted_against_the_deadline():
    from dslc.driver import compile_clock

    @SHORT
    @given(x=st.integers(0, 9))
    def compiling(x):
        with compile_clock.compiling():
            time.sleep(SLOW)

    @SHORT
    @given(x=st.integers(0, 9))
    def running(x):
        time.sleep(SLOW)

    assert _deadline_failure(compiling) is None
    assert "Deadline" in (_deadline_failure(running) or "")  # the deadline itself still holds


def test_a_slow_session_compile_in_an_example_is_exempt(monkeypatch):
    real = InterpBackend.compile

    def slow_compile(self, module):
        time.sleep(SLOW)
        return real(self, module)

    monkeypatch.setattr(InterpBackend, "compile", slow_compile)

    @SHORT
    @given(X=hu.tensor(max_dim=2))
    def one_op(X):
        workspace.ResetWorkspace()  # (every example compiles afresh)
        workspace.FeedBlob("X", X)
        workspace.RunOperatorOnce(core.CreateOperator("Relu", ["X"], ["Y"]))
        np.testing.assert_array_equal(workspace.FetchBlob("Y"), np.maximum(X, 0))

    assert _deadline_failure(one_op) is None


def test_making_a_session_in_an_example_is_exempt(monkeypatch):
    # A process's first session loads the session module and its backend (half a second of
    # imports, numba's more): an example that makes one must not pay for it under the deadline.
    from dslc.driver.session import LocalSession
    real = LocalSession.__init__

    def slow_init(self, *args, **kwargs):
        time.sleep(SLOW)
        real(self, *args, **kwargs)

    monkeypatch.setattr(LocalSession, "__init__", slow_init)

    @SHORT
    @given(X=hu.tensor(max_dim=2))
    def one_op(X):
        workspace.ResetWorkspace()  # (every example makes its session afresh)
        workspace.FeedBlob("X", X)
        workspace.RunOperatorOnce(core.CreateOperator("Relu", ["X"], ["Y"]))
        np.testing.assert_array_equal(workspace.FetchBlob("Y"), np.maximum(X, 0))

    assert _deadline_failure(one_op) is None


def test_numbas_lazy_compiles_are_exempt():
    numba_event = pytest.importorskip("numba.core.event")
    if not hu._numba_listened:
        hu._listen_to_numba()

    @SHORT
    @given(x=st.integers(0, 9))
    def lazy(x):  # what numba reports around a kernel it compiles on its first call
        with numba_event.trigger_event("numba:compile", data={"x": x}):
            time.sleep(SLOW)

    assert _deadline_failure(lazy) is None
