"""Caffe2's ``rnn_cell``: recurrent cells (LSTM, a basic RNN) applied over a sequence.

    h_all, h_last, c_all, c_last = rnn_cell.LSTM(model, x [T, N, D], seq_lengths [N],
                                                 (h0 [1, N, H], c0 [1, N, H]), D, H, scope="lstm")

A cell adds one time step's ops to a step model; ``apply_over_sequence`` projects the whole
input once (``prepare_input``: an FC over [T, N, D]), builds the step net and hands it to
``recurrent.recurrent_net``, which adds the RecurrentNetwork op. The weights have Caffe2's
names: ``<scope>/i2h_w``, ``_b`` (input projection), ``<scope>/gates_t_w``, ``_b`` (recurrent).
A step with ``seq_lengths`` keeps (or, with ``drop_states``, zeroes) the state of a sequence
that has ended. Several layers (``dim_out`` a list) run as one recurrent op per layer, each
reading the one below's outputs: the same numbers as Caffe2's MultiRNNCell, which steps
every layer in one op.
"""
from __future__ import annotations

from dslc import brew, recurrent
from dslc.blobref import BlobReference, NameScope
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.tracing import user_location


class RNNCellError(DSLError, ValueError):
    """A cell that cannot be built as asked (a wrong number of states, an unknown activation)."""


class RNNCell:
    """A recurrent cell: ``apply_override`` adds one step's ops and returns the new states;
    ``get_state_names_override`` names the states. ``prepare_input`` may move the work that
    depends only on the input out of the loop."""

    def __init__(self, name=None, forward_only=False, initializer=None):
        self.name = name
        self.recompute_blobs = []
        self.forward_only = forward_only
        self.initializer = initializer

    def scope(self, name):
        return f"{self.name}/{name}" if self.name is not None else name

    def apply_over_sequence(self, model, inputs, seq_lengths=None, initial_states=None, outputs_with_grads=None):
        """Step the cell over ``inputs`` [T, N, D]; returns (the output sequence, every state's
        (all steps, last step) outputs in state order)."""
        if initial_states is None:
            if self.initializer is None:
                raise RNNCellError("the cell needs initial states or an initializer", user_location(),
                                   "pass initial_states=[...] (one [1, N, H] blob per state)")
            with NameScope(self.name):
                initial_states = self.initializer.create_states(model)
        prepared = self.prepare_input(model, inputs)
        step_model = ModelHelper(name=self.name, param_model=model)
        input_t, timestep = step_model.net.AddScopedExternalInputs("input_t", "timestep")
        names = self.get_state_names()
        if len(initial_states) != len(names):
            raise RNNCellError(f"the cell has {len(names)} states, {len(initial_states)} initial values were "
                               "given", user_location(), f"give one initial blob per state: {names}")
        states_prev = step_model.net.AddScopedExternalInputs(*[s + "_prev" for s in names])
        states_prev = states_prev if isinstance(states_prev, list) else [states_prev]
        states = self._apply(step_model, input_t, seq_lengths, states_prev, timestep)
        known = set(step_model.net.Proto().external_output)
        for s in states:
            if str(s) not in known:
                step_model.net.AddExternalOutput(s)
        if outputs_with_grads is None:
            outputs_with_grads = [self.get_output_state_index() * 2]
        per_step = recurrent.recurrent_net(
            net=model.net, cell_net=step_model.net, inputs=[(input_t, prepared)],
            initial_cell_inputs=list(zip(states_prev, initial_states)), links=dict(zip(states_prev, states)),
            timestep=timestep, scope=self.name, forward_only=self.forward_only,
            outputs_with_grads=outputs_with_grads, recompute_blobs_on_backward=self.recompute_blobs)
        return self._prepare_output_sequence(model, per_step), per_step

    def apply(self, model, input_t, seq_lengths, states, timestep):
        """One step outside a recurrent op (e.g. a decoder run step by step)."""
        input_t = self.prepare_input(model, input_t)
        states = self._apply(model, input_t, seq_lengths, states, timestep)
        return self._prepare_output(model, states), states

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        # the outer names stay as they are; what the cell makes goes under its scope
        input_t, seq_lengths, timestep = (_ref(b) for b in (input_t, seq_lengths, timestep))
        states = [_ref(s) for s in states]
        with NameScope(self.name):
            return self.apply_override(model, input_t, seq_lengths, states, timestep)

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        raise NotImplementedError("a cell implements apply_override")

    def prepare_input(self, model, input_blob):
        return input_blob

    def get_output_state_index(self):
        return 0

    def get_state_names(self):
        return [self.scope(n) for n in self.get_state_names_override()]

    def get_state_names_override(self):
        raise NotImplementedError("a cell names its states in get_state_names_override")

    def get_output_dim(self):
        raise NotImplementedError("a cell gives its output size in get_output_dim")

    def _prepare_output(self, model, states):
        return states[self.get_output_state_index()]

    def _prepare_output_sequence(self, model, state_outputs):
        return state_outputs[2 * self.get_output_state_index()]


def _ref(b):
    return None if b is None else b if isinstance(b, BlobReference) else BlobReference(str(b))


class LSTMInitializer:
    """Zero initial hidden and cell states as parameters of the model's init net."""

    def __init__(self, hidden_size):
        self.hidden_size = hidden_size

    def create_states(self, model):
        return [model.create_param(param_name=name, shape=[self.hidden_size],
                                   initializer=("ConstantFill", {"value": 0.0}))
                for name in ("initial_hidden_state", "initial_cell_state")]


class LSTMCell(RNNCell):
    """gates = FC(hidden_prev) + the projected input; (hidden, cell) = LSTMUnit(...)."""

    def __init__(self, input_size, hidden_size, forget_bias, memory_optimization, drop_states=False,
                 initializer=None, **kwargs):
        super().__init__(initializer=initializer, **kwargs)
        self.initializer = initializer or LSTMInitializer(hidden_size=hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.forget_bias = float(forget_bias)
        self.memory_optimization = memory_optimization
        self.drop_states = drop_states
        self.gates_size = 4 * hidden_size

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_prev, cell_prev = states
        gates = brew.fc(model, hidden_prev, "gates_t", dim_in=self.hidden_size, dim_out=self.gates_size, axis=2)
        brew.sum(model, [gates, input_t], gates)
        inputs = [hidden_prev, cell_prev, gates] + ([seq_lengths] if seq_lengths is not None else []) + [timestep]
        hidden, cell = model.net.LSTMUnit(inputs, ["hidden_state", "cell_state"], forget_bias=self.forget_bias,
                                          drop_states=int(bool(self.drop_states)),
                                          sequence_lengths=int(seq_lengths is not None))
        model.net.AddExternalOutputs(hidden, cell)
        if self.memory_optimization:
            self.recompute_blobs = [gates]
        return hidden, cell

    def get_input_params(self):
        return {"weights": self.scope("i2h") + "_w", "biases": self.scope("i2h") + "_b"}

    def get_recurrent_params(self):
        return {"weights": self.scope("gates_t") + "_w", "biases": self.scope("gates_t") + "_b"}

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=self.gates_size,
                       axis=2)

    def get_state_names_override(self):
        return ["hidden_t", "cell_t"]

    def get_output_dim(self):
        return self.hidden_size


class BasicRNNCell(RNNCell):
    """hidden = activation(FC(hidden_prev) + the projected input), tanh or relu."""

    def __init__(self, input_size, hidden_size, forget_bias, memory_optimization, drop_states=False,
                 initializer=None, activation=None, **kwargs):
        super().__init__(initializer=initializer, **kwargs)
        self.drop_states = drop_states
        self.input_size, self.hidden_size = input_size, hidden_size
        self.activation = activation
        if activation not in ("relu", "tanh"):
            raise RNNCellError(f"BasicRNNCell has no activation {activation!r}", user_location(),
                               "pass activation='tanh' or activation='relu'")

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_prev = states[0]
        gates = brew.fc(model, hidden_prev, "gates_t", dim_in=self.hidden_size, dim_out=self.hidden_size, axis=2)
        brew.sum(model, [gates, input_t], gates)
        hidden = getattr(model.net, "Tanh" if self.activation == "tanh" else "Relu")(gates, "hidden_t")
        if seq_lengths is not None:
            # an ended sequence keeps its state (or drops it): hidden * valid + hidden_prev * invalid
            valid_b = model.net.GT([seq_lengths, timestep], "valid_b", broadcast=1)
            valid = model.net.Cast(valid_b, "valid", to="float")
            hidden_valid = model.net.Mul([hidden, valid], "hidden_valid", broadcast=1, axis=1)
            if self.drop_states:
                hidden = hidden_valid
            else:
                invalid = model.net.Cast(model.net.LE([seq_lengths, timestep], "invalid_b", broadcast=1),
                                         "invalid", to="float")
                kept = model.net.Mul([hidden_prev, invalid], "hidden_invalid", broadcast=1, axis=1)
                hidden = model.net.Add([hidden_valid, kept], hidden)
        return (hidden,)

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=self.hidden_size,
                       axis=2)

    def get_state_names(self):
        return (self.scope("hidden_t"),)

    def get_output_dim(self):
        return self.hidden_size


def _LSTM(cell_class, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, scope=None,
          outputs_with_grads=(0,), return_params=False, memory_optimization=False, forget_bias=0.0,
          forward_only=False, drop_states=False, return_last_layer_only=True, static_rnn_unroll_size=None,
          **cell_kwargs):
    """A recurrent layer (or a stack: ``dim_out`` a list) over ``input_blob`` [T, N, dim_in].

    Returns the last layer's (hidden_all, hidden_last, cell_all, cell_last) for an LSTM
    ((hidden_all, hidden_last) for BasicRNN), every layer's with ``return_last_layer_only=False``,
    and a dict of the last layer's parameters with ``return_params``."""
    dims = list(dim_out) if isinstance(dim_out, (list, tuple)) else [dim_out]
    if static_rnn_unroll_size is not None:
        raise RNNCellError("static_rnn_unroll_size: dslc does not unroll recurrent nets (its loop over time is "
                           "already compiled)", user_location(), "drop static_rnn_unroll_size")
    layers = len(dims)
    n_states = None
    results, x, cell = [], input_blob, None
    for i, d in enumerate(dims):
        name = scope if layers == 1 else (f"{scope}/layer_{i}" if scope else f"layer_{i}")
        cell = cell_class(input_size=dim_in if i == 0 else dims[i - 1], hidden_size=d, forget_bias=forget_bias,
                          memory_optimization=memory_optimization, name=name, forward_only=forward_only,
                          drop_states=drop_states, **cell_kwargs)
        n_states = len(cell.get_state_names())
        init = None
        if initial_states is not None:
            if len(initial_states) != n_states * layers:
                raise RNNCellError(f"{layers} layer(s) of {n_states} states need {n_states * layers} initial "
                                   f"states, got {len(initial_states)}", user_location(),
                                   "give each layer's states in order")
            init = list(initial_states[n_states * i:n_states * (i + 1)])
        with_grads = list(outputs_with_grads) if i == layers - 1 else [0]
        x, per_step = cell.apply_over_sequence(model=model, inputs=x, seq_lengths=seq_lengths, initial_states=init,
                                               outputs_with_grads=with_grads)
        results.extend(per_step)
    if return_last_layer_only:
        results = results[2 * n_states * (layers - 1):]
    if return_params:
        results = list(results) + [{"input": cell.get_input_params(), "recurrent": cell.get_recurrent_params()}]
    return tuple(results)


def LSTM(model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs):
    return _LSTM(LSTMCell, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs)


def BasicRNN(model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs):
    return _LSTM(BasicRNNCell, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs)


def GetLSTMParamNames():
    return {"weights": ["i2h_w", "gates_t_w"], "biases": ["i2h_b", "gates_t_b"]}
