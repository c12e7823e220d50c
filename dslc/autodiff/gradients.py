"""Reverse mode over a recorded net: ``net.AddGradientOperators([loss])``.

The forward ops are read back to front; each op the loss depends on contributes the
ops its gradient declaration (ir/gradients.py) makes, recorded into the same net at
the forward op's line. A blob read by several ops gets the sum of their
contributions. Blob names follow Caffe2: the gradient of ``w`` is ``w_grad``; the
parts of a summed gradient are ``w_grad_autosplit_<k>``; a loss's own gradient, filled
with 1, is ``<loss>_autogen_grad``.

Blobs written more than once are told apart by version (``x`` after an in-place
``Relu`` is a new value): an in-place op is fine when its gradient only needs what
is still in the blob when the backward ops run; otherwise the error names the line
that overwrote the value.
"""
from __future__ import annotations

from collections import defaultdict

from dslc.trace import net_record
from dslc.trace.blobref import BlobReference, GradientSlice, NameScope
from dslc.ir.diagnostics import DSLError
from dslc.ir.gradients import (GRADIENTS, IS_AUTO_GEN_SUM_OPS_TAG, NO_GRADIENT, ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG,
                                GradContext, GradOp, SparseGrad, no_gradient)
from dslc.ir.opdef import OPS
from dslc.trace.oprecord import FILL_ALIASES
from dslc.trace.tracing import user_location
from dslc.runtime.proto import caffe2 as caffe2_pb2




no_gradient(*FILL_ALIASES)  # (GivenTensorFill & co.: fills, no gradient flows into them, as in Caffe2)


class GradientError(DSLError, ValueError):
    """A gradient that cannot be derived: no loss to start from, an op without one, an overwritten value."""


class OverwrittenValueError(GradientError, RuntimeError):
    """A gradient op needs a forward value a later op overwrites (a RuntimeError, as Caffe2 raises)."""


def check_own_overwrite(op_type: str, maker, ctx: GradContext, loc) -> None:
    """Refuse (OverwrittenValueError) the gradient of an op that writes an input over in
    place (an output named as that input) when the gradient reads that input's value: by
    the time gradients run, the name holds the op's output (Softsign's gradient reads X,
    so ``Softsign(x) -> x`` would differentiate at softsign(x); Relu's reads Y: fine).
    The maker is asked again with those inputs named apart, to see which it reads."""
    over = [b for b in dict.fromkeys(ctx.I) if b in ctx.O]
    if not over:
        return
    apart = {b: f"{b}\0before {op_type}" for b in over}  # (no blob is named so: NUL in a name)
    made = maker(GradContext([apart.get(b, b) for b in ctx.I], list(ctx.O), list(ctx.GO), list(ctx.GI),
                             dict(ctx.args)))
    read = {b for g in made for b in ((g.indices, g.values) if isinstance(g, SparseGrad) else _value_reads(g))}
    needed = [b for b in over if apart[b] in read]
    if needed:
        b = needed[0]
        raise OverwrittenValueError(
            f"the gradient of {op_type} reads its input {b!r}, but {op_type} writes its output over "
            f"{b!r} in place: the gradient would read the output", loc,
            f"give {op_type}'s output a new name instead of {b!r}")


def _value_reads(g: GradOp) -> list:
    """The blobs gradient op ``g`` reads the values of (not those it reads the shape of alone:
    an op writing over its input in place keeps that input's shape, as Add, Sub and WeightedSum do)."""
    opdef = OPS.get(g.type)
    shaped = opdef.shape_operands if opdef is not None else ()
    if callable(shaped):
        shaped = shaped(g.args, len(g.inputs))
    return [b for k, b in enumerate(g.inputs) if k not in shaped]


class VersionMismatchError(GradientError, RuntimeError):
    """A blob written twice, the first value read by nothing: its writer would get the gradient
    of the second value, which has the same name (Caffe2 refuses it too, a RuntimeError)."""



def add_gradient_ops(net, ys, loc=None, strict=True) -> dict:
    """Record the backward ops of ``net`` for the losses ``ys``; return {blob: its gradient}, a
    BlobReference (a GradientSlice of two for a sparse gradient), as Caffe2's map holds them.

    ``strict``: a backward pass that reaches none of the net's inputs is an error (a loss cut
    off from every parameter is a user's mistake); the low-level ``GetBackwardPass`` lifts it."""
    loc = loc or user_location(2)
    seeds = _seeds(ys)
    with NameScope("", reset=True):
        grads = _Reverse(net, loc, strict).run(seeds)

    def ref(g):
        if isinstance(g, GradientSlice):
            return GradientSlice(BlobReference(g.indices, net), BlobReference(g.values, net))
        return BlobReference(g, net)
    return {k: ref(v) for k, v in grads.items()}


def _seeds(ys) -> dict:
    """{loss blob: its given gradient blob or None}, from a list or Caffe2's dict form."""
    if isinstance(ys, dict):
        return {str(k): (None if v is None else str(v)) for k, v in ys.items()}
    if isinstance(ys, (str, BlobReference)):
        ys = [ys]
    return {str(y): None for y in ys}


class _Reverse:
    def __init__(self, net, loc, strict=True):
        self.net, self.loc, self.strict = net, loc, strict
        self.ops = net.ops()
        self.versions()
        self.check_stop_gradients()
        # (op, location, made by a gradient maker, the forward op's device option or None)
        self.records: list[tuple[GradOp, object, bool, object]] = []
        self.parts: dict = defaultdict(list)            # (blob, version) -> provisional names
        self.part_device: dict = {}                     # (blob, version) -> the first reader's device option
        self.done: dict = {}                            # (blob, version) -> gradient name or None
        self.rename: dict = {}
        self.seeds: set = set()                          # the names of the losses' gradients
        self.splits: dict = defaultdict(int)  # blob -> provisional names handed out
        self.grad_map: dict = {}
        # blob -> the version whose gradient Caffe2's pass holds under the blob's name (None:
        # none): what an earlier writer of the blob would be handed (see check_versions)
        self.frontier: dict = {}

    def versions(self):
        """Each op's inputs and outputs as (blob, version); the version a blob ends at."""
        current: dict = defaultdict(int)
        self.ins, self.outs, self.writer = [], [], {}
        for i, op in enumerate(self.ops):
            self.ins.append([(b, current[b]) for b in op.inputs])
            for b in op.outputs:
                current[b] += 1
                self.writer[(b, current[b])] = i
            self.outs.append([(b, current[b]) for b in op.outputs])
        self.final = dict(current)

    def run(self, seeds: dict) -> dict:
        for y, given in seeds.items():
            self.seed(y, given)
        for i in range(len(self.ops) - 1, -1, -1):
            self.backward(i)
        for key in list(self.parts):
            self.finish(key)
        if self.strict and not any(g for key, g in self.done.items() if self.is_source(key)):
            raise GradientError(f"no input of net {self.net.Name()!r} gets a gradient from "
                                f"{', '.join(seeds)}", self.loc,
                                "the loss depends only on constants, integers or StopGradient outputs")
        self.record()
        return self.grad_map

    def check_stop_gradients(self):
        """A StopGradient whose output no op reads stops nothing (its input's readers still
        pass gradients through): Caffe2 refuses it, a ValueError."""
        read = {b for op in self.ops for b in op.inputs}
        for op in self.ops:
            if OPS.canonical(op.type) == "StopGradient" and op.outputs and op.outputs[0] not in read:
                raise GradientError(f"StopGradient's output {op.outputs[0]!r} is read by no op, so it stops no "
                                    "gradient", op.loc, "give StopGradient the same input and output blob, "
                                    f"StopGradient({op.inputs[0]!r}, {op.inputs[0]!r}), or read its output")

    def check_versions(self, i, go):
        """Caffe2 hands an op the gradient its pass holds under each output's name; where
        that is the gradient of a later value of the blob (this op's value read by nothing),
        Caffe2 refuses the net rather than use it: so does dslc, whose names are Caffe2's. (An
        op without a gradient, a fill, is never refused: no gradient op reads that name.)"""
        for (blob, version), g in zip(self.outs[i], go):
            held = self.frontier.get(blob)
            if g is None and held is not None and held != version:
                later = self.ops[self.writer[(blob, held)]] if (blob, held) in self.writer else None
                again = f", and {later.type} at {later.loc} writes it again" if later is not None else ""
                op = self.ops[i]
                raise VersionMismatchError(
                    f"{op.type} writes a value of {blob!r} that no op reads{again}: the gradient "
                    f"{blob + '_grad'!r} is of the later value, not of this op's (a version mismatch, "
                    "which Caffe2 refuses too)", op.loc, f"give one of the two writes of {blob!r} another name")

    def moved(self, i, gi, written):
        """The frontier after op ``i`` gave its inputs the gradients in ``written`` (Caffe2's
        rule: an input keeps the gradient held for its name unless it gets one, or the op
        also writes it)."""
        outputs = set(self.ops[i].outputs)
        for (blob, version), name in zip(self.ins[i], gi):
            got = name in written
            if got or blob not in self.frontier or blob in outputs:
                self.frontier[blob] = version if got else None

    def is_source(self, key) -> bool:
        """Whether blob version ``key`` is where values enter the net: an input, or made by
        an op reading nothing (a fill: a parameter made in the same net)."""
        if key[1] == 0:
            return True
        writer = self.writer.get(key)
        return writer is not None and not self.ops[writer].inputs

    def seed(self, y, given):
        if self.final.get(y, 0) == 0:
            raise GradientError(f"no op of net {self.net.Name()!r} computes {y!r}: there is nothing to "
                                "differentiate", self.loc,
                                "pass the loss blob the net computes (e.g. the AveragedLoss output)")
        name = given or f"{y}_autogen_grad"  # (Caffe2's name for the seed it fills with 1)
        if given is None:
            self.records.append((GradOp("ConstantFill", [y], [name], {"value": 1.0}), self.loc, False, None))
        # (a part like any other: a loss another loss reads gets both gradients, summed into
        # the seed's name, as Caffe2 names it)
        self.parts[(y, self.final[y])].append(name)
        self.seeds.add(name)
        self.frontier[y] = self.final[y]

    def backward(self, i):
        op = self.ops[i]
        go = [self.finish(key) for key in self.outs[i]]
        kind = OPS.canonical(op.type)
        if go and all(self.frontier.get(b) is None for b, _ in self.outs[i]):
            return  # (no gradient reaches it, under any version)
        if kind not in NO_GRADIENT:  # (an op with no gradient makes no op that could read the wrong one)
            self.check_versions(i, go)
        if kind in NO_GRADIENT or (go and all(g is None for g in go)) or (not go and kind not in GRADIENTS):
            if kind in NO_GRADIENT:
                self.moved(i, [None] * len(self.ins[i]), ())
            return  # (an op without outputs has a gradient only by declaring one: ZeroGradient)
        opdef = OPS.get(kind)
        maker = GRADIENTS.get(kind)
        if maker is None or (opdef is not None and opdef.regions):
            raise GradientError(f"{op.type} has no gradient, and the loss depends on its output "
                                f"{op.outputs[go.index(next(g for g in go if g))]!r}", op.loc,
                                "wrap its output in StopGradient if no gradient should flow through it")
        if opdef is not None:
            try:  # (a gradient maker reads inputs and outputs by position: they must fit)
                opdef.check_arity(len(op.inputs), len(op.outputs))
            except DSLError as e:
                raise GradientError(f"{op.type} does not fit its schema: {e.message}", op.loc, e.hint) from None
        device = op.extra.get("device_option")
        go = [self.dense(g, key, op.loc, device) for g, key in zip(go, self.outs[i])]
        gi = [self.part_name(key) for key in self.ins[i]]
        ctx = GradContext(list(op.inputs), list(op.outputs), go, gi, dict(op.args))
        try:
            check_own_overwrite(op.type, maker, ctx, op.loc)
            made = maker(ctx)
        except DSLError as e:
            e.loc = e.loc or op.loc
            raise
        sparse = [g for g in made if isinstance(g, SparseGrad)]
        made = [g for g in made if not isinstance(g, SparseGrad)]
        self.check_reads(i, made)
        written = {b for g in made for b in g.outputs}
        self.moved(i, gi, written | {gi[g.input] for g in sparse})
        for key, name in zip(self.ins[i], gi):
            if name in written:
                self.parts[key].append(name)
                self.part_device.setdefault(key, device)
        for g in sparse:
            self.parts[self.ins[i][g.input]].append(GradientSlice(g.indices, g.values))
        declared = not getattr(maker, "python_maker", False)  # (a Python maker's ops stay as it made them)
        # (as in Caffe2, a gradient op runs where its forward op runs)
        self.records.extend((g, op.loc, declared, device) for g in made)

    def dense(self, grad, key, loc, device=None):
        """``grad`` as a dense gradient blob: a GradientSlice becomes SparseToDense's output."""
        if not isinstance(grad, GradientSlice):
            return grad
        name = f"{key[0]}_grad_dense"
        # (wrap_indices: a Gather's negative id names a row from the end, and its gradient goes there)
        self.records.append((GradOp("SparseToDense", [grad.indices, grad.values, key[0]], [name],
                                    {"wrap_indices": 1}), loc, True, device))
        return name

    def part_name(self, key) -> str:
        blob = key[0]
        n = self.splits[blob]
        self.splits[blob] += 1
        return f"{blob}_grad_autosplit_{n}"

    def check_reads(self, i, made):
        """Backward ops run after the whole forward net: the values they read must still be there."""
        op = self.ops[i]
        needed = dict(self.ins[i])
        needed.update(dict(self.outs[i]))
        for g in made:
            for b in g.inputs:
                v = needed.get(b)
                if v is not None and self.final[b] != v:
                    later = self.ops[self.writer[(b, v + 1)]]
                    raise OverwrittenValueError(
                        f"the gradient of {op.type} needs the value of {b!r} it saw, but {later.type} at "
                        f"{later.loc} overwrites {b!r} afterwards", op.loc,
                        f"give {later.type}'s output a new name instead of writing {b!r} in place")

    def finish(self, key):
        """The gradient of one blob version (a name, or a GradientSlice when it is sparse),
        once all its readers have contributed."""
        if key in self.done:
            return self.done[key]
        parts = self.parts.pop(key, [])
        blob = key[0]
        name = None
        writer = self.writer.get(key)
        where = self.ops[writer].loc if writer is not None else self.loc
        # (where the sum runs: where the blob's writer ran, else where its gradient came from)
        device = self.ops[writer].extra.get("device_option") if writer is not None else self.part_device.get(key)
        if len(parts) == 1 and isinstance(parts[0], GradientSlice):
            name = parts[0]  # (kept sparse: an optimizer updates only its rows)
        elif len(parts) == 1:
            name = parts[0] if parts[0] in self.seeds else f"{blob}_grad"
            self.rename[parts[0]] = name
        elif parts:
            # several readers: their parts add up (a sparse part made dense first). Caffe2's
            # names: the first part (the last reader's) is the gradient itself, the others
            # _<blob>_grad_autosplit_<k>, summed into the first in place
            name = parts[0] if parts[0] in self.seeds else f"{blob}_grad"
            dense = []
            for k, p in enumerate(parts):
                if isinstance(p, GradientSlice):
                    dense.append(self.dense(p, key, where, device))
                    continue
                self.rename[p] = name if k == 0 else f"_{blob}_grad_autosplit_{k - 1}"
                dense.append(self.rename[p])
            self.records.append((GradOp("Sum", dense, [name]), where, False, _sum_device(device)))
        self.done[key] = name
        if name is not None:
            self.grad_map[blob] = name
        elif key[1] < self.final.get(blob, 0):
            # (the map gives the gradient of each blob's earliest version reached: an earlier
            # version without one, as before a StopGradient in place, leaves the blob out)
            self.grad_map.pop(blob, None)
        return name

    def record(self):
        r = self.rename
        for g, loc, made, device in self.records:
            # (as in Caffe2, the ops a gradient maker made are marked is_gradient_op)
            args = dict(g.args, is_gradient_op=True) if made else dict(g.args)
            if device is not None:
                args["device_option"] = device
            if r:
                args = {k: _renamed_net(v, r) for k, v in args.items()}
            self.net._record(g.type, [r.get(b, b) for b in g.inputs], [r.get(b, b) for b in g.outputs],
                             args, loc)


def _sum_device(device):
    """The device option of a Sum the pass adds: ``device``'s, marked as made by the pass
    (only that mark, when ``device`` asks for it), as Caffe2's are."""
    out = caffe2_pb2.DeviceOption()
    if device is not None and f"{ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG}:1" not in device.extra_info:
        out.CopyFrom(device)
    out.extra_info.append(f"{IS_AUTO_GEN_SUM_OPS_TAG}:1")
    return out


def _renamed_net(value, rename: dict):
    """``value`` with ``rename`` applied through it when it is a NetDef (an If gradient's
    branches name the provisional gradient blobs the reverse pass renames at the end)."""
    if not isinstance(value, caffe2_pb2.NetDef):
        return value
    out = caffe2_pb2.NetDef()
    out.CopyFrom(value)
    for op in out.op:
        op.input[:] = [rename.get(b, b) for b in op.input]
        op.output[:] = [rename.get(b, b) for b in op.output]
        for arg in op.arg:
            if arg.HasField("n"):
                arg.n.CopyFrom(_renamed_net(arg.n, rename))
            if arg.name == "inner_blobs":
                arg.strings[:] = [rename.get(b.decode(), b.decode()).encode() for b in arg.strings]
    return out


net_record.set_reverse_pass(add_gradient_ops)  # net.AddGradientOperators(...) runs it
