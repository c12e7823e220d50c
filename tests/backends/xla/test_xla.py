"""The xla backend (backends/xla/): regions compiled by XLA give the interpreter's answers.

Every program runs on interp and on xla (every region compiled: the work threshold is 0
under test) and the results must agree to float32 rounding; the compile summary must
show the ops compiled, or say why not. Values that do not come from the interpreter are
worked out by hand (max pooling's ties, C's integer division). Skips without JAX.
"""
import time

import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.runtime.profile import OpProfile
from dslc.session import LocalSession

jax = pytest.importorskip("jax")


def _run(backend, net, feeds, init=None, times=1):
    ws = workspace.Workspace()
    for name, value in feeds.items():
        ws.feed_blob(name, value)
    s = LocalSession(ws, backend=backend)
    if init is not None:
        s.run(init)
    for _ in range(times):
        s.run(net)
    return ws, s


def _both(net, feeds, fetch, init=None, times=1, rtol=2e-5, atol=1e-6):
    """Run on interp and xla; the fetched blobs agree; the xla session's summary of ``net``."""
    got = {}
    for backend in ("interp", "xla"):
        ws, s = _run(backend, net, feeds, init, times)
        got[backend] = [np.array(ws.fetch_blob(b)) for b in fetch]
    for name, want, have in zip(fetch, got["interp"], got["xla"]):
        assert have.dtype == want.dtype and have.shape == want.shape, name
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=name)
    return got["xla"], s.compile(net).program.summary()


def _interpreted(summary, name):
    return [why for why in summary["ops interpreted, and why"] if why.startswith(name + ":")]


GEOMETRIES = [{}, {"stride": 2, "pad": 1}, {"dilation": 2, "pad_t": 1, "pad_l": 2}, {"group": 2, "stride_h": 2},
              {"legacy_pad": 1, "stride": 2}, {"legacy_pad": 2, "stride": 2}, {"group": 4, "pad": 1}]


@pytest.mark.parametrize("small_output", [0, 10 ** 9], ids=["xla-conv,columns-dx", "patches-gemm,xla-dx"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: ",".join(f"{k}={v}" for k, v in g.items()) or "plain")
def test_conv_and_its_gradient_equal_interp(geometry, small_output, monkeypatch):
    # both ways of a convolution: XLA's own, and (small outputs) a GEMM of window patches;
    # both ways of its dX: XLA's transposed convolution, and (stride 1, no groups) a GEMM's
    # columns added into place
    from dslc.backends.xla import kernels_conv
    monkeypatch.setattr(kernels_conv, "SMALL_OUTPUT", small_output)
    monkeypatch.setattr(kernels_conv, "COLUMNS_DX", 0 if small_output == 0 else 10 ** 9)
    rng = np.random.default_rng(4)
    group = geometry.get("group", 1)
    x = rng.normal(size=(2, 4, 9, 8)).astype(np.float32)
    w = rng.normal(size=(4, 4 // group, 3, 2)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    net = core.Net("conv")
    net.Conv(["x", "w", "b"], "y", **geometry)
    y = _run("interp", net, {"x": x, "w": w, "b": b})[0].fetch_blob("y")
    dy = rng.normal(size=y.shape).astype(np.float32)
    net.ConvGradient(["x", "w", "dy"], ["dw", "db", "dx"], **geometry)
    _, summary = _both(net, {"x": x, "w": w, "b": b, "dy": dy}, ["y", "dw", "db", "dx"], rtol=1e-4, atol=1e-4)
    assert summary["ops compiled"] == 2 and not _interpreted(summary, "Conv"), summary


@pytest.mark.parametrize("op,attrs", [("MaxPool", {"kernel": 3, "stride": 2, "pad": 1}),
                                      ("AveragePool", {"kernel": 3, "stride": 2, "pad": 1}),
                                      ("AveragePool", {"kernel": 3, "stride": 2, "pad": 1, "count_include_pad": 1}),
                                      ("MaxPool", {"kernel": 3, "stride": 2, "legacy_pad": 3}),
                                      ("AveragePool", {"kernel": 2, "stride": 2, "legacy_pad": 3, "pad": 1}),
                                      ("MaxPool", {"global_pooling": 1}),
                                      ("MaxPool", {"kernel": 2, "stride": 2}),  # (tiles: width 7 leaves a column)
                                      ("AveragePool", {"kernel": 2, "stride": 2})])
def test_pooling_and_its_gradient_equal_interp(op, attrs):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 8, 7)).astype(np.float32)
    net = core.Net("pool")
    net.__getattr__(op)(["x"], "y", **attrs)
    y = _run("interp", net, {"x": x})[0].fetch_blob("y")
    dy = rng.normal(size=y.shape).astype(np.float32)
    net.__getattr__(op + "Gradient")(["x", "y", "dy"], "dx", **attrs)
    _, summary = _both(net, {"x": x, "dy": dy}, ["y", "dx"])
    assert summary["ops compiled"] == 2, summary


def test_max_pooling_gives_every_tied_maximum_the_gradient():
    # Caffe2 gives a window's gradient to every element equal to its max; a window of zeros
    # (after a ReLU) gives it to all four. XLA's own gradient would give it to one.
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0, :, 2:] = [[1, 3], [3, 2]]
    net = core.Net("ties")
    net.MaxPool(["x"], "y", kernel=2, stride=2)
    net.MaxPoolGradient(["x", "y", "dy"], "dx", kernel=2, stride=2)
    ws, _ = _run("xla", net, {"x": x, "dy": np.array([[[[2.0, 5.0]]]], np.float32)})
    np.testing.assert_array_equal(ws.fetch_blob("dx"), [[[[2, 2, 0, 5], [2, 2, 5, 0]]]])


def _lenet(batch_norm=False, momentum=0.0, adam=False):
    m = ModelHelper(name="lenet")
    c1 = brew.conv(m, "data", "conv1", dim_in=1, dim_out=4, kernel=3, pad=1)
    if batch_norm:
        c1 = brew.spatial_bn(m, c1, "bn1", 4, epsilon=1e-3, is_test=False)
    p1 = brew.max_pool(m, brew.relu(m, c1, "r1"), "pool1", kernel=2, stride=2)
    c2 = brew.conv(m, p1, "conv2", dim_in=4, dim_out=6, kernel=3, group=2)
    p2 = brew.average_pool(m, c2, "pool2", kernel=2, stride=2)
    fc = brew.relu(m, brew.fc(m, p2, "fc3", dim_in=6 * 2 * 2, dim_out=12), "relu3")
    pred = brew.fc(m, fc, "pred", 12, 5)
    sm, loss = m.net.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    m.net.Accuracy([sm, "label"], "accuracy")
    m.AddGradientOperators([loss])
    if adam:
        optimizer.build_adam(m, 0.01)
    else:
        optimizer.build_sgd(m, 0.1, momentum=momentum)
    return m


def _images(n=4):
    rng = np.random.default_rng(7)
    return {"data": rng.normal(size=(n, 1, 12, 12)).astype(np.float32),
            "label": rng.integers(0, 5, n).astype(np.int32)}


@pytest.mark.parametrize("kind", ["sgd", "momentum_bn", "adam"])
def test_training_steps_equal_interp_as_one_function(kind):
    m = _lenet(batch_norm=kind == "momentum_bn", momentum=0.9 if kind == "momentum_bn" else 0.0, adam=kind == "adam")
    fetch = ["loss", "accuracy", "conv1_w", "conv2_b", "fc3_w", "pred_b", "conv1_w_grad"]
    if kind == "momentum_bn":
        fetch += ["bn1_s", "bn1_rm", "bn1_riv"]
    _, summary = _both(m.net, _images(), fetch, init=m.param_init_net, times=3, rtol=1e-4, atol=1e-5)
    assert len(summary["regions compiled"]) == 1, summary
    for name in ("Conv", "FC", "SoftmaxWithLoss", "MaxPoolGradient", "WeightedSum", "MomentumSGDUpdate", "Adam",
                 "SpatialBN"):
        assert not _interpreted(summary, name), summary


def test_test_mode_batch_norm_equals_interp():
    rng = np.random.default_rng(2)
    net = core.Net("bn")
    net.SpatialBN(["x", "s", "b", "m", "v"], "y", is_test=1, epsilon=1e-4)
    feeds = {"x": rng.normal(size=(2, 3, 4, 5)).astype(np.float32), "s": rng.normal(size=3).astype(np.float32),
             "b": rng.normal(size=3).astype(np.float32), "m": rng.normal(size=3).astype(np.float32),
             "v": rng.uniform(0.5, 2, size=3).astype(np.float32)}
    _both(net, feeds, ["y"])


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("parts", ["bias,bn,residual,relu", "bn,relu", "residual"])
def test_fused_conv_equals_interp_and_is_compiled(parts, group):
    parts = parts.split(",")
    rng = np.random.default_rng(5)
    feeds = {"x": rng.normal(size=(2, 4, 6, 5)).astype(np.float32),
             "w": rng.normal(size=(6, 4 // group, 3, 3)).astype(np.float32)}
    names = ["x", "w"]
    if "bias" in parts:
        names.append("b")
    if "bn" in parts:
        names += ["s", "t", "m"]
    for n in names[2:]:
        feeds[n] = rng.normal(size=6).astype(np.float32)
    if "bn" in parts:
        names.append("v")
        feeds["v"] = rng.uniform(0.5, 2, size=6).astype(np.float32)
    if "residual" in parts:
        names.append("r")
        feeds["r"] = rng.normal(size=(2, 6, 6, 5)).astype(np.float32)
    net = core.Net("fused")
    net.ConvFused(names, "y", kernel=3, pad=1, group=group, epsilon=1e-3, **{p: 1 for p in parts})
    _, summary = _both(net, feeds, ["y"], rtol=1e-4, atol=1e-4)
    assert summary["ops compiled"] == 1 and not _interpreted(summary, "ConvFused"), summary


@pytest.mark.parametrize("interp_seconds,kept", [(0.0, "interpreter"), (10.0, "xla")])
def test_a_run_keeps_the_faster_of_xla_and_the_interpreter(interp_seconds, kept):
    from dslc.backends.xla.emitter import RunCall
    out = np.arange(3.0)
    call = RunCall(lambda *args: ([out], True), [np.float64], False, runs=2, label="here")
    for _ in range(3):  # XLA's warm-up and two timed calls
        assert call(1)[0] is not None
    assert call(1) is None and call(1) is None  # the interpreter's turn
    call.interpreted(interp_seconds)
    call.interpreted(interp_seconds)
    line = "kept xla" if kept == "xla" else "fell back to the interpreter"
    assert call.kept == kept and call.describe().startswith("here: xla ") and call.describe().endswith(line)
    assert (call(1) is None) == (kept == "interpreter")


def test_xlas_race_counts_the_work_its_runtime_does_on_its_own_threads():
    """XLA runs a call on threads of its runtime's pool, never the caller's: the race's clock
    (backends/common/race.py) is the process's CPU time. Two 1024^3 float32 products are
    4.3 GFLOP, at least ~20 ms of CPU on any core here (by hand, at <= 200 GFLOP/s a core);
    the calling thread's CPU time for the call is ~0.4 ms (measured), which would keep XLA
    whatever it cost."""
    import jax.numpy as jnp
    from dslc.backends.xla.emitter import RunCall
    f = jax.jit(lambda a: [jnp.tanh(a @ a) @ a])
    a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    call = RunCall(lambda x: (f(x), True), [np.float32], False, runs=1, label="two products")
    for _ in range(2):  # XLA's warm-up and one timed call
        (got,) = call(a)
    np.testing.assert_allclose(got, np.tanh(a @ a) @ a, rtol=1e-3)
    assert len(call.compiled) == 2 and call.compiled[1] >= 0.005, call.compiled


def test_the_generated_code_times_the_interpreter_on_the_races_clock(monkeypatch):
    """Both sides of a run's race on one clock, the race module's: the interpreted runs'
    seconds are read off it too (a fake clock counting up by one each read: 1.0 a run)."""
    from dslc.backends.common import race
    ticks = iter(range(10 ** 6))
    monkeypatch.setitem(race.CLOCKS, "xla", lambda: float(next(ticks)))
    monkeypatch.setenv("DSLC_XLA_TRIAL_RUNS", "2")
    net = core.Net("race_clock")
    net.Relu("x", "y")
    ws, s = _run("xla", net, {"x": np.array([-1.0, 2.0], np.float32)})
    for _ in range(4):
        s.run(net)
    (call,) = s.compile(net).program.stats.calls
    assert call.compiled == [1.0, 1.0, 1.0] and call.interp == [1.0, 1.0]
    np.testing.assert_array_equal(ws.fetch_blob("y"), [0.0, 2.0])


def test_racing_runs_give_the_interpreters_answers_throughout(monkeypatch):
    monkeypatch.setenv("DSLC_XLA_TRIAL_RUNS", "2")
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(4, 8)).astype(np.float32), "w": rng.normal(size=(5, 8)).astype(np.float32),
             "b": rng.normal(size=5).astype(np.float32)}
    net = core.Net("race")
    net.FC(["x", "w", "b"], "y")
    net.Relu("y", "z")
    want = np.maximum(feeds["x"] @ feeds["w"].T + feeds["b"], 0)
    ws, s = _run("xla", net, feeds)
    for _ in range(6):
        s.run(net)
        np.testing.assert_allclose(ws.fetch_blob("z"), want, rtol=1e-5, atol=1e-6)
    (verdict,) = s.compile(net).program.summary()["regions timed against the interpreter"]
    assert " ms per run: " in verdict and verdict.endswith(("kept xla", "fell back to the interpreter")), verdict


def test_a_profiled_race_times_the_interpreters_whole_run(monkeypatch):
    """Under --profile every interpreted op reads the clock around itself: the race's own
    clock must still span the whole run (FC then Relu), not the last op alone. (The race
    on the profile's wall clock here, to compare the two: its own is CPU time.)"""
    from dslc.backends.common import race
    monkeypatch.setitem(race.CLOCKS, "xla", time.perf_counter)
    monkeypatch.setenv("DSLC_XLA_TRIAL_RUNS", "2")
    rng = np.random.default_rng(7)
    ws = workspace.Workspace()
    for name, shape in (("x", (64, 256)), ("w", (256, 256)), ("b", (256,))):
        ws.feed_blob(name, rng.normal(size=shape).astype(np.float32))
    net = core.Net("race_profiled")
    net.FC(["x", "w", "b"], "y")
    net.Relu("y", "z")
    profile = OpProfile()
    s = LocalSession(ws, backend="xla", profile=profile)
    for _ in range(5):  # XLA's warm-up, 2 timed calls, then the interpreter's 2
        s.run(net)
    (call,) = s.compile(net).program.stats.calls
    assert len(call.interp) == 2
    times = {kind: (t, n) for (kind, _), (t, n) in profile.counters.items()}
    assert times["FC"][1] == 2 and times["xla run"][1] == 5  # (XLA answers None on the interpreter's turns)
    assert sum(call.interp) >= times["FC"][0] + times["Relu"][0]
    assert profile.notes == [call.describe()]  # (the verdict in the profile's report, as numba's)


def test_a_fed_weight_off_xlas_alignment_is_realigned_once_and_writes_still_count():
    rng = np.random.default_rng(3)
    buf = np.empty(64 * 256 + 1, np.float32)
    w = buf[1:].reshape(64, 256)  # (4 bytes past numpy's own start: never on a 64-byte boundary)
    w[...] = rng.normal(size=w.shape)
    assert w.ctypes.data % 64
    x = rng.normal(size=(8, 256)).astype(np.float32)
    b = rng.normal(size=64).astype(np.float32)
    net = core.Net("fc")
    net.FC(["x", "w", "b"], "y")
    ws, s = _run("xla", net, {"x": x, "w": w, "b": b})
    np.testing.assert_allclose(ws.fetch_blob("y"), x @ w.T + b, rtol=1e-5, atol=1e-5)
    held = ws.lookup("w").v
    assert held is not w and held.ctypes.data % 64 == 0 and np.array_equal(held, w)
    ws.blobs["w"].tensor().data[:8] = 0.0  # a write in place: the next run must see it
    s.run(net)
    w2 = w.copy()
    w2[:8] = 0.0
    np.testing.assert_allclose(ws.fetch_blob("y"), x @ w2.T + b, rtol=1e-5, atol=1e-5)


def test_a_label_outside_the_classes_is_the_interpreters_error():
    m = _lenet()
    feeds = _images()
    feeds["label"][2] = 7  # (5 classes)
    errors = []
    for backend in ("interp", "xla"):
        with pytest.raises(DSLError) as e:
            _run(backend, m.net, feeds, init=m.param_init_net)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "SoftmaxWithLoss" in errors[0]


def test_an_unset_input_is_the_interpreters_error():
    net = core.Net("unset")
    net.Relu(["never_fed"], "y")
    with pytest.raises(DSLError, match="never_fed"):
        _run("xla", net, {})


def test_integers_divide_as_c_does_and_int64_runs_in_a_64_bit_scope():
    net = core.Net("ints")
    net.Div(["a", "b"], "q")
    net.Add(["big", "big"], "twice")
    feeds = {"a": np.array([-7, 7, -8, 9], np.int32), "b": np.array([2, -2, 3, 4], np.int32),
             "big": np.array([2 ** 40, -3], np.int64)}
    ws, s = _run("xla", net, feeds)
    np.testing.assert_array_equal(ws.fetch_blob("q"), [-3, -3, -2, 2])  # (truncated toward zero)
    assert ws.fetch_blob("twice").dtype == np.int64
    np.testing.assert_array_equal(ws.fetch_blob("twice"), [2 ** 41, -6])
    assert s.compile(net).program.summary()["ops compiled"] == 2
    assert not jax.config.jax_enable_x64  # (the scope ended with the call)
    feeds["b"][1] = 0
    with pytest.raises(DSLError, match="integer division by zero"):
        _run("xla", net, feeds)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_the_ops_between_a_deploy_nets_convs_equal_interp_and_are_compiled(mode):
    # GoogLeNet's and DenseNet's Concat, ShuffleNet's Split and ReduceMean, MobileNetV2's Clip
    # (ReLU6), DenseNet's PadImage: one XLA call, the interpreter's values
    rng = np.random.default_rng(6)
    net = core.Net("between")
    net.Concat(["a", "b"], ["cat", "sizes"], axis=1)
    net.Concat(["a", "a2"], ["stacked"], axis=2, add_axis=1)
    net.Split(["cat"], ["s0", "s1"], axis=1, split=[1, 4])
    net.Split(["cat"], ["h0", "h1"], axis=3)
    net.Clip(["cat"], ["relu6"], min=0.0, max=6.0)
    net.ReduceMean(["relu6"], ["gap"], axes=[2, 3], keepdims=0)
    net.ReduceSum(["cat"], ["total"])
    net.PadImage(["cat"], ["padded"], pad_t=1, pad_l=2, pad_b=0, pad_r=1, mode=mode, value=0.5)
    a = rng.normal(size=(2, 3, 4, 6)).astype(np.float32) * 5
    feeds = {"a": a, "b": rng.normal(size=(2, 2, 4, 6)).astype(np.float32) * 5, "a2": a + 1}
    fetch = ["cat", "sizes", "stacked", "s0", "s1", "h0", "h1", "relu6", "gap", "total", "padded"]
    got, summary = _both(net, feeds, fetch)
    assert summary["ops compiled"] == 8 and summary["functions compiled"] == 1, summary
    assert not any(_interpreted(summary, n) for n in ("Concat", "Split", "Clip", "ReduceMean", "ReduceSum", "PadImage"))
    values = dict(zip(fetch, got))
    np.testing.assert_array_equal(values["sizes"], [3, 2])  # (by hand: each operand's channels)
    np.testing.assert_array_equal(values["s1"], np.concatenate([a, feeds["b"]], 1)[:, 1:])
    np.testing.assert_allclose(values["gap"], np.clip(values["cat"], 0, 6).mean(axis=(2, 3)), rtol=1e-6)
    assert values["stacked"].shape == (2, 3, 2, 4, 6) and values["padded"].shape == (2, 5, 5, 9)


def test_products_with_either_operand_transposed_equal_interp():
    # (each a dot_general naming its contracted dims, never a transposed copy)
    rng = np.random.default_rng(8)
    net = core.Net("products")
    for ta in (0, 1):
        for tb in (0, 1):
            net.MatMul(["a" if not ta else "at", "b" if not tb else "bt"], f"m{ta}{tb}", trans_a=ta, trans_b=tb)
    net.FC(["x", "w", "bias"], "y")
    net.FCGradient(["x", "w", "dy"], ["dw", "db", "dx"])
    a, b = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    feeds = {"a": a, "at": a.T.copy(), "b": b, "bt": b.T.copy(), "x": rng.normal(size=(1, 6)).astype(np.float32),
             "w": rng.normal(size=(4, 6)).astype(np.float32), "bias": rng.normal(size=4).astype(np.float32),
             "dy": rng.normal(size=(1, 4)).astype(np.float32)}
    got, summary = _both(net, feeds, ["m00", "m01", "m10", "m11", "y", "dw", "dx"])
    for m in got[:4]:
        np.testing.assert_allclose(m, a @ b, rtol=1e-5, atol=1e-6)  # (by hand: all four are a b)
    assert summary["ops compiled"] == 6, summary


def test_what_stays_interpreted_says_why():
    m = ModelHelper(name="why")
    fc = brew.fc(m, "data", "fc", dim_in=6, dim_out=4)
    drop = m.net.Dropout([fc], ["drop", "mask"], ratio=0.5)[0]
    m.net.Print([drop], [])
    ws, s = _run("xla", m.net, {"data": np.ones((3, 6), np.float32)}, init=m.param_init_net)
    why = s.compile(m.net).program.summary()["ops interpreted, and why"]
    assert any(k.startswith("Dropout: Dropout in training") for k in why), why
    assert any(k.startswith("Print:") for k in why), why


def test_compiled_regions_persist_in_the_cache_dir(tmp_path, monkeypatch):
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import json, numpy as np
        from dslc import core, workspace
        from dslc.session import LocalSession
        net = core.Net("n")
        net.FC(["x", "w", "b"], "y")
        ws = workspace.Workspace()
        ws.feed_blob("x", np.ones((64, 32), np.float32))
        ws.feed_blob("w", np.ones((16, 32), np.float32))
        ws.feed_blob("b", np.ones(16, np.float32))
        s = LocalSession(ws, backend="xla")
        s.run(net)
        assert float(ws.fetch_blob("y")[0, 0]) == 33.0
    """)
    env = dict(__import__("os").environ, DSLC_CACHE_DIR=str(tmp_path / "cache"), DSLC_XLA_MIN_WORK="0")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    cached = list((tmp_path / "cache" / "xla").iterdir())
    assert cached, "nothing in the XLA cache"


def test_without_jax_the_backend_says_how_to_install_it(monkeypatch):
    from dslc import backends
    xla = backends.get("xla")
    monkeypatch.setattr("dslc.backends.xla.available", lambda: False)
    with pytest.raises(DSLError, match=r"needs JAX") as e:
        xla()
    assert "dslc[xla]" in e.value.hint


def _gpu():
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(not _gpu(), reason="needs jax[cuda12] and a GPU (docs/xla.md)")
def test_on_a_gpu_the_regions_run_there():
    m = _lenet()
    _, summary = _both(m.net, _images(), ["loss", "conv1_w"], init=m.param_init_net, times=2, rtol=1e-3, atol=1e-4)
    assert "cuda" in summary["device"].lower() or "gpu" in summary["device"].lower(), summary


def test_a_loop_of_training_steps_is_one_function(default_pipeline):
    # an execution step's num_iter is a `for` of a constant count: all its iterations are one
    # XLA call (lax.fori_loop), the activations it carries start as zeros it never reads
    # (the default pipeline: promote-blobs makes the loop's body pure dataflow)
    rng = np.random.default_rng(3)
    feeds = {"data": rng.normal(size=(8, 4)).astype(np.float32), "label": rng.integers(0, 3, 8).astype(np.int32)}
    m = ModelHelper(name="loop")
    h = brew.relu(m, brew.fc(m, "data", "fc1", dim_in=4, dim_out=6), "r1")
    _, loss = m.net.SoftmaxWithLoss([brew.fc(m, h, "fc2", dim_in=6, dim_out=3), "label"], ["softmax", "loss"])
    m.AddGradientOperators([loss])
    optimizer.build_sgd(m, 0.1, momentum=0.9)
    loop = core.execution_step("train", [m.net], num_iter=7)
    got, summary = _both(loop, feeds, ["loss", "fc1_w", "fc2_b", "optimizer_iteration", "r1_grad"],
                         init=m.param_init_net, times=2, rtol=1e-4, atol=1e-6)
    assert got[3].tolist() == [14]
    assert [r for r in summary["regions compiled"] if r.startswith("from for")], summary
    assert not _interpreted(summary, "FC") and not _interpreted(summary, "for"), summary


JOB = '''
from dslc import core


def build_job():
    net = core.Net("job")
    net.ConstantFill([], "x", shape=[4, 8], value=1.0)
    net.ConstantFill([], "w", shape=[3, 8], value=1.0)
    net.ConstantFill([], "b", shape=[3], value=0.0)
    net.FC(["x", "w", "b"], "y")
    net.Dropout(["y"], ["d", "mask"], ratio=0.5)
    net.ConstantFill([], "it", shape=[1], value=3, dtype=core.DataType.INT64)
    net.LearningRate(["it"], "lr", base_lr=0.1, policy="step", stepsize=2, gamma=0.5)
    return net
'''


def test_dslc_compile_says_what_xla_took_and_why_not(tmp_path, capsys, default_pipeline):
    from dslc.driver import cli
    job = tmp_path / "job.py"
    job.write_text(JOB)
    assert cli.main(["compile", str(job), "--backend", "xla"]) == 0
    out = capsys.readouterr().out
    assert "from FC at " in out and "job.py:10:" in out and "FC:" not in out, out
    assert "Dropout: Dropout in training: its draws come from the workspace's random stream" in out, out
    assert "LearningRate: LearningRate policy 'step'" in out, out
