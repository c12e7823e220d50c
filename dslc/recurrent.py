"""Caffe2's ``recurrent`` module: ``recurrent_net`` adds a RecurrentNetwork op that runs a
cell net once per time step (the lowering makes it a loop: dslc/lower/recurrent.py).

    recurrent_net(net, cell_net, inputs=[(input_t, input)], initial_cell_inputs=[(h_prev, h0)],
                  links={h_prev: h_t})  ->  (h_t_all [T, N, H], h_t_last [1, N, H])

Step t reads ``input[t]`` as ``input_t`` and the state as ``h_prev`` (``h0`` at t = 0), runs
the cell net, and its ``h_t`` becomes the next step's ``h_prev``. Every blob the cell net
reads besides those (its weights) is an input of the op, and the weights get gradients.
The states are kept as ``<scope>/<h_prev>_states`` [T + 1, N, H], as in Caffe2.
"""
from __future__ import annotations

import numpy as np

from dslc import core, workspace
from dslc.autodiff.gradient_registry import GradientRegistry
from dslc.lower.recurrent import forward_spec
from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class RecurrentError(DSLError, ValueError):
    """A recurrent net that cannot be built as asked."""


def recurrent_net(net, cell_net, inputs, initial_cell_inputs, links, timestep=None, scope=None,
                  outputs_with_grads=(0,), recompute_blobs_on_backward=None, forward_only=False):
    """Add to ``net`` a RecurrentNetwork op stepping ``cell_net`` over ``inputs``' first axis.

    ``inputs``: [(cell net blob, sequence blob [T, N, ...])] (one sequence, as in Caffe2);
    ``initial_cell_inputs``: [(cell net blob, initial state [1, N, H])]; ``links``: each state's
    cell net input -> the cell net output that becomes it at the next step; ``timestep``: the
    name the cell net reads the step index by (an int32 [1], default ``timestep``);
    ``scope``: the prefix of the states blobs. Returns, per state, the outputs ``<output>_all``
    (every step's) and ``<output>_last`` (the last step's). ``outputs_with_grads`` and
    ``recompute_blobs_on_backward`` are Caffe2's memory controls: dslc recomputes every step on
    the backward pass and keeps nothing per step, so they change nothing.
    """
    loc = user_location()
    if len(inputs) != 1:
        raise RecurrentError(f"recurrent_net takes one input sequence, got {len(inputs)}", loc,
                             "concatenate the sequences along their last axis first")
    op_name = net.NextName("recurrent")
    prefix = op_name if scope is None else str(scope)

    def scoped(name):
        return f"{prefix}/{name}"

    proto = cell_net.Proto()
    sequence = [(str(i), str(x)) for i, x in inputs]
    initial = [(str(i), str(x)) for i, x in initial_cell_inputs]
    links = {str(k): str(v) for k, v in dict(links).items()}
    ts_name = "timestep" if timestep is None else str(timestep)
    linked = {i for i, _ in sequence} | {i for i, _ in initial} | {ts_name}
    references = [b for b in _external_reads(proto) if b not in linked
                  and b not in {x for _, x in sequence + initial}]
    for cell_input, _ in initial:
        if cell_input not in links:
            raise RecurrentError(f"recurrent_net: state {cell_input!r} has no link (links maps each state's "
                                 "cell input to the cell output it becomes)", loc,
                                 f"pass links={{{cell_input!r}: <the cell net's output>}}")
    all_inputs = [x for _, x in sequence] + [x for _, x in initial] + references

    link_internal, link_external, link_offset = [], [], []
    alias_src, alias_dst, alias_offset = [], [], []
    states, outputs = [], []
    for cell_input, _ in initial:
        state = scoped(cell_input + "_states")
        cell_output = links[cell_input]
        for internal, offset in ((cell_input, 0), (cell_output, 1)):
            link_internal.append(internal)
            link_external.append(state)
            link_offset.append(offset)
        for suffix, offset in (("_all", 1), ("_last", -1)):
            alias_src.append(state)
            alias_dst.append(cell_output + suffix)
            alias_offset.append(offset)
            outputs.append(cell_output + suffix)
        states.append(state)
    for internal, external in sequence:
        link_internal.append(internal)
        link_external.append(external)
        link_offset.append(0)

    params = [] if forward_only else _differentiable(proto, references)
    results = net.RecurrentNetwork(
        all_inputs, outputs + [scoped("step_workspaces")],
        step_net=proto, recurrent_states=states,
        initial_recurrent_state_ids=[all_inputs.index(x) for _, x in initial],
        link_internal=link_internal, link_external=link_external, link_offset=link_offset,
        alias_src=alias_src, alias_dst=alias_dst, alias_offset=alias_offset,
        timestep=ts_name, param=[all_inputs.index(p) for p in params],
        outputs_with_grads=list(outputs_with_grads),
        recompute_blobs_on_backward=[str(b) for b in recompute_blobs_on_backward or ()])
    return results[:-1]


def _external_reads(proto) -> list:
    """The blobs the cell net reads before writing them: its declared external inputs first,
    then any other, in order of first read."""
    out = list(dict.fromkeys(str(b) for b in proto.external_input))
    made = set()
    for op in proto.op:
        for b in op.input:
            if b not in made and b not in out:
                out.append(b)
        made.update(op.output)
    return out


def _differentiable(proto, references) -> list:
    """The references a gradient reaches from the cell net's outputs (Caffe2's ``param``)."""
    outs = [str(o) for o in proto.external_output] or [str(o) for o in proto.op[-1].output]
    _, grads = GradientRegistry.GetBackwardPass(list(proto.op), {o: o + "_grad" for o in outs})
    return [r for r in references if r in grads]


def retrieve_step_blobs(net, prefix="rnn"):
    """Put every step's blobs of ``net``'s RecurrentNetwork ops, as its last run made them, in
    the current workspace as ``<prefix>_<blob><t>`` (Caffe2's names: its step workspaces'
    blobs, the links, what the step net writes, and the executor's
    ``timestep_rnnexec_t<t>``), and return those names (bytes, as Caffe2's). The names of
    the k-th op's blobs are also the string tensor ``<prefix>_<k>``.

    dslc keeps no step workspaces (a step's values live only inside the loop), so each step
    is computed again from what the run left in the workspace: the sequence inputs, the
    states (``<scope>/<state>_states``) and the weights. A step whose recomputed state is not
    the one the run stored (the weights were updated since, a random op in the step net)
    is a located error.
    """
    loc = user_location()
    names = []
    count = 0
    for op in net.Proto().op:
        if op.type != "RecurrentNetwork":
            continue
        count += 1
        spec = forward_spec(op, loc)
        got = _replay_steps(spec, prefix, loc)
        workspace.FeedBlob(f"{prefix}_{count}", np.array(got, dtype=object))
        names += workspace.FetchBlob(f"{prefix}_{count}").tolist()
    return names


def _replay_steps(spec, prefix, loc) -> list:
    """Run ``spec``'s step net again for each step, its step-local blobs named
    ``<prefix>_<blob><t>``; check each step's state writes against the stored states."""
    for blob in [*spec.sequences, *spec.states, *spec.references]:
        if not workspace.HasBlob(blob):
            raise RecurrentError(f"retrieve_step_blobs: the RecurrentNetwork's blob {blob!r} is not in the "
                                 "workspace", loc, "run the net that holds the RecurrentNetwork op first")
    steps = int(np.shape(workspace.FetchBlob(spec.sequences[0]))[0])
    replay = core.Net("retrieve_step_blobs")
    made = []
    for t in range(steps):
        local = {spec.timestep: f"timestep_rnnexec_t{t}"}  # (Caffe2's executor's name for it)

        def named(blob, t=t, local=local):
            return blob if blob in spec.references else f"{prefix}_{local.get(blob, blob)}{t}"
        for internal, external, offset, window in spec.reads:
            rows = workspace.FetchBlob(external)[t + offset:t + offset + window]
            workspace.FeedBlob(named(internal), rows)
            made.append(named(internal))
        workspace.FeedBlob(named(spec.timestep), np.array([t], np.int32))
        made.append(named(spec.timestep))
        for step_op in spec.step_msg.op:
            copy = core.CreateOperator(step_op.type, [named(b) for b in step_op.input],
                                       [named(b) for b in step_op.output])
            copy.arg.extend(step_op.arg)
            replay.Proto().op.extend([copy])
            made += [named(b) for b in step_op.output if named(b) not in made]
    workspace.RunNetOnce(replay)
    for t in range(steps):
        for internal, state, offset in spec.writes:
            stored = workspace.FetchBlob(state)[t + offset]
            again = workspace.FetchBlob(f"{prefix}_{internal}{t}")
            if np.shape(again) not in (np.shape(stored), (1,) + np.shape(stored)) or \
                    not np.allclose(np.reshape(again, np.shape(stored)), stored, rtol=1e-5, atol=1e-6):
                raise RecurrentError(f"retrieve_step_blobs: step {t} computed again gives another {internal!r} than "
                                     f"the run stored in {state!r}: the RecurrentNetwork's inputs or weights changed "
                                     "since the run, or its step net draws random numbers", loc,
                                     "retrieve the step blobs right after the run, before anything updates them")
    return made


__all__ = ["recurrent_net", "retrieve_step_blobs", "RecurrentError"]
