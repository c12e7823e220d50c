"""Lowering RecurrentNetwork and its gradient: a ``for`` loop over time of the step net's ops.

    RecurrentNetwork(x [T, N, D], h0 [1, N, H], W; links input_t <- x, h_prev <- h_states,
                     h_t -> h_states at +1; aliases h_all = h_states[1:], h_last = h_states[T:])
      -> %T = dim 0 of %x;  store h_states = Concat(%h0, zeros [T, N, H])
         for(%T) { ^(%t): input_t = Gather(x, t); h_prev = Gather(h_states, t)
                          <the step net's ops>;  h_states = ScatterAssign(h_states, t + 1, h_t) }
         h_all = Slice(h_states, [1:]);  h_last = Slice(h_states, [T:])

The step net's own blobs are renamed apart (``name@rnnK``) and never stored: each step
starts from its links, as each of Caffe2's step workspaces does. The states blob keeps
Caffe2's name (``recurrent_states``), so it is in the workspace afterwards, as there.

The gradient steps back from t = T - 1 to 0. Each step recomputes the step net's forward
ops from the stored states, then runs their gradient ops (``dslc.autodiff.gradients``) seeded with
the states' gradient at the written rows; what they give the read links adds into the
states' gradient at the read rows (so step t - 1 sees it) and into the sequence inputs'
gradients; parameters' gradients add up over the steps.
"""
from __future__ import annotations

import numpy as np

from dslc.trace import netdef
from dslc.ir import Region
from dslc.ir.diagnostics import DSLTypeError, VerifyError
from dslc.ir.ops.recurrent import grad_inputs, sequence_inputs
from dslc.ir.types import I64
from dslc.trace.oprecord import OpRecord

from .blocks import Block
from dslc.trace.netargs import net_message
from dslc.autodiff import gradients
from dslc.trace.blobref import GradientSlice
from dslc.trace.net import Net


class _Spec:
    """A RecurrentNetwork op's arguments, read once and checked."""

    def __init__(self, rec: OpRecord, forward_inputs: tuple):
        a = rec.args
        self.loc = rec.loc
        self.step_msg = net_message(a.get("step_net"), rec)
        self.step = [netdef.op_record(op, rec.loc) for op in self.step_msg.op]
        self.states = [str(s) for s in a.get("recurrent_states", ())]
        ids = [int(k) for k in a.get("initial_recurrent_state_ids", ())]
        if len(ids) != len(self.states):
            raise VerifyError(f"{rec.type}: {len(self.states)} recurrent_states but {len(ids)} "
                              "initial_recurrent_state_ids", rec.loc, "give one initial state input per state")
        self.inputs = tuple(forward_inputs)
        self.init = {s: self.inputs[k] for s, k in zip(self.states, ids)}
        internal, external = list(a.get("link_internal", ())), list(a.get("link_external", ()))
        offsets = [int(o) for o in a.get("link_offset", ())]
        windows = [int(w) for w in a.get("link_window", ())] or [1] * len(internal)
        if not len(internal) == len(external) == len(offsets) == len(windows):
            raise VerifyError(f"{rec.type}: link_internal, link_external, link_offset (and link_window) "
                              "differ in length", rec.loc, "give one entry per link in each")
        if any(w < 1 for w in windows):
            raise VerifyError(f"{rec.type}: a link's window must be at least 1, got {windows}", rec.loc,
                              "link_window counts the time steps a link shows")
        written = names_written_by(self.step)
        self.reads, self.writes = [], []  # (internal, external, offset, window)
        for i, e, o, w in zip(internal, external, offsets, windows):
            if e in self.states and i in written:
                if w != 1:
                    raise VerifyError(f"{rec.type}: the state link {i!r} -> {e!r} writes {w} steps at a time",
                                      rec.loc, "a step writes one row of a state (link_window 1)")
                self.writes.append((str(i), str(e), o))
            else:
                self.reads.append((str(i), str(e), o, w))
        self.aliases = [(str(s), str(d), int(o)) for s, d, o in
                        zip(a.get("alias_src", ()), a.get("alias_dst", ()), a.get("alias_offset", ()))]
        self.timestep = str(a.get("timestep") or "timestep")
        seq = sequence_inputs(a, len(self.inputs), set(self.states))
        self.sequences = [self.inputs[k] for k in seq]
        if not self.sequences:
            raise VerifyError(f"{rec.type} has no sequence input to step over", rec.loc,
                              "link at least one [T, N, ...] input into the step net")
        self.params = [int(k) for k in a.get("param", ())]
        linked = {i for i, _, _, _ in self.reads} | {self.timestep}
        # the step net's external blobs: the op's inputs it reads by name (weights, lengths)
        self.references = {b for b in self.inputs} - linked
        for name in names_read(self.step) - written - linked - self.references:
            raise VerifyError(f"{rec.type}: the step net reads {name!r}, which is neither linked into it "
                              "nor an input of the op", rec.loc,
                              "pass it as an input of the RecurrentNetwork op (recurrent_net does this "
                              "for the step net's external inputs)")


def forward_spec(op, loc) -> _Spec:
    """The checked arguments of a RecurrentNetwork OperatorDef (what retrieve_step_blobs
    replays: its links, states, step net and references)."""
    rec = netdef.op_record(op, loc)
    return _Spec(rec, rec.inputs)


def names_written_by(records) -> set:
    return {b for r in records for b in r.outputs}


def names_read(records) -> set:
    return {b for r in records for b in r.inputs}


class _Names:
    """The step net's blob names renamed apart from the outer net's: ``name@rnnK``,
    except the outer blobs it reads (its references). None of them is ever stored."""

    def __init__(self, blk: Block, keep: set):
        self.tag = blk.ctx.fresh_tag("rnn")
        self.keep = keep
        self.made: set = set()
        self.ephemeral = blk.ctx.ephemeral

    def __call__(self, name: str) -> str:
        if name in self.keep:
            return name
        local = f"{name}@{self.tag}"
        if local not in self.made:
            self.made.add(local)
            self.ephemeral.add(local)
        return local

    def records(self, records) -> list:
        return [OpRecord(r.type, tuple(map(self, r.inputs)), tuple(map(self, r.outputs)), r.args, r.loc, r.extra)
                for r in records]


def lower_recurrent(blk: Block, rec: OpRecord) -> None:
    from .ops import lower_op
    if rec.type == "RecurrentNetwork":
        return _forward(blk, rec, lower_op)
    return _backward(blk, rec, lower_op)


# ----------------------------------------------------------------------------- helpers

def _v(blk: Block, name: str, operands, attrs=None, loc=None):
    return blk.b.value(name, list(operands), attrs or {}, loc=loc)


def _index(blk: Block, t, offset: int, loc, window: int = 1):
    """[t + offset, ..., t + offset + window - 1]: the rows a link reads or writes, as an
    index vector, so that the step net sees them as Caffe2's do, [window, N, ...]."""
    at = t if offset == 0 else _v(blk, "Add", [t, blk.const(np.int64(offset), loc)], loc=loc)
    at = _v(blk, "ExpandDims", [at], {"dims": [0]}, loc)
    return at if window == 1 else _v(blk, "Add", [at, blk.const(np.arange(window, dtype=np.int64), loc)], loc=loc)


def _length(blk: Block, spec: _Spec):
    """T, the first sequence's leading dim, as an i64 scalar."""
    loc = spec.loc
    shape = _v(blk, "Shape", [blk.read(spec.sequences[0], loc)], loc=loc)  # (i64)
    return _v(blk, "Gather", [shape, blk.const(np.int64(0), loc)], loc=loc)


def _initial_rows(blk: Block, spec: _Spec, state: str):
    """The initial state as the first rows of the states: [K, N, H] (K = 1 for an [N, H] or
    [H] one; more where the step reads a window of past states, as a convolution over time)."""
    loc = spec.loc
    init = blk.read(spec.init[state], loc)
    shape = _shape(init)
    if shape is None:  # (known only when it runs: Caffe2's usual [1, N, H])
        return init
    if len(shape) not in (1, 2, 3):
        raise DSLTypeError(f"RecurrentNetwork: initial state {spec.init[state]!r} of {state!r} must be [H], [N, H] "
                           f"or [K, N, H], got {init.type}", loc, "reshape the initial state to [K, N, H]")
    if len(shape) == 1:  # one state for every sequence of the batch: [H] -> [1, N, H]
        batch = _v(blk, "Slice", [_v(blk, "Shape", [blk.read(spec.sequences[0], loc)], loc=loc)],
                   {"starts": [1], "ends": [2]}, loc)
        size = _concat0(blk, [blk.const(np.ones(1, np.int64), loc), batch, _v(blk, "Shape", [init], loc=loc)], loc)
        zeros = _v(blk, "ConstantFill", [size], _zeros_of(init), loc)
        return _v(blk, "Add", [zeros, init], loc=loc)
    return _v(blk, "ExpandDims", [init], {"dims": [0]}, loc) if len(shape) == 2 else init


def _initial_count(blk: Block, spec: _Spec, state: str) -> int:
    """K, the initial state's rows (1 unless a [K, N, H] initial state says otherwise)."""
    shape = _shape(blk.read(spec.init[state], spec.loc))
    return int(shape[0]) if shape is not None and len(shape) == 3 and shape[0] is not None else 1


def _shape(value):
    """A value's shape if the lowering knows it (its rank at least), else None."""
    return getattr(value.type, "shape", None)


def _concat0(blk: Block, parts, loc):
    return blk.create("Concat", list(parts), {"axis": 0}, loc=loc, n_results=1).results[0]


def _initial_states(blk: Block, spec: _Spec, state: str, n_steps):
    """The states tensor [K + T, N, H]: the initial state's K rows, then zeros."""
    loc = spec.loc
    init = _initial_rows(blk, spec, state)
    rest = _v(blk, "Slice", [_v(blk, "Shape", [init], loc=loc)], {"starts": [1], "ends": [-1]}, loc)
    size = _concat0(blk, [_v(blk, "ExpandDims", [n_steps], {"dims": [0]}, loc), rest], loc)
    zeros = _v(blk, "ConstantFill", [size], _zeros_of(init), loc)
    return _concat0(blk, [init, zeros], loc)


def _zeros_of(like) -> dict:
    """ConstantFill's arguments for zeros of ``like``'s dtype (float when not known yet)."""
    dtype = getattr(like.type, "dtype", None)
    return {"input_as_shape": 1, "value": 0.0, **({"dtype": dtype} if dtype else {})}


def _time_loop(blk: Block, n_steps, loc):
    """``for(%T)``: the op and the block of its body, with the iteration index."""
    blk.flush()
    op = blk.create("for", [n_steps, n_steps], loc=loc, result_types=[I64], regions=[Region()])
    i = op.regions[0].add_arg(I64, "t")
    exit_index = op.regions[0].add_arg(I64, "n")
    body = blk.child(op.regions[0], inherit=False)
    return op, body, i, exit_index


def _end_loop(blk: Block, op, body: Block, exit_index, loc) -> None:
    body.flush()
    body.create("yield", [exit_index], loc=loc)
    blk.forget(op)


def _link_inputs(body: Block, spec: _Spec, names: _Names, t, step_reads: set, reads: bool = True) -> None:
    """Before a step's ops: each read link's rows from t + offset (unless ``reads`` is off),
    and the timestep if read."""
    loc = spec.loc
    for internal, external, offset, window in spec.reads if reads else ():
        row = _v(body, "Gather", [body.read(external, loc), _index(body, t, offset, loc, window)], loc=loc)
        body.write(names(internal), row, loc)
    if spec.timestep in step_reads:
        step = _v(body, "Cast", [t], {"to": "i32"}, loc)
        body.write(names(spec.timestep), _v(body, "ExpandDims", [step], {"dims": [0]}, loc), loc)


def _add_row(body: Block, name: str, t, offset: int, value, loc, assign=False, window: int = 1) -> None:
    """``name[t + offset : + window] (+)= value`` on a blob the loop carries."""
    idx = _index(body, t, offset, loc, window)
    total = body.read(name, loc)
    rank, full = _shape(value), _shape(total)
    if rank is not None and full is not None and len(rank) == len(full) - 1:  # (a step value without its row axis)
        value = _v(body, "ExpandDims", [value], {"dims": [0]}, loc)
    if not assign:
        value = _v(body, "Add", [_v(body, "Gather", [total, idx], loc=loc), value], loc=loc)
    body.write(name, _v(body, "ScatterAssign", [total, idx, value], loc=loc), loc)


# ----------------------------------------------------------------------------- forward

def _forward(blk: Block, rec: OpRecord, lower_op) -> None:
    spec = _Spec(rec, rec.inputs)
    loc = rec.loc
    n_steps = _length(blk, spec)
    for s in spec.states:
        blk.write(s, _initial_states(blk, spec, s, n_steps), loc)
    names = _Names(blk, spec.references)
    op, body, t, exit_index = _time_loop(blk, n_steps, loc)
    # Caffe2's links are views of the states: a step reads a row as it is when its op runs,
    # so a window may see the row an earlier op of the same step wrote. Each read link is
    # gathered just before its first reader, each write stored just after its writer.
    pending = {internal: (external, offset, window) for internal, external, offset, window in spec.reads}
    writes = {}
    for internal, state, offset in spec.writes:
        writes.setdefault(internal, []).append((state, offset))
    _link_inputs(body, spec, names, t, names_read(spec.step), reads=False)
    for r, renamed in zip(spec.step, names.records(spec.step)):
        for b in r.inputs:
            if b in pending:
                external, offset, window = pending.pop(b)
                row = _v(body, "Gather", [body.read(external, loc), _index(body, t, offset, loc, window)], loc=loc)
                body.write(names(b), row, loc)
        lower_op(body, renamed)
        for b in r.outputs:
            for state, offset in writes.get(b, ()):
                _add_row(body, state, t, offset, body.read(names(b), loc), loc, assign=True)
    _end_loop(blk, op, body, exit_index, loc)
    _write_aliases(blk, spec, rec.outputs)
    if len(rec.outputs) > len(spec.aliases):  # Caffe2's step workspaces: nothing dslc keeps
        blk.write(rec.outputs[len(spec.aliases)], blk.const(np.zeros(0, np.int64), loc), loc)


def _alias_bounds(offset: int) -> dict:
    """The rows of the states an alias shows: [offset:] (a negative offset counts from the end)."""
    return {"starts": [offset if offset >= 0 else offset - 1], "ends": [-1]}


def _write_aliases(blk: Block, spec: _Spec, outputs) -> None:
    loc = spec.loc
    for (src, dst, offset), out in zip(spec.aliases, outputs):
        blk.write(out, _v(blk, "Slice", [blk.read(src, loc)], _alias_bounds(offset), loc), loc)


# ----------------------------------------------------------------------------- gradient

def _backward(blk: Block, rec: OpRecord, lower_op) -> None:
    have = [int(k) for k in rec.args.get("grad_outputs", ())]
    n_alias = len(rec.args.get("alias_dst", ()))
    fwd_inputs = rec.inputs[len(have):len(rec.inputs) - n_alias]
    alias_values = rec.inputs[len(rec.inputs) - n_alias:]
    spec = _Spec(rec, fwd_inputs)
    loc = rec.loc
    n_steps = _length(blk, spec)

    # the states, rebuilt from the initial states and the outputs that show rows 1..T
    states_grad = {}
    for s in spec.states:
        k = _initial_count(blk, spec, s)
        full = [out for (src, _, off), out in zip(spec.aliases, alias_values) if src == s and off == k]
        if not full:
            raise VerifyError(f"RecurrentNetworkGradient: no output shows every step of {s!r}", loc,
                              f"alias the states from offset {k}, past the initial rows "
                              "(recurrent_net's <output>_all does)")
        blk.write(s, _concat0(blk, [_initial_rows(blk, spec, s), blk.read(full[0], loc)], loc), loc)
        parts = [_v(blk, "SliceGradient", [blk.read(s, loc), blk.read(rec.inputs[j], loc)],
                    _alias_bounds(spec.aliases[k][2]), loc)
                 for j, k in enumerate(have) if spec.aliases[k][0] == s]
        grad = _v(blk, "ZerosLike", [blk.read(s, loc)], loc=loc) if not parts else \
            parts[0] if len(parts) == 1 else _v(blk, "Sum", parts, loc=loc)
        states_grad[s] = f"{s}_grad"
        blk.write(states_grad[s], grad, loc)

    for internal, external, offset, window in spec.reads:
        for _, state, w_offset in spec.writes:
            if state == external and offset <= w_offset < offset + window:
                raise VerifyError(f"RecurrentNetworkGradient: the link {internal!r} reads the row of "
                                  f"{external!r} its own step writes; dslc has no gradient for that yet", loc,
                                  "run such a net forward only, or read the state from the steps before")
    # the step's gradient ops, seeded at the rows each step writes
    step_net = Net(spec.step_msg)
    seeds = {internal: f"{internal}_grad" for internal, _, _ in spec.writes}
    grad_map = gradients.add_gradient_ops(step_net, seeds, loc, strict=False)
    backward = step_net.ops()[len(spec.step):]
    wanted = _wanted(rec, spec, fwd_inputs)
    accumulators = {}  # forward input -> the gradient blob this op writes
    for k, out in zip(wanted, rec.outputs):
        accumulators[fwd_inputs[k]] = out
        if fwd_inputs[k] in spec.sequences or k in spec.params:
            blk.write(out, _v(blk, "ZerosLike", [blk.read(fwd_inputs[k], loc)], loc=loc), loc)

    names = _Names(blk, spec.references)  # (the step's gradient blobs stay apart from this op's outputs)
    last = _v(blk, "Sub", [n_steps, blk.const(np.int64(1), loc)], loc=loc)
    op, body, i, exit_index = _time_loop(blk, n_steps, loc)
    t = _v(body, "Sub", [last, i], loc=loc)
    _link_inputs(body, spec, names, t, names_read(spec.step) | names_read(backward))
    for r in names.records(spec.step):  # (the step's forward values, recomputed)
        lower_op(body, r)
    for internal, state, offset in spec.writes:
        row = _v(body, "Gather", [body.read(states_grad[state], loc), _index(body, t, offset, loc)], loc=loc)
        body.write(names(seeds[internal]), row, loc)
    for r in names.records(backward):
        lower_op(body, r)

    def grad_of(internal):
        g = grad_map.get(internal)
        if isinstance(g, GradientSlice):
            raise VerifyError(f"RecurrentNetwork: the step net's gradient of {internal!r} is sparse", loc,
                              "sparse gradients inside a step net are not supported; gather outside it")
        return None if g is None else body.read(names(str(g)), loc)

    for internal, external, offset, window in spec.reads:
        g = grad_of(internal)
        if g is None:
            continue
        if external in states_grad:
            _add_row(body, states_grad[external], t, offset, g, loc, window=window)
        elif external in accumulators:
            _add_row(body, accumulators[external], t, offset, g, loc, window=window)
    for k in spec.params:
        p = fwd_inputs[k]
        g = grad_of(p)
        if g is not None and p in accumulators:
            body.write(accumulators[p], _v(body, "Add", [body.read(accumulators[p], loc), g], loc=loc), loc)
    _end_loop(blk, op, body, exit_index, loc)

    for s in spec.states:  # the initial state's gradient: the states' gradient at its rows
        out = accumulators.get(spec.init[s])
        if out is None:
            continue
        rank = len(_shape(blk.read(spec.init[s], loc)) or (0, 0, 0))
        g = _v(blk, "Slice", [blk.read(states_grad[s], loc)], {"starts": [0], "ends": [_initial_count(blk, spec, s)]},
               loc)
        if rank == 2:
            g = _v(blk, "Squeeze", [g], {"dims": [0]}, loc)
        elif rank == 1:  # (shared by the batch: its rows' gradients add up)
            g = _v(blk, "ReduceFrontSum", [g], {"num_reduce_dim": 2}, loc)
        blk.write(out, g, loc)


def _wanted(rec: OpRecord, spec: _Spec, fwd_inputs) -> list:
    wanted = grad_inputs(rec.args, len(fwd_inputs))
    if len(wanted) != len(rec.outputs):
        raise VerifyError(f"RecurrentNetworkGradient writes {len(wanted)} gradients, got {len(rec.outputs)} "
                          "output names", rec.loc, "make it with the RecurrentNetwork op's gradient maker")
    return wanted
