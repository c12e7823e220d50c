"""Recurrent networks: Caffe2's RecurrentNetwork (a step net run over time) with its
gradient, and the LSTM cell op its LSTMs step with.

``RecurrentNetwork`` and ``RecurrentNetworkGradient`` hold nets in their arguments, as
Caffe2's do; they never reach the IR. The lowering (dslc/lower/recurrent.py) expands
each into a ``for`` loop over time whose body is the step net's ops, so passes and
backends see ordinary loops of ordinary ops:

    RecurrentNetwork(input [T, N, D], init [1, N, H], W...; step_net=...)
      -> states = Concat(init, zeros [T, N, H])
         for t in 0..T: input_t = Gather(input, t); prev = Gather(states, t)
                        <step net ops>; states = ScatterAssign(states, t + 1, output_t)
         output_all = states[1:], output_last = states[T:]

Arguments are Caffe2's (``dslc.recurrent.recurrent_net`` writes them): ``step_net``,
``recurrent_states``, ``initial_recurrent_state_ids``, ``link_internal`` /
``link_external`` / ``link_offset`` (+ ``link_window``), ``alias_src`` / ``alias_dst`` /
``alias_offset``, ``timestep``, ``param`` (the inputs that get gradients). The gradient
recomputes each step's forward ops, then runs their gradient ops, from the last step
back to the first; nothing per step is kept between the passes.

    LSTMUnit(hidden_prev [1, N, D], cell_prev [1, N, D], gates [1, N, 4D], seq_lengths [N],
             timestep [1]) -> hidden [1, N, D], cell [1, N, D]
    i, f, o = sigmoid(gates[..., :D], gates[..., D:2D] + forget_bias, gates[..., 2D:3D]),
    g = tanh(gates[..., 3D:]); cell = f cell_prev + i g; hidden = o tanh(cell)
    (a sequence already ended at ``timestep``: its previous state, or zeros if drop_states)
"""
from __future__ import annotations

import numpy as np

from ..gradients import GradOp, gradient, no_gradient
from ..opdef import PURE, declare, type_error
from ..types import INT_DTYPES
from .ids import checked
from .infer import lowered_away, tensors
from .nn import floats

# --- the net-holding ops (expanded by the lowering)

_WHERE = "dslc/lower/recurrent.py"
RNN_ATTRS = {"step_net": None, "recurrent_states": [], "initial_recurrent_state_ids": [],
             "link_internal": [], "link_external": [], "link_offset": [], "link_window": [],
             "alias_src": [], "alias_dst": [], "alias_offset": [], "timestep": "timestep", "param": [],
             "param_grads": [], "backward_step_net": None, "backward_link_internal": [],
             "backward_link_external": [], "backward_link_offset": [], "outputs_with_grads": [0],
             "recompute_blobs_on_backward": [], "enable_rnn_executor": 0, "grad_outputs": []}


declare("RecurrentNetwork", (1, None), lowered_away("RecurrentNetwork", _WHERE), results=(1, None), attrs=dict(RNN_ATTRS),
        doc="runs step_net once per time step over the inputs' first axis, carrying the recurrent "
            "states (expanded by the lowering into a for loop of the step net's ops)")
declare("RecurrentNetworkGradient", (1, None), lowered_away("RecurrentNetworkGradient", _WHERE), results=(1, None),
        attrs=dict(RNN_ATTRS),
        doc="gradients of RecurrentNetwork's sequence inputs, initial states and parameters, stepping "
            "back over time (expanded by the lowering into a for loop)")
no_gradient("RecurrentNetworkGradient")


@gradient("RecurrentNetwork")
def _(g):
    """Inputs: the gradients of the aliased outputs in ``outputs_with_grads`` that have one
    (``grad_outputs`` lists which), then the
    forward op's inputs, then its aliased outputs (the states are rebuilt from them).
    Outputs: the gradients of the sequence inputs, the initial states and ``param``."""
    n_alias = len(g.args.get("alias_dst", ()))
    # (as Caffe2's: only the outputs ``outputs_with_grads`` names pass their gradients back)
    with_grads = {int(k) for k in g.args.get("outputs_with_grads", (0,))}
    have = [k for k in range(n_alias) if g.GO[k] is not None and k in with_grads]
    wanted = grad_inputs(g.args, len(g.I))
    args = dict(g.args, grad_outputs=have)
    return [GradOp("RecurrentNetworkGradient", [g.GO[k] for k in have] + list(g.I) + list(g.O[:n_alias]),
                   [g.GI[k] for k in wanted], args)]


def grad_inputs(args, n_inputs) -> list:
    """The forward inputs that get a gradient: sequences (linked, not states), initial
    states, then ``param``, in input order."""
    states = set(args.get("recurrent_states", ()))
    init = set(args.get("initial_recurrent_state_ids", ()))
    return sorted(init | set(args.get("param", ())) | set(sequence_inputs(args, n_inputs, states)))


def sequence_inputs(args, n_inputs, states) -> list:
    """Indices of the inputs linked into the step net one step at a time (not states):
    Caffe2's recurrent_net puts them first, ``link_external`` names them as ``input`` blobs."""
    init = set(args.get("initial_recurrent_state_ids", ()))
    n_seq = n_inputs
    for k in sorted(init) + list(args.get("param", ())):
        n_seq = min(n_seq, k)
    return [k for k in range(n_seq) if k not in init]


# --- ScatterAssign: one step's value written into the states (also Caffe2's op)

def _scatter_assign(types, attrs, n):
    data, idx, slices = tensors("ScatterAssign", types)
    if idx.dtype is not None and idx.dtype not in INT_DTYPES:
        type_error(f"ScatterAssign indices must be integers, got {idx.dtype}", "Cast them to int32 or int64")
    if data.dtype is not None and slices.dtype is not None and data.dtype != slices.dtype:
        type_error(f"ScatterAssign slices are {slices.dtype}, the data {data.dtype}", "Cast the slices first")
    if None not in (data.shape, idx.shape, slices.shape) and len(data.shape) > 0:
        want = tuple(idx.shape) + tuple(data.shape[1:])
        if len(want) != len(slices.shape) or any(a is not None and b is not None and a != b
                                                 for a, b in zip(want, slices.shape)):
            type_error(f"ScatterAssign slices have shape {list(slices.shape)}, indices {list(idx.shape)} of "
                       f"data {list(data.shape)} need {list(want)}", "one data row per index")
    return [data]


declare("ScatterAssign", 3, _scatter_assign, traits={PURE},
        doc="DATA with rows INDICES replaced by SLICES (Caffe2 writes DATA in place; here a new value)")
no_gradient("ScatterAssign")


def scatter_assign(data, indices, slices):
    idx = checked("ScatterAssign", indices, data.shape[0], wrap=True)
    out = data.copy()
    out[idx] = slices
    return out


# --- LSTMUnit

LSTM_ATTRS = {"forget_bias": 0.0, "drop_states": 0, "sequence_lengths": 1}


def _lstm_unit(types, attrs, n):
    ts = tensors("LSTMUnit", types)
    h, c, gates = floats("LSTMUnit", ts, 3)[:3]
    want = 5 if attrs.get("sequence_lengths", 1) else 4
    if len(ts) != want:
        type_error(f"LSTMUnit takes {want} inputs (hidden_prev, cell_prev, gates, "
                   f"{'seq_lengths, ' if want == 5 else ''}timestep), got {len(ts)}",
                   "pass seq_lengths unless sequence_lengths=0")
    if gates.shape is not None and c.shape is not None and None not in (gates.shape[-1:] + c.shape[-1:]) \
            and gates.shape[-1] != 4 * c.shape[-1]:
        type_error(f"LSTMUnit gates have {gates.shape[-1]} columns for a state of {c.shape[-1]}",
                   "gates hold 4 blocks (input, forget, output, cell) of the state's size")
    return [h, c]


declare("LSTMUnit", (4, 5), _lstm_unit, results=2, attrs=dict(LSTM_ATTRS), traits={PURE},
        doc="one LSTM step: (hidden, cell) from (hidden_prev, cell_prev, gates [.., 4D], "
            "seq_lengths, timestep); gates are input, forget, output, cell")


@gradient("LSTMUnit")
def _(g):
    # both outputs' gradients, as Caffe2's maker takes them: a loss that reads only one of
    # them says the other's is zero with ZeroGradient (Caffe2 refuses the net without it)
    for k in range(2):
        if g.GO[k] is None:
            type_error(f"LSTMUnit's gradient needs the gradient of its output {g.O[k]!r} too, and no loss "
                       "depends on it", f"add net.ZeroGradient({g.O[k]!r}, []) after the LSTMUnit: its gradient "
                       "is then zero")
    return [GradOp("LSTMUnitGradient", list(g.I) + list(g.O[:2]) + list(g.GO[:2]), [g.GI[0], g.GI[1], g.GI[2]],
                   g.pick(*LSTM_ATTRS))]


declare("LSTMUnitGradient", (8, 9), lambda t, a, n: [tensors("LSTMUnitGradient", t)[k] for k in range(3)],
        results=3, attrs=dict(LSTM_ATTRS), traits={PURE},
        doc="(dhidden_prev, dcell_prev, dgates) of LSTMUnit from its inputs, outputs and their gradients")
no_gradient("LSTMUnitGradient")


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_parts(c_prev, gates, forget_bias):
    d = c_prev.shape[-1]
    i = _sigmoid(gates[..., :d])
    f = _sigmoid(gates[..., d:2 * d] + forget_bias)
    o = _sigmoid(gates[..., 2 * d:3 * d])
    g = np.tanh(gates[..., 3 * d:])
    c = f * c_prev + i * g
    return i, f, o, g, c


def _valid(c_prev, inputs, sequence_lengths):
    """Per batch row, whether its sequence is still running at this timestep (broadcastable)."""
    if not sequence_lengths:
        return None
    lengths, t = inputs
    t = int(np.asarray(t).reshape(-1)[0])
    n = c_prev.shape[-2] if c_prev.ndim >= 2 else 1
    return (np.asarray(lengths).reshape(-1)[:n] > t).reshape((n, 1))


def lstm_unit(h_prev, c_prev, gates, *rest, forget_bias=0.0, drop_states=0, sequence_lengths=1):
    _, _, o, _, c = _lstm_parts(c_prev, gates, forget_bias)
    h = o * np.tanh(c)
    valid = _valid(c_prev, rest, sequence_lengths)
    if valid is not None:
        h = np.where(valid, h, 0 if drop_states else h_prev)
        c = np.where(valid, c, 0 if drop_states else c_prev)
    return h.astype(h_prev.dtype, copy=False), c.astype(c_prev.dtype, copy=False)


def lstm_unit_grad(h_prev, c_prev, gates, *rest, forget_bias=0.0, drop_states=0, sequence_lengths=1):
    *lens, h, c, dh, dc = rest
    i, f, o, g, c_new = _lstm_parts(c_prev, gates, forget_bias)
    tc = np.tanh(c_new)
    dc_total = dc + dh * o * (1 - tc * tc)
    do = dh * tc
    di, df, dg = dc_total * g, dc_total * c_prev, dc_total * i
    dgates = np.concatenate([di * i * (1 - i), df * f * (1 - f), do * o * (1 - o), dg * (1 - g * g)], axis=-1)
    dc_prev = dc_total * f
    dh_prev = np.zeros_like(h_prev)
    valid = _valid(c_prev, lens, sequence_lengths)
    if valid is not None:  # an ended sequence passes its state (and gradient) through, or drops it
        dgates = np.where(valid, dgates, 0)
        dc_prev = np.where(valid, dc_prev, 0 if drop_states else dc)
        dh_prev = np.where(valid, dh_prev, 0 if drop_states else dh)
    dt = h_prev.dtype
    return dh_prev.astype(dt, copy=False), dc_prev.astype(dt, copy=False), dgates.astype(dt, copy=False)


FUNCTIONS = {"ScatterAssign": scatter_assign, "LSTMUnit": lstm_unit, "LSTMUnitGradient": lstm_unit_grad}
