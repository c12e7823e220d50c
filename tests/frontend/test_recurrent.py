"""RecurrentNetwork (recurrent.recurrent_net) and rnn_cell's LSTM and BasicRNN: forward
values against step-by-step numpy references written here, gradients against finite
differences of those references, on both backends."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dslc import core, recurrent, rnn_cell, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]
RNG = np.random.RandomState(7)


def _run(net, backend):
    with LocalSession(backend=backend) as s:
        s.run(net)


def _sum_mul_rnn(scope="rnn"):
    """h_t = x_t * (x_t + h_{t-1}): a cell net of two ops."""
    model = ModelHelper(name="outer")
    x, h0 = model.net.AddExternalInputs("x", "h0")
    step = ModelHelper(name="step", param_model=model)
    x_t, h_prev = step.net.AddExternalInput("x_t", "h_prev")
    h_t = step.net.Mul([x_t, step.net.Sum([x_t, h_prev])])
    step.net.AddExternalOutput(h_t)
    outs = recurrent.recurrent_net(net=model.net, cell_net=step.net, inputs=[(x_t, x)],
                                   initial_cell_inputs=[(h_prev, h0)], links={h_prev: h_t}, scope=scope)
    return model, outs


def _sum_mul_ref(x, h0):
    h, hs = h0[0], []
    for t in range(x.shape[0]):
        h = x[t] * (x[t] + h)
        hs.append(h)
    return np.stack(hs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_two_op_cell_steps_over_the_sequence(backend):
    model, (h_all, h_last) = _sum_mul_rnn()
    x = RNG.randn(5, 3, 4).astype(np.float32)
    h0 = RNG.randn(1, 3, 4).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("h0", h0)
    _run(model.net, backend)
    want = _sum_mul_ref(x.astype(np.float64), h0.astype(np.float64))
    np.testing.assert_allclose(workspace.FetchBlob(h_all), want, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(h_last), want[-1:], rtol=1e-5)
    # the states, under Caffe2's name: the initial state, then every step's
    states = workspace.FetchBlob("rnn/h_prev_states")
    assert states.shape == (6, 3, 4)
    np.testing.assert_allclose(states[0], h0[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_of_inputs_and_initial_state_match_finite_differences(backend):
    model, (h_all, h_last) = _sum_mul_rnn()
    loss = model.net.SumElements(model.net.Sqr(h_all), "loss")
    grads = model.net.AddGradientOperators([loss])
    x = (RNG.rand(4, 2, 3) * 0.8 + 0.1).astype(np.float32)
    h0 = (RNG.rand(1, 2, 3) * 0.8 + 0.1).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("h0", h0)
    _run(model.net, backend)

    def f(xv, hv):
        return float((_sum_mul_ref(xv, hv) ** 2).sum())

    for name, value in (("x", x), ("h0", h0)):
        num = np.zeros(value.shape)
        for idx in np.ndindex(value.shape):
            vals = {"x": x.astype(np.float64), "h0": h0.astype(np.float64)}
            vals[name][idx] += 1e-4
            up = f(vals["x"], vals["h0"])
            vals[name][idx] -= 2e-4
            num[idx] = (up - f(vals["x"], vals["h0"])) / 2e-4
        np.testing.assert_allclose(workspace.FetchBlob(grads[name]), num, rtol=2e-3, atol=1e-4, err_msg=name)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _lstm_ref(p, x, h0, c0, lengths, forget_bias=0.0, drop_states=False):
    """Caffe2's LSTM: gates = x W_i2h^T + b_i2h + h W_rec^T + b_rec, blocks (i, f, o, g)."""
    h, c, hs, cs = h0[0], c0[0], [], []
    n = h.shape[-1]
    for t in range(x.shape[0]):
        g = x[t] @ p["i2h_w"].T + p["i2h_b"] + h @ p["gates_t_w"].T + p["gates_t_b"]
        i, f = _sigmoid(g[:, :n]), _sigmoid(g[:, n:2 * n] + forget_bias)
        o, gg = _sigmoid(g[:, 2 * n:3 * n]), np.tanh(g[:, 3 * n:])
        c_new = f * c + i * gg
        h_new = o * np.tanh(c_new)
        live = (lengths > t)[:, None]
        h = np.where(live, h_new, 0 if drop_states else h)
        c = np.where(live, c_new, 0 if drop_states else c)
        hs.append(h)
        cs.append(c)
    return np.stack(hs), np.stack(cs)


def _lstm_model(T, N, D, H, **kwargs):
    model = ModelHelper(name="lstm_model")
    outs = rnn_cell.LSTM(model, "x", "lengths", ["h0", "c0"], D, H, scope="lstm", **kwargs)
    workspace.FeedBlob("x", RNG.randn(T, N, D).astype(np.float32))
    workspace.FeedBlob("h0", RNG.randn(1, N, H).astype(np.float32) * 0.5)
    workspace.FeedBlob("c0", RNG.randn(1, N, H).astype(np.float32) * 0.5)
    return model, outs


def _params():
    return {k: workspace.FetchBlob(f"lstm/{k}").astype(np.float64)
            for k in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("drop_states", [False, True])
def test_lstm_matches_a_numpy_lstm_with_sequence_lengths(backend, drop_states):
    T, N, D, H = 5, 3, 4, 6
    model, (h_all, h_last, c_all, c_last) = _lstm_model(T, N, D, H, forget_bias=0.5, drop_states=drop_states)
    lengths = np.array([5, 2, 4], np.int32)
    workspace.FeedBlob("lengths", lengths)
    _run(model.param_init_net, backend)
    _run(model.net, backend)
    hs, cs = _lstm_ref(_params(), *(workspace.FetchBlob(b).astype(np.float64) for b in ("x", "h0", "c0")),
                       lengths, forget_bias=0.5, drop_states=drop_states)
    np.testing.assert_allclose(workspace.FetchBlob(h_all), hs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(c_all), cs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(h_last)[0], hs[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(c_last)[0], cs[-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_gradients_match_finite_differences(backend):
    T, N, D, H = 4, 2, 3, 3
    model, (h_all, *_) = _lstm_model(T, N, D, H, forget_bias=0.25)
    lengths = np.array([4, 3], np.int32)
    workspace.FeedBlob("lengths", lengths)
    loss = model.net.SumElements(model.net.Sqr(h_all), "loss")
    model.AddGradientOperators([loss])
    _run(model.param_init_net, backend)
    _run(model.net, backend)
    x, h0, c0 = (workspace.FetchBlob(b).astype(np.float64) for b in ("x", "h0", "c0"))
    p = _params()

    def f(p, x, h0, c0):
        return float((_lstm_ref(p, x, h0, c0, lengths, forget_bias=0.25)[0] ** 2).sum())

    eps = 1e-5
    for name in ("gates_t_w", "gates_t_b", "i2h_w"):
        num = np.zeros(p[name].shape)
        for idx in np.ndindex(p[name].shape):
            q = {k: v.copy() for k, v in p.items()}
            q[name][idx] += eps
            up = f(q, x, h0, c0)
            q[name][idx] -= 2 * eps
            num[idx] = (up - f(q, x, h0, c0)) / (2 * eps)
        got = workspace.FetchBlob(model.param_to_grad[core.BlobReference(f"lstm/{name}")])
        np.testing.assert_allclose(got, num, rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_lstm_layers_are_two_lstms_in_a_row(backend):
    """A stack under Caffe2's names: layer 0's input projection is ``deep/i2h_*`` (made
    before the loop), the rest ``deep/layer_<k>/...``."""
    T, N, D = 3, 2, 4
    model = ModelHelper(name="stacked")
    h_all, _, _, _ = rnn_cell.LSTM(model, "x", "lengths", ["h0", "c0", "h1", "c1"], D, [5, 3], scope="deep")
    x = RNG.randn(T, N, D).astype(np.float32)
    states = {n: (RNG.randn(1, N, d) * 0.3).astype(np.float32) for n, d in (("h0", 5), ("c0", 5), ("h1", 3),
                                                                            ("c1", 3))}
    lengths = np.array([3, 2], np.int32)
    for k, v in dict(states, x=x, lengths=lengths).items():
        workspace.FeedBlob(k, v)
    _run(model.param_init_net, backend)
    _run(model.net, backend)

    def layer(i):
        names = {"i2h_w": f"deep/layer_{i}/i2h_w" if i else "deep/i2h_w",
                 "i2h_b": f"deep/layer_{i}/i2h_b" if i else "deep/i2h_b",
                 "gates_t_w": f"deep/layer_{i}/gates_t_w", "gates_t_b": f"deep/layer_{i}/gates_t_b"}
        return {k: workspace.FetchBlob(n).astype(np.float64) for k, n in names.items()}
    low, _ = _lstm_ref(layer(0), x.astype(np.float64), states["h0"], states["c0"], lengths)
    top, _ = _lstm_ref(layer(1), low, states["h1"], states["c1"], lengths)
    np.testing.assert_allclose(workspace.FetchBlob(h_all), top, rtol=1e-5, atol=1e-6)
    assert not workspace.HasBlob("deep/layer_0/i2h_w")


def _feed_params_by_name(model):
    """Every parameter, in order of its name, set to a pattern: the i-th gets
    (k % (5 + i)) / (5 + i) - 0.45 at flat position k (the programs run on Caffe2 do the same)."""
    for i, p in enumerate(sorted(str(p) for p in model.params)):
        shape = workspace.FetchBlob(p).shape
        values = (np.arange(int(np.prod(shape))) % (5 + i)) / (5.0 + i) - 0.45
        workspace.FeedBlob(p, values.astype(np.float32).reshape(shape))


def _check_figures(figures):
    for blob, (total, size, head) in figures.items():
        got = workspace.FetchBlob(blob).ravel().astype(np.float64)
        np.testing.assert_allclose([got.sum(), np.abs(got).sum()], [total, size], rtol=1e-5, atol=1e-7, err_msg=blob)
        np.testing.assert_allclose(got[:3], head, rtol=1e-5, atol=1e-7, err_msg=blob)


def _stacked(kind, backend):
    """Two layers (3 then 2 units) over x [4, 3, 2], the states fed, the parameters set by
    their (Caffe2) names, loss = sum of the top layer's hidden_all squared."""
    T, N, D, dims = 4, 3, 2, [3, 2]
    model = ModelHelper(name="m")
    states = []
    for i, d in enumerate(dims):
        for j in range(2 if kind == "lstm" else 1):
            states.append(f"s{i}{j}")
            values = ((np.arange(N * d) + 3 * i + j) % 5) / 5.0 - 0.3
            workspace.FeedBlob(states[-1], values.astype(np.float32).reshape(1, N, d))
    if kind == "lstm":
        outs = rnn_cell.LSTM(model, "x", "lengths", states, D, dims, scope="r", return_last_layer_only=False,
                             forget_bias=0.5)
    else:
        outs = rnn_cell.BasicRNN(model, "x", None, states, D, dims, scope="r", return_last_layer_only=False,
                                 activation="tanh")
    loss = model.net.SumElements(model.net.Sqr(outs[len(outs) // 2]), "loss")
    model.AddGradientOperators([loss])
    workspace.FeedBlob("x", ((np.arange(T * N * D) % 7) / 7.0 - 0.4).astype(np.float32).reshape(T, N, D))
    workspace.FeedBlob("lengths", np.array([4, 2, 3], np.int32))
    _run(model.param_init_net, backend)
    _feed_params_by_name(model)
    _run(model.net, backend)
    return model, outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stacked_lstm_set_by_caffe2s_parameter_names_gives_caffe2s_values(backend):
    """Figures read off the real Caffe2 (torch 1.10.2's caffe2): this program (rnn_cell.LSTM
    with dim_out=[3, 2], scope "r", return_last_layer_only=False; parameters set in order of
    their names) run there through shared/tools/caffe2-ref/run.sh, blobs printed as
    (sum, sum of |.|, first three). Caffe2 steps both layers in one RecurrentNetwork op and
    names layer 0's input projection r/i2h_*: dslc used to name it r/layer_0/i2h_*, so
    the weights fed by Caffe2's names were never read."""
    model, outs = _stacked("lstm", backend)
    assert sorted(str(p) for p in model.params) == [
        "r/i2h_b", "r/i2h_w", "r/layer_0/gates_t_b", "r/layer_0/gates_t_w", "r/layer_1/gates_t_b",
        "r/layer_1/gates_t_w", "r/layer_1/i2h_b", "r/layer_1/i2h_w"]
    assert [str(b) for b in outs] == [f"r/layer_{i}/{s}_{k}" for i in (0, 1) for s in ("hidden_state", "cell_state")
                                      for k in ("all", "last")]
    _check_figures({
        "r/layer_0/hidden_state_all": (-0.15818781219, 2.9122090321, [0.0577238053, -0.0505138822, 0.0354808010]),
        "r/layer_1/hidden_state_all": (2.5428973902, 2.5716912169, [0.1563084722, -0.0143969133, 0.0287756752]),
        "r/layer_1/cell_state_last": (1.3292741776, 1.3292741776, [0.1608628482, 0.2611467242, 0.1027367860]),
        "r/i2h_w_grad": (0.027393493201, 0.033820567140, [5.602203237e-05, 0.00016551259614, -0.0007348723011]),
        "r/i2h_b_grad": (0.13789615256, 0.19659000, [0.00095518119633, -0.011606233194, -0.0063184872270]),
        "r/layer_0/gates_t_w_grad": (0.025345661765, 0.045160650741, [0.00033037178218, 0.00021350212046,
                                                                      -9.059051808e-05]),
        "r/layer_1/i2h_w_grad": (0.019097671960, 0.29305625067, [0.0044426443055, -0.0050186114386, 0.00061813136563]),
        "r/layer_1/gates_t_w_grad": (0.39924640674, 0.39924640674, [0.0047452291474, 0.0095902848989,
                                                                     0.0091354064643]),
        "x_grad": (0.050832261099, 0.054842524463, [0.0022712722421, 0.0032949864399, -0.0010557568166]),
        "s01_grad": (0.10646659438, 0.11308369297, [-0.0033085492905, 0.0053972210735, 0.0091225504875]),
    })


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stacked_basic_rnn_gives_caffe2s_values(backend):
    """As above with rnn_cell.BasicRNN (tanh, no lengths). Caffe2 counts four outputs per
    layer whatever the cell, so its default outputs_with_grads points past a BasicRNN stack's
    top layer and its gradient fails; the figures were read with outputs_with_grads=(-2,)
    (= the top layer's hidden_all there). dslc counts the cell's own outputs, so the default
    is that output."""
    model, outs = _stacked("basic", backend)
    assert [str(b) for b in outs] == ["r/layer_0/hidden_t_all", "r/layer_0/hidden_t_last", "r/layer_1/hidden_t_all",
                                      "r/layer_1/hidden_t_last"]
    _check_figures({
        "r/layer_1/hidden_t_all": (-7.4470269904, 7.6848348603, [-0.5971065164, -0.5950350165, -0.2300854325]),
        "r/i2h_w_grad": (-0.48737472109, 0.75638781302, [-0.29818296433, -0.016328653321, -0.15765227377]),
        "r/layer_0/gates_t_w_grad": (-1.9059602618, 1.9686733037, [-0.4683477282, -0.4460389912, -0.1869171709]),
        "r/layer_1/i2h_w_grad": (13.223840594, 13.223840594, [1.451453686, 1.251560092, 0.8074607849]),
        "x_grad": (-0.75962444115, 1.0297187781, [-0.19447633624, -0.015707939863, -0.023824250326]),
        "s00_grad": (-0.42662051506, 0.57685751654, [-0.15845154226, -0.024375244975, -0.16128453612]),
    })


def test_a_stack_makes_caffe2s_blobs():
    """Read off the real Caffe2: rnn_cell.LSTM(model, "x", "sl", None, 4, [5, 3], scope="r")
    run there, its params, init net outputs and RecurrentNetwork op printed. Without initial
    states each layer's come from its initializer, under the layer's scope."""
    model = ModelHelper(name="m")
    rnn_cell.LSTM(model, "x", "sl", None, 4, [5, 3], scope="r")
    want = ["r/i2h_b", "r/i2h_w", "r/layer_0/gates_t_b", "r/layer_0/gates_t_w", "r/layer_0/initial_cell_state",
            "r/layer_0/initial_hidden_state", "r/layer_1/gates_t_b", "r/layer_1/gates_t_w", "r/layer_1/i2h_b",
            "r/layer_1/i2h_w", "r/layer_1/initial_cell_state", "r/layer_1/initial_hidden_state"]
    assert sorted(str(p) for p in model.params) == want
    assert sorted(o for op in model.param_init_net.Proto().op for o in op.output) == want
    fc, rec = model.net.Proto().op
    assert (fc.type, list(fc.input), list(fc.output)) == ("FC", ["x", "r/i2h_w", "r/i2h_b"], ["r/i2h"])
    assert rec.type == "RecurrentNetwork"
    assert list(rec.input) == [
        "r/i2h", "r/layer_0/initial_hidden_state", "r/layer_0/initial_cell_state", "r/layer_1/initial_hidden_state",
        "r/layer_1/initial_cell_state", "r/layer_0/gates_t_w", "r/layer_0/gates_t_b", "sl", "r/layer_1/i2h_w",
        "r/layer_1/i2h_b", "r/layer_1/gates_t_w", "r/layer_1/gates_t_b"]
    assert list(rec.output) == [f"r/layer_{i}/{s}_{k}" for i in (0, 1) for s in ("hidden_state", "cell_state")
                                for k in ("all", "last")] + ["r/step_workspaces"]


def test_an_unnamed_stack_has_caffe2s_names_and_return_params_names_the_top_layer():
    """Read off the real Caffe2: rnn_cell.LSTM(model, "x", "sl", None, 4, [5, 3]) with no
    scope; its recurrent_states argument names "None/layer_<k>/..." states (Caffe2 formats
    the missing name). With return_params Caffe2 fails on a stack (MultiRNNCell has no
    get_input_params); dslc names the top layer's parameters."""
    model = ModelHelper(name="m")
    *outs, params = rnn_cell.LSTM(model, "x", "sl", None, 4, [5, 3], return_params=True)
    assert sorted(str(p) for p in model.params) == [
        "i2h_b", "i2h_w", "layer_0/gates_t_b", "layer_0/gates_t_w", "layer_0/initial_cell_state",
        "layer_0/initial_hidden_state", "layer_1/gates_t_b", "layer_1/gates_t_w", "layer_1/i2h_b", "layer_1/i2h_w",
        "layer_1/initial_cell_state", "layer_1/initial_hidden_state"]
    rec = model.net.Proto().op[-1]
    states = next(list(a.strings) for a in rec.arg if a.name == "recurrent_states")
    assert states == [f"m/recurrent/None/layer_{i}/{s}_t_prev_states".encode() for i in (0, 1)
                      for s in ("hidden", "cell")]
    assert [str(b) for b in outs] == [f"layer_1/{s}_{k}" for s in ("hidden_state", "cell_state")
                                      for k in ("all", "last")]
    assert params == {"input": {"weights": "layer_1/i2h_w", "biases": "layer_1/i2h_b"},
                      "recurrent": {"weights": "layer_1/gates_t_w", "biases": "layer_1/gates_t_b"}}


def test_a_single_lstm_without_initial_states_makes_them_as_parameters():
    """Read off the real Caffe2 (as above, dim_out=5): zero-filled r/initial_hidden_state and
    r/initial_cell_state of shape [5] are parameters made in the init net."""
    model = ModelHelper(name="m")
    h_all, *_ = rnn_cell.LSTM(model, "x", None, None, 2, 5, scope="r")
    assert sorted(str(p) for p in model.params) == ["r/gates_t_b", "r/gates_t_w", "r/i2h_b", "r/i2h_w",
                                                    "r/initial_cell_state", "r/initial_hidden_state"]
    workspace.FeedBlob("x", np.ones((3, 1, 2), np.float32))
    workspace.RunNetOnce(model.param_init_net)
    np.testing.assert_array_equal(workspace.FetchBlob("r/initial_hidden_state"), np.zeros(5, np.float32))
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob(h_all).shape == (3, 1, 5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_residual_layers_of_a_multi_rnn_cell(backend):
    """MultiRNNCell with three LSTM layers of 3 units, layers 1 and 2 residual: the output is
    the sum of all three layers' hidden_all. Forward figures read off the real Caffe2 (the
    same program run there, parameters set by name). The gradient passes back through the
    top layer's output only (outputs_with_grads' default); it is checked here against
    finite differences of sum(G * top hidden_all), G = 2 * output held fixed. Caffe2's own
    gradient misses part of it (its res/layer_1/initial_cell_state_grad starts -0.012049
    where its own finite differences give -0.012341): docs/differences.md."""
    T, N, D, H = 3, 2, 3, 3
    model = ModelHelper(name="m")
    cells = [rnn_cell.LSTMCell(input_size=D if i == 0 else H, hidden_size=H, forget_bias=0.0,
                               memory_optimization=False) for i in range(3)]
    multi = rnn_cell.MultiRNNCell(cells, name="res", residual_output_layers=[1, 2])
    out, _ = multi.apply_over_sequence(model, "x", None, initial_states=None)
    assert str(out) == "res/residual_output_sequence"
    loss = model.net.SumElements(model.net.Sqr(out), "loss")
    model.AddGradientOperators([loss])
    workspace.FeedBlob("x", ((np.arange(T * N * D) % 7) / 7.0 - 0.4).astype(np.float32).reshape(T, N, D))
    _run(model.param_init_net, backend)
    _feed_params_by_name(model)
    _run(model.net, backend)
    _check_figures({str(out): (-1.3921655836, 2.4328007968, [-0.1644265354, -0.1874642074, -0.3850680888])})
    grad = workspace.FetchBlob("res/layer_1/initial_cell_state_grad").astype(np.float64)
    g_top = 2 * workspace.FetchBlob(str(out)).astype(np.float64)
    h0 = workspace.FetchBlob("res/layer_1/initial_cell_state")

    def f(v):
        workspace.FeedBlob("res/layer_1/initial_cell_state", v.astype(np.float32))
        workspace.RunNetOnce(model.net)
        return float((g_top * workspace.FetchBlob("res/layer_2/hidden_state_all")).sum())
    eps = 1e-2
    num = np.array([(f(h0 + eps * e) - f(h0 - eps * e)) / (2 * eps) for e in np.eye(H, dtype=np.float64)])
    np.testing.assert_allclose(grad, num, rtol=2e-3, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_basic_rnn_with_tanh(backend):
    T, N, D, H = 4, 3, 2, 5
    model = ModelHelper(name="basic")
    h_all, h_last = rnn_cell.BasicRNN(model, "x", None, ["h0"], D, H, scope="rnn", activation="tanh")
    x = RNG.randn(T, N, D).astype(np.float32)
    h0 = RNG.randn(1, N, H).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("h0", h0)
    _run(model.param_init_net, backend)
    _run(model.net, backend)
    w = {k: workspace.FetchBlob(f"rnn/{k}").astype(np.float64) for k in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
    h, want = h0[0].astype(np.float64), []
    for t in range(T):
        h = np.tanh(x[t] @ w["i2h_w"].T + w["i2h_b"] + h @ w["gates_t_w"].T + w["gates_t_b"])
        want.append(h)
    np.testing.assert_allclose(workspace.FetchBlob(h_all), np.stack(want), rtol=1e-5, atol=1e-6)


def _basic_rnn_ref(w, x, h0, lengths):
    h, out = h0[0], []
    for t in range(x.shape[0]):
        new = np.tanh(x[t] @ w["i2h_w"].T + w["i2h_b"] + h @ w["gates_t_w"].T + w["gates_t_b"])
        h = np.where((lengths > t)[:, None], new, h)
        out.append(h)
    return np.stack(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_basic_rnn_with_sequence_lengths_trains(backend):
    """Values read off the real Caffe2 (this program there with forward_only=True: Caffe2
    cannot build this cell's gradient, its step overwrites the activation the mask's Mul
    needs). dslc builds it (it used to fail as Caffe2 does); the gradients match finite
    differences of a numpy BasicRNN."""
    T, N, D, H = 3, 3, 2, 2
    model = ModelHelper(name="m")
    h_all, _ = rnn_cell.BasicRNN(model, "x", "lengths", ["h0"], D, H, scope="rnn", activation="tanh")
    loss = model.net.SumElements(model.net.Sqr(h_all), "loss")
    model.AddGradientOperators([loss])
    x = ((np.arange(T * N * D) % 7) / 7.0 - 0.4).astype(np.float32).reshape(T, N, D)
    h0 = ((np.arange(N * H) % 5) / 5.0 - 0.3).astype(np.float32).reshape(1, N, H)
    lengths = np.array([3, 1, 2], np.int32)
    for k, v in dict(x=x, h0=h0, lengths=lengths).items():
        workspace.FeedBlob(k, v)
    _run(model.param_init_net, backend)
    _feed_params_by_name(model)
    _run(model.net, backend)
    np.testing.assert_allclose(workspace.FetchBlob(h_all).ravel()[:8],  # Caffe2
                               [-0.4406967759132385, -0.40352892875671387, -0.7564470767974854, -0.4877435863018036,
                                -0.8394433856010437, -0.5969102382659912, -0.5804013013839722, -0.5279749631881714],
                               rtol=1e-6)
    w = {k: workspace.FetchBlob(f"rnn/{k}").astype(np.float64) for k in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
    np.testing.assert_allclose(workspace.FetchBlob(h_all), _basic_rnn_ref(w, x, h0, lengths), rtol=1e-5, atol=1e-6)
    eps = 1e-6
    for name in ("gates_t_w", "i2h_b"):
        num = np.zeros(w[name].shape)
        for idx in np.ndindex(w[name].shape):
            vals = []
            for sign in (1, -1):
                q = {k: v.copy() for k, v in w.items()}
                q[name][idx] += sign * eps
                vals.append(float((_basic_rnn_ref(q, x, h0, lengths) ** 2).sum()))
            num[idx] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(workspace.FetchBlob(f"rnn/{name}_grad"), num, rtol=1e-3, atol=1e-4, err_msg=name)


LOOP_IR = """\
      %h_prev_states = Concat(%h0, %7) {axis = 0} : f32[?,2,3]
      store @"rnn/h_prev_states"(%h_prev_states)
      %8 = for(%2, %2) : i64 {
      ^(%t: i64, %n: i64):
        %x_1 = load @"x" : f32[?,2,3]
        %9 = ExpandDims(%t) {dims = [0]} : i64[1]
        %x_t_rnn1 = Gather(%x_1, %9) : f32[1,2,3]
        %h_prev_states_1 = load @"rnn/h_prev_states" : f32[?,2,3]
        %10 = ExpandDims(%t) {dims = [0]} : i64[1]
        %h_prev_rnn1 = Gather(%h_prev_states_1, %10) : f32[1,2,3]
        %Sum_rnn1 = Sum(%x_t_rnn1, %h_prev_rnn1) : f32[1,2,3]
        %Mul_rnn1 = Mul(%x_t_rnn1, %Sum_rnn1) : f32[1,2,3]
        %11 = Const {value = dense<i64: 1>} : i64
        %12 = Add(%t, %11) : i64
        %13 = ExpandDims(%12) {dims = [0]} : i64[1]
        %h_prev_states_2 = ScatterAssign(%h_prev_states_1, %13, %Mul_rnn1) : f32[?,2,3]
        store @"rnn/h_prev_states"(%h_prev_states_2)
        yield(%n)
      }
      %h_prev_states_3 = load @"rnn/h_prev_states" : f32[?,2,3]
      %Mul_all = Slice(%h_prev_states_3) {starts = [1], ends = [-1]} : f32[?,2,3]
      %Mul_last = Slice(%h_prev_states_3) {starts = [-2], ends = [-1]} : f32[?,2,3]
"""


def test_the_recurrent_op_lowers_to_a_for_loop_over_time():
    """The lowered IR (before any pass): the states made once, one loop of the cell's ops
    reading row t and writing row t + 1, the outputs sliced from the states."""
    from dslc.ir import parse, print_module
    from dslc.ir.types import TensorType
    from dslc.lower import lower_group

    model, _ = _sum_mul_rnn()
    existing = {"x": TensorType("f32", (None, 2, 3)), "h0": TensorType("f32", (1, 2, 3))}
    text = print_module(lower_group(LocalSession.as_group(model.net), "", existing))
    assert print_module(parse(text)) == text
    plain = re.sub(r"  loc\([^)]*\)", "", text)
    assert LOOP_IR in plain, plain


def test_a_step_net_reading_an_unlinked_blob_is_a_located_error():
    model = ModelHelper(name="bad")
    step = ModelHelper(name="step", param_model=model)
    x_t, h_prev = step.net.AddExternalInput("x_t", "h_prev")
    h_t = step.net.Add([x_t, h_prev])
    step.net.Mul([h_t, "nowhere"], "out")  # a blob neither linked nor an input of the op
    step.net.AddExternalOutput("out")
    recurrent.recurrent_net(net=model.net, cell_net=step.net, inputs=[(x_t, "x")],
                            initial_cell_inputs=[(h_prev, "h0")], links={h_prev: "out"})
    workspace.FeedBlob("x", np.ones((2, 1, 1), np.float32))
    workspace.FeedBlob("h0", np.ones((1, 1, 1), np.float32))
    with pytest.raises(DSLError) as err:
        workspace.RunNetOnce(model.net)
    assert "nowhere" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_values_and_gradients_match_caffe2(backend):
    """Figures read off the real Caffe2 (torch 1.10.2's caffe2): this program run there with
    its imports renamed back, the blobs printed with .tolist()."""
    T, N, D, H = 4, 3, 2, 3
    model = ModelHelper(name="m")
    h_all, _, _, c_last = rnn_cell.LSTM(model, "x", "lengths", ["h0", "c0"], D, H, scope="lstm", forget_bias=0.5)
    loss = model.net.SumElements(model.net.Sqr(h_all), "loss")
    model.AddGradientOperators([loss])
    x = ((np.arange(T * N * D) % 7) / 7.0 - 0.4).astype(np.float32).reshape(T, N, D)
    h0 = ((np.arange(N * H) % 5) / 5.0 - 0.3).astype(np.float32).reshape(1, N, H)
    c0 = ((np.arange(N * H) % 3) / 3.0 - 0.2).astype(np.float32).reshape(1, N, H)
    for k, v in dict(x=x, h0=h0, c0=c0, lengths=np.array([4, 2, 3], np.int32)).items():
        workspace.FeedBlob(k, v)
    _run(model.param_init_net, backend)
    for i, p in enumerate(["lstm/i2h_w", "lstm/i2h_b", "lstm/gates_t_w", "lstm/gates_t_b"]):
        shape = workspace.FetchBlob(p).shape
        values = (np.arange(int(np.prod(shape))) % (5 + i)) / (5.0 + i) - 0.45
        workspace.FeedBlob(p, values.astype(np.float32).reshape(shape))
    _run(model.net, backend)
    caffe2 = {  # blob: (sum, sum of |.|, first three values)
        str(h_all): (1.0077562229707837, 3.7857425855472684,
                     [-0.13791239261627197, 0.10748828202486038, 0.1572669893503189]),
        str(c_last): (0.7380664572119713, 2.2182012870907784,
                      [-0.20195159316062927, -0.0371377095580101, 0.36440181732177734]),
        "lstm/gates_t_w_grad": (0.23503587674349546, 0.7526807561516762,
                                [-0.0146018136292696, 0.011393554508686066, 0.01650126837193966]),
        "lstm/i2h_w_grad": (-0.1360234902240336, 0.22106651635840535,
                            [-0.00899002980440855, -0.0073107280768454075, -0.009234928525984287]),
        "h0_grad": (0.05823145620524883, 0.25220980681478977,
                    [-0.03645124286413193, 0.06134107708930969, 0.0011391490697860718]),
        "c0_grad": (0.4999385252594948, 1.5042154267430305,
                    [-0.1642688363790512, 0.1281566470861435, 0.1808987259864807]),
        "x_grad": (-0.7773161865770817, 0.7773161865770817,
                   [-0.0697563886642456, -0.042752377688884735, -0.06721270084381104]),
    }
    for blob, (total, size, head) in caffe2.items():
        got = workspace.FetchBlob(blob).ravel().astype(np.float64)
        np.testing.assert_allclose([got.sum(), np.abs(got).sum()], [total, size], rtol=1e-5, atol=1e-7, err_msg=blob)
        np.testing.assert_allclose(got[:3], head, rtol=1e-5, atol=1e-7, err_msg=blob)


@pytest.mark.parametrize("window", [1, 3])
def test_a_link_window_reads_past_states_including_the_row_its_step_wrote(window):
    """A convolution over time as Caffe2's RecurrentNetwork test builds it: the input state
    starts with window - 1 zero rows; step t writes x_t at row t + window - 1, then reads
    rows t .. t + window - 1 (its own row included, as Caffe2's views see it) and sums
    them. So out[t] = x[t - window + 1] + ... + x[t] (zeros before 0), by numpy."""
    T, N, H = 5, 2, 3
    x = np.arange(T * N * H, dtype=np.float32).reshape(T, N, H) / 10
    model = ModelHelper(name="conv_in_time")
    step = ModelHelper(name="conv_step", param_model=model)
    x_t, _, window_t = step.net.AddExternalInputs("x_t", "timestep", "window_t")
    state_t = step.net.Copy(x_t, "state_t")
    summed = step.net.ExpandDims(step.net.ReduceFrontSum(window_t, "summed2d"), "summed", dims=[0])
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("init_in", np.zeros((window - 1, N, H), np.float32))
    workspace.FeedBlob("init_out", np.zeros((1, N, H), np.float32))
    model.net.RecurrentNetwork(
        ["x", "init_in", "init_out"], ["in_all", "out_all", "step_ws"],
        alias_src=["in_state", "out_state"], alias_dst=["in_all", "out_all"], alias_offset=[window - 1, 1],
        recurrent_states=["in_state", "out_state"], initial_recurrent_state_ids=[1, 2],
        link_internal=["x_t", str(window_t), str(state_t), str(summed)],
        link_external=["x", "in_state", "in_state", "out_state"],
        link_offset=[0, 0, window - 1, 1], link_window=[1, window, 1, 1],
        step_net=step.net.Proto(), timestep="timestep", outputs_with_grads=[],
        backward_link_internal=[], backward_link_external=[], backward_link_offset=[], param=[])
    workspace.RunNetOnce(model.net)
    padded = np.concatenate([np.zeros((window - 1, N, H), np.float32), x])
    want = np.stack([padded[t:t + window].sum(axis=0) for t in range(T)])
    np.testing.assert_allclose(workspace.FetchBlob("out_all"), want, rtol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("in_all"), x)
