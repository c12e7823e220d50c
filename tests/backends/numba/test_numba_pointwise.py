"""The numba backend's Where and ElementwiseLinear (+ its gradient) kernels
(backends/numba/kernels_nn.py): compiled, and the interpreter's answers bit for bit (the
interpreter's are Caffe2's: tests/ir/ops/test_pointwise_spatial.py)."""
import numpy as np

from dslc import core, workspace
from dslc.backends.numba import islands
from dslc.session import LocalSession


def _run(backend):
    ws = workspace.Workspace()
    rng = np.random.default_rng(3)
    for name, value in (("c", rng.random((5, 4)) > 0.5), ("x", rng.normal(size=(5, 4)).astype(np.float32)),
                        ("y", rng.normal(size=(5, 4)).astype(np.float32)), ("a", rng.normal(size=4).astype(np.float32)),
                        ("b", rng.normal(size=4).astype(np.float32)), ("w", rng.normal(size=(5, 4)).astype(np.float32))):
        ws.feed_blob(name, value)
    net = core.Net("pointwise")
    net.Where(["c", "x", "y"], "picked")
    lin = net.ElementwiseLinear(["picked", "a", "b"], "lin")
    net.AddGradientOperators([net.SumElements([net.Mul([lin, "w"], "lw")], "loss")])
    s = LocalSession(ws, backend=backend)
    s.run(net)
    return s, net, {n: ws.fetch_blob(n) for n in ("picked", "lin", "picked_grad", "a_grad", "b_grad")}


def test_where_and_elementwise_linear_compile_and_equal_the_interpreter(monkeypatch):
    monkeypatch.setattr(islands, "MIN_WORK", 0)  # (20-element tensors: compile them all the same)
    s, net, got = _run("numba")
    summary = s.compile(net).program.summary()
    why = summary["ops interpreted, and why"]
    assert not any(k.startswith(("Where", "ElementwiseLinear")) for k in why), why
    assert summary["ops compiled"] >= 5, summary  # (Where, ElementwiseLinear, its gradient, Mul and its)
    _, _, want = _run("interp")
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)
