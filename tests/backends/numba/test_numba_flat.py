"""Pointwise ops on N-d arrays compile on flattened views (backends/numba/kernels.flat_shape).

numba compiles an expression over 4-d arrays as a loop nest with a broadcast check per
operand and dimension, which LLVM unswitches into copies of the nest: one weight-decay
WeightedSum of a conv weight took 32 s of CPU to compile (1-d: 1.9 s), and the ResNet
trainer under DSLC_NUMBA_COMPILE=now never finished compiling its optimizer region.
Here: a small conv trainer (two convs, weight decay, Nesterov momentum, as the trainer's)
compiled with every training island, its answers against the interpreter's, its updates
written on flat arrays, and the optimizer function's code bounded; and the rule itself
(which shapes flatten) on IR text.
"""
import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.backends.numba import islands
from dslc.backends.numba.hot import CompileLimitWarning
from dslc.ir import parse
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession


def conv_trainer():
    model = ModelHelper(name="convnet", arg_scope={"order": "NCHW"})
    c1 = brew.conv(model, "data", "c1", dim_in=3, dim_out=4, kernel=3, pad=1, no_bias=True)
    c2 = brew.conv(model, brew.relu(model, c1, "r1"), "c2", dim_in=4, dim_out=4, kernel=3, pad=1)
    fc = brew.fc(model, brew.relu(model, c2, "r2"), "fc", dim_in=4 * 6 * 6, dim_out=5)
    model.net.SoftmaxWithLoss([fc, "label"], ["sm", "loss"])
    model.AddGradientOperators(["loss"])
    optimizer.add_weight_decay(model, 1e-3)
    optimizer.build_sgd(model, 0.05, momentum=0.9, nesterov=1, policy="step", stepsize=2, gamma=0.5)
    return model


FETCH = ("loss", "c1_w", "c2_w", "c2_b", "fc_w", "c1_w_momentum", "c2_w_momentum", "fc_w_momentum")


def train(backend, steps=3):
    ws = workspace.Workspace()
    rng = np.random.default_rng(5)
    model = conv_trainer()
    s = LocalSession(ws, backend=backend)
    s.run(model.param_init_net)
    out = []
    for _ in range(steps):
        ws.feed_blob("data", rng.normal(size=(2, 3, 6, 6)).astype(np.float32))
        ws.feed_blob("label", rng.integers(0, 5, 2).astype(np.int32))
        s.run(model.net)
        out.append({b: np.array(ws.fetch_blob(b)) for b in FETCH})
    return out, s.compile(model.net).program


def test_a_conv_trainers_updates_compile_on_flat_arrays():
    got, program = train("numba")  # (every training island compiled before the run: the suite's setting)
    want, _ = train("interp")
    for w_step, g_step in zip(want, got):
        for name in FETCH:
            assert g_step[name].shape == w_step[name].shape and g_step[name].dtype == w_step[name].dtype
            np.testing.assert_allclose(g_step[name], w_step[name], rtol=1e-5, atol=1e-7, err_msg=name)
    # the momenta moved (the updates ran, compiled: the island below is the one that made them)
    assert np.abs(got[-1]["c1_w_momentum"]).max() > 0
    updates = [(island, call) for island, call in program.stats.islands
               if any(op.name == "MomentumSGDUpdate" for op in island.ops)]
    assert len(updates) == 1, program.summary()
    island, _ = updates[0]
    assert sum(op.name == "WeightedSum" for op in island.ops) == 3  # (the decay of c1_w, c2_w, fc_w)
    source = next(s for s in program.stats.sources if "MomentumSGDUpdate" in s)
    # the conv weights' decay and update are written on flat views, reshaped once made
    assert "c1_w_grad_0.ravel() * " in source and ".reshape(c1_w_grad_0.shape)" in source, source
    assert "_momentum_sgd(c2_w_grad_1.ravel(), c2_w_momentum_0.ravel()" in source, source
    assert ".reshape(c2_" in source and ".shape)" in source  # (the FC's 2-d weight too)



IR = """
module {
  group {existing = [@"a", @"b", @"c", @"w", @"u", @"t", @"v"]} body {
    task @"t" {workspace = "global"} body {
      %a = load @"a" : f32[2,3,4,4]
      %b = load @"b" : f32[2,3,4,4]
      %c = load @"c" : f32[1,3,1,1]
      %w = load @"w" : f32[1]
      %u = load @"u" : f32[?,3]
      %t = load @"t" : f32[?,3]
      %v = load @"v" : f32[3]
      %same = Add(%a, %b) : f32[2,3,4,4]
      %bcast = Add(%same, %c) : f32[2,3,4,4]
      %relu = Relu(%bcast) : f32[2,3,4,4]
      %decay = WeightedSum(%a, %w, %b, %w) : f32[2,3,4,4]
      %unknown = Add(%u, %t) : f32[?,3]
      %unknown_one = Add(%u, %u) : f32[?,3]
      %unknown_w = Mul(%u, %w) : f32[?,3]
      %rank1 = Add(%v, %v) : f32[3]
      %rows = Softmax(%same) : f32[2,3,4,4]
      store @"same"(%same)
      store @"bcast"(%bcast)
      store @"relu"(%relu)
      store @"decay"(%decay)
      store @"unknown"(%unknown)
      store @"unknown_one"(%unknown_one)
      store @"unknown_w"(%unknown_w)
      store @"rank1"(%rank1)
      store @"rows"(%rows)
    }
  }
}
"""


@pytest.mark.parametrize("value, flat", [
    ("same", "a"),          # arrays of one shape (reshaped back to the first's)
    ("bcast", None),        # an operand broadcast along some dimensions: flattened, it would misalign
    ("relu", "bcast"),
    ("decay", "a"),         # one-element weights read as scalars
    ("unknown", None),      # a dimension not known: two arrays typed alike may differ at run time
    ("unknown_one", "u"),   # ... but one array is its own shape
    ("unknown_w", "u"),     # (and a one-element operand still reads as a scalar)
    ("rank1", None),        # flat already
    ("rows", None),         # not pointwise
])
def test_which_ops_run_flattened(value, flat):
    from dslc.backends.numba import kernels_nn  # noqa: F401  (its kernels join kernels.POINTWISE)
    from dslc.backends.numba.kernels import flat_shape
    ops = {op.results[0].hint: op for op in parse(IR).walk() if op.results and op.name != "load"}
    like = flat_shape(ops[value])
    assert (like and like.hint) == flat


def update_net():
    """A conv weight's decay and Nesterov momentum update, as optimizer.build_sgd writes them."""
    net = core.Net("update")
    net.WeightedSum(["w_grad", "one", "w", "decay"], "w_grad")
    net.MomentumSGDUpdate(["w_grad", "w_momentum", "lr", "w"], ["w_grad", "w_momentum", "w"], momentum=0.9,
                          nesterov=1)
    return net


def update(backend, shape=(8, 4, 3, 3)):
    ws = workspace.Workspace()
    rng = np.random.default_rng(2)
    for name in ("w_grad", "w_momentum", "w"):
        ws.feed_blob(name, rng.normal(size=shape).astype(np.float32))
    for name, value in (("one", 1.0), ("decay", 1e-3), ("lr", -0.05)):
        ws.feed_blob(name, np.array([value], np.float32))
    s = LocalSession(ws, backend=backend)
    net = update_net()
    s.run(net)
    return {b: ws.fetch_blob(b) for b in ("w_grad", "w_momentum", "w")}, s.compile(net).program


def test_a_4d_update_compiles_to_bounded_code(monkeypatch, tmp_path):
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))  # (compiled here: numba shows no code it loaded)
    got, program = update("numba")
    want, _ = update("interp")
    for name, value in want.items():  # (the same float32 operations: bit for bit)
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    [(island, call)] = program.stats.islands
    assert [op.name for op in island.ops] == ["WeightedSum", "MomentumSGDUpdate"]
    # numba's optimized code for it: 5,172 lines on the flat arrays (the whole numba run 4.2 s
    # of CPU); on the 4-d arrays the nests are unswitched copies, and one such sum alone took
    # 31.6 s of CPU to compile (bench figures in docs/numba.md)
    lines = sum(len(text.splitlines()) for text in call.fn.inspect_llvm().values())
    assert 0 < lines < 20_000, lines


def test_a_compile_over_the_limit_leaves_the_region_interpreted_with_a_word(monkeypatch, tmp_path):
    # DSLC_NUMBA_COMPILE_LIMIT: the compile worker is stopped and the region runs on the
    # interpreter, with a warning naming it (here a limit no compile meets)
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))  # (nothing cached: numba has to compile)
    monkeypatch.setattr(islands, "COMPILE_LIMIT", 0.001)
    with pytest.warns(CompileLimitWarning, match=r"the region from WeightedSum at test_numba_flat\.py:\d+ \(2 ops\)"):
        # (a rank of its own: a function this process compiled before is not compiled again,
        # and the flattened text is the same for every shape of one rank)
        got, program = update("numba", (6, 4, 3, 3, 1))
    want, _ = update("interp", (6, 4, 3, 3, 1))
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    summary = program.summary()
    assert summary["regions compiled"] == [], summary
    assert summary["ops interpreted, and why"]["WeightedSum: over DSLC_NUMBA_COMPILE_LIMIT (0.001 s)"] == 1, summary
