"""Caffe2's ``rnn_cell``: recurrent cells (LSTM, a basic RNN) applied over a sequence.

    h_all, h_last, c_all, c_last = rnn_cell.LSTM(model, x [T, N, D], seq_lengths [N],
                                                 (h0 [1, N, H], c0 [1, N, H]), D, H, scope="lstm")

A cell adds one time step's ops to a step model; ``apply_over_sequence`` projects the whole
input once (``prepare_input``: an FC over [T, N, D]), builds the step net and hands it to
``recurrent.recurrent_net``, which adds the RecurrentNetwork op. The weights have Caffe2's
names: ``<scope>/i2h_w``, ``_b`` (input projection), ``<scope>/gates_t_w``, ``_b`` (recurrent).
A step with ``seq_lengths`` keeps (or, with ``drop_states``, zeroes) the state of a sequence
that has ended. Several layers (``dim_out`` a list) are a ``MultiRNNCell``: one recurrent op
steps every layer, and every blob has Caffe2's name (layer 0's input projection is
``<scope>/i2h_*``, projected once outside the loop; layer k's weights are
``<scope>/layer_<k>/...``; its states ``<scope>/layer_<k>/hidden_state_all`` ...), so
parameters set or loaded by Caffe2's names are the ones used.
"""
from __future__ import annotations

from dslc import brew, recurrent
from dslc.trace.blobref import BlobReference, NameScope, ScopedBlobReference
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.modeling.initializers import Initializer
from dslc.trace.tracing import user_location


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
    """A blob named by a str is named in the NameScope current when the cell is applied (as
    in Caffe2), so the cell's own scope, entered later, does not rename it."""
    return None if b is None else b if isinstance(b, BlobReference) else ScopedBlobReference(str(b))


class LSTMInitializer:
    """Zero initial hidden and cell states as parameters of the model's init net."""

    def __init__(self, hidden_size):
        self.hidden_size = hidden_size

    def create_states(self, model):
        return [model.create_param(param_name=name, shape=[self.hidden_size],
                                   initializer=Initializer("ConstantFill", value=0.0))
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
        # (with lengths kept, the state is hidden_t = the masked sum, as in Caffe2, which writes it
        # over the activation in place; that loses the value Mul's gradient needs, so Caffe2
        # cannot train it: the activation gets a name of its own, inside the step)
        masked = seq_lengths is not None and not self.drop_states
        hidden = getattr(model.net, "Tanh" if self.activation == "tanh" else "Relu")(
            gates, "hidden_t_unmasked" if masked else "hidden_t")
        if seq_lengths is not None:
            # an ended sequence keeps its state (or drops it): hidden * valid + hidden_prev * invalid
            valid_b = model.net.GT([seq_lengths, timestep], "valid_b", broadcast=1)
            # (the masks pass no gradient back: StopGradient in place keeps Caffe2's blob names;
            # Caffe2's gradient of this step fails)
            valid = model.net.StopGradient(model.net.Cast(valid_b, "valid", to="float"), "valid")
            hidden_valid = model.net.Mul([hidden, valid], "hidden_valid", broadcast=1, axis=1)
            if self.drop_states:
                hidden = hidden_valid
            else:
                invalid = model.net.Cast(model.net.LE([seq_lengths, timestep], "invalid_b", broadcast=1),
                                         "invalid", to="float")
                invalid = model.net.StopGradient(invalid, "invalid")
                kept = model.net.Mul([hidden_prev, invalid], "hidden_invalid", broadcast=1, axis=1)
                hidden = model.net.Add([hidden_valid, kept], "hidden_t")
        return (hidden,)

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size, dim_out=self.hidden_size,
                       axis=2)

    def get_state_names_override(self):
        return ["hidden_t"]

    def get_output_dim(self):
        return self.hidden_size


class MultiRNNCellInitializer:
    """Each layer's initial states, from its own cell's initializer, under ``layer_<k>``."""

    def __init__(self, cells):
        self.cells = cells

    def create_states(self, model):
        states = []
        for i, cell in enumerate(self.cells):
            if cell.initializer is None:
                raise RNNCellError(f"layer {i} of the stack has no initializer for its states", user_location(),
                                   "pass initial_states=[...] (each layer's states in order)")
            with NameScope(f"layer_{i}"), NameScope(cell.name):
                states.extend(cell.initializer.create_states(model))
        return states


class MultiRNNCell(RNNCell):
    """Cells stacked into one cell: layer k reads layer k - 1's output (its first state,
    or, for k in ``residual_output_layers``, that output plus layer k - 1's own input).

    Names are Caffe2's: the cell's states are ``<name>/layer_<k>/<state>``; layer 0's input
    projection is made outside the loop under ``<name>`` (``<name>/i2h``), every other
    layer's inside the step under ``<name>/layer_<k>``. The output is the last layer's (with
    the residual layers' added in when the last layers are residual)."""

    def __init__(self, cells, residual_output_layers=None, **kwargs):
        super().__init__(**kwargs)
        self.cells = list(cells)
        # (layer 0 cannot be residual: its input is projected before the loop; as in Caffe2,
        # listing it changes nothing)
        self.residual_output_layers = list(residual_output_layers or [])
        output_index, base = [], 0
        for cell in self.cells:
            output_index.append(base + cell.get_output_state_index())
            base += len(cell.get_state_names())
        # the layers whose outputs sum into the cell's: the last one and the unbroken run of
        # residual layers just below it
        self.output_connected_layers = [len(self.cells) - 1]
        while (self.output_connected_layers[0] in self.residual_output_layers
               and self.output_connected_layers[0] > 0):
            self.output_connected_layers.insert(0, self.output_connected_layers[0] - 1)
        self.state_names = [self.layer_scoper(i)(n) for i, cell in enumerate(self.cells)
                            for n in cell.get_state_names()]
        self.initializer = MultiRNNCellInitializer(self.cells)

    def layer_scoper(self, layer_id):
        # an unnamed stack's states are "None/layer_<k>/..." in Caffe2 too (the name is
        # formatted as it is); the states blobs keep those names
        return lambda name: f"{self.name}/layer_{layer_id}/{name}"

    def prepare_input(self, model, input_blob):
        input_blob = _ref(input_blob)
        with NameScope(self.name):
            return self.cells[0].prepare_input(model, input_blob)

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        input_t, seq_lengths, timestep = (_ref(b) for b in (input_t, seq_lengths, timestep))
        states = [_ref(s) for s in states]
        counts = [len(cell.get_state_names()) for cell in self.cells]
        if len(states) != sum(counts):
            raise RNNCellError(f"the stack has {sum(counts)} states, {len(states)} were given", user_location(),
                               "give each layer's states in order")
        next_states, layer_input, first = [], input_t, 0
        for i, cell in enumerate(self.cells):
            with NameScope(self.name), NameScope(f"layer_{i}"):
                layer_states = states[first:first + counts[i]]
                first += counts[i]
                prepared = cell.prepare_input(model, layer_input) if i > 0 else layer_input
                layer_next = cell._apply(model, prepared, seq_lengths, layer_states, timestep)
                if i != len(self.cells) - 1:
                    output = cell._prepare_output(model, layer_next)
                    if i > 0 and i in self.residual_output_layers:
                        layer_input = brew.sum(model, [output, layer_input], self.scope(f"residual_output_{i}"))
                    else:
                        layer_input = output
                next_states.extend(layer_next)
        return next_states

    def get_state_names(self):
        return self.state_names

    def get_output_state_index(self):
        return sum(len(c.get_state_names()) for c in self.cells[:-1]) + self.cells[-1].get_output_state_index()

    def _connected_outputs(self, model, states, per_state, pick):
        outputs, first = [], 0
        for i, cell in enumerate(self.cells):
            n = per_state * len(cell.get_state_names())
            if i in self.output_connected_layers:
                outputs.append(pick(cell, states[first:first + n]))
            first += n
        return outputs

    def _prepare_output(self, model, states):
        outputs = self._connected_outputs(model, states, 1, lambda cell, s: cell._prepare_output(model, s))
        return brew.sum(model, outputs, self.scope("residual_output")) if len(outputs) > 1 else outputs[0]

    def _prepare_output_sequence(self, model, state_outputs):
        outputs = self._connected_outputs(model, state_outputs, 2,
                                          lambda cell, s: cell._prepare_output_sequence(model, s))
        return (brew.sum(model, outputs, self.scope("residual_output_sequence")) if len(outputs) > 1
                else outputs[0])


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
    cells = [cell_class(input_size=dim_in if i == 0 else dims[i - 1], hidden_size=d, forget_bias=forget_bias,
                        memory_optimization=memory_optimization, name=scope if layers == 1 else None,
                        forward_only=forward_only, drop_states=drop_states, **cell_kwargs)
             for i, d in enumerate(dims)]
    cell = cells[0] if layers == 1 else MultiRNNCell(cells, name=scope, forward_only=forward_only)
    # outputs_with_grads counts in the last layer's outputs (two per state)
    below = 2 * (len(cell.get_state_names()) - len(cells[-1].get_state_names()))
    _, results = cell.apply_over_sequence(model=model, inputs=input_blob, seq_lengths=seq_lengths,
                                          initial_states=initial_states,
                                          outputs_with_grads=[below + i for i in outputs_with_grads])
    if return_last_layer_only:
        results = results[below:]
    if return_params:
        # the last layer's parameters (Caffe2 fails here for a stack: its MultiRNNCell has no
        # get_input_params)
        top = ((f"{scope}/" if scope else "") + f"layer_{layers - 1}/") if layers > 1 else ""
        results = list(results) + [{kind: {k: top + v for k, v in names.items()} for kind, names in
                                    (("input", cells[-1].get_input_params()),
                                     ("recurrent", cells[-1].get_recurrent_params()))}]
    return tuple(results)


def LSTM(model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs):
    return _LSTM(LSTMCell, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs)


def BasicRNN(model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs):
    return _LSTM(BasicRNNCell, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, **kwargs)


def GetLSTMParamNames():
    return {"weights": ["i2h_w", "gates_t_w"], "biases": ["i2h_b", "gates_t_b"]}
