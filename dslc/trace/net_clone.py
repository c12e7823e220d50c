"""``Net.Clone`` and ``Net.ClonePartial``: copies of a net, whole or the part between given blobs.

Clone copies the op records (blob names mapped through ``blob_remap``), optionally
only the ops ``op_id_mask`` lists, in the order it lists them.

ClonePartial keeps only the ops needed to compute ``outputs`` from ``inputs``. As in
Caffe2, blobs are told apart by version (each write of a name is a new version), so
an in-place op (``Sum([e], [e])``) is a step of the path, not a cycle. In the copy,
the given inputs take their new names, blobs the kept ops read before anything
writes them keep theirs, and every other blob is prefixed with ``<name>/``::

    n: Concat(a1, a2) -> b1, b2;  Sum(b1, p1) -> c1;  Sum(b2) -> c2;  Sum(c1, c2) -> d
    n.ClonePartial('f', [b1, b2], [d])  ->  Sum(b1, p1) -> f/c1;  Sum(b2) -> f/c2;
                                            Sum(f/c1, f/c2) -> f/d
"""
from __future__ import annotations

from dslc.trace.records import from_blob_list
from dslc.trace.blobref import BlobReference
from dslc.ir.diagnostics import TraceError
from dslc.trace.oprecord import OpRecord
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.tracing import user_location


class CloneError(TraceError, AssertionError):
    """A partial clone that cannot be made (Caffe2 asserts, so this is also an AssertionError)."""


class CloneIndexError(TraceError, IndexError):
    """An ``op_id_mask`` entry that names no op of the net (an IndexError, as in Caffe2)."""


def clone_net(net, name, blob_remap=None, op_id_mask=None, remap_funcs=None, keep_schema=True,
              update_external_list=False, *, new_net):
    """A copy of ``net`` named ``name``, made by ``new_net(name)``; see ``Net.Clone``."""

    if remap_funcs:
        raise TraceError("Clone's remap_funcs rewrite protobuf operators, which dslc nets do not hold",
                         user_location(), "rename blobs with blob_remap={old: new} instead")
    remap = {str(k): str(v) for k, v in (blob_remap or {}).items()}
    new = new_net(name)
    for i in _mask(net, op_id_mask):
        op = net._ops[i]
        args = dict(op.args)
        if remap and op.type in _SUBNETS:
            for key in _SUBNETS[op.type]:
                if isinstance(args.get(key), caffe2_pb2.NetDef):  # (a control op's branch or body: renamed too)
                    sub = new_net(args[key])
                    args[key] = clone_net(sub, sub.Name() + "_remapped", remap, new_net=new_net).Proto()
        new._ops.append(OpRecord(op.type, _mapped(op.inputs, remap), _mapped(op.outputs, remap),
                                 args, op.loc, dict(op.extra)))
        new._produced.update(new._ops[-1].outputs)
    new._external_inputs = dict.fromkeys(_mapped(net._external_inputs, remap))
    new._external_outputs = list(dict.fromkeys(_mapped(net._external_outputs, remap)))
    if net._attributes:
        new._attributes = {key: list(objs) for key, objs in net._attributes.items()}
    if keep_schema:
        new._input_record = _remapped_record(net._input_record, remap, new)
        new._output_record = _remapped_record(net._output_record, remap, new)
    if update_external_list:
        _recompute_external_lists(new)
    if getattr(net, "_proto", None) is not None:  # the NetDef's other fields (type, arg, num_workers...)
        rest = net._proto.__class__()
        rest.CopyFrom(net._proto)
        for field in ("name", "op", "external_input", "external_output"):
            rest.ClearField(field)
        new.Proto().MergeFrom(rest)
    return new


# The control ops whose NetDef arguments are nets run inside them: Clone renames their blobs too.
_SUBNETS = {"If": ("then_net", "else_net"), "AsyncIf": ("then_net", "else_net"), "While": ("loop_net", "cond_net")}


def _mapped(names, remap: dict) -> tuple:
    return tuple(remap.get(b, b) for b in names)


def _mask(net, op_id_mask) -> list:
    """The indices of the ops to copy, in ``op_id_mask``'s order (all ops if it is None)."""
    count = len(net._ops)
    if op_id_mask is None:
        return list(range(count))
    picked = []
    for i in op_id_mask:
        if isinstance(i, bool) or not isinstance(i, int) or not -count <= i < count:
            raise CloneIndexError(f"op_id_mask entry {i!r} is not the index of an op of net "
                                  f"{net.Name()!r}, which has {count} ops", user_location(),
                                  f"list op indices from 0 to {count - 1}")
        picked.append(i % count)
    return picked


def _remapped_record(record, remap: dict, net):
    """``record`` (a schema Field or None) with its blobs renamed through ``remap``, bound to ``net``."""
    if record is None:
        return None
    return from_blob_list(record, [BlobReference(remap.get(str(b), str(b)), net) for b in record.field_blobs()])


def _recompute_external_lists(net) -> None:
    """External inputs: blobs an op reads before any op writes them. External outputs: blobs
    written and not read by a later op (Caffe2's rule for ``update_external_list``)."""
    written, read_after_write = {}, set()
    inputs = {}
    for op in net._ops:
        for b in op.inputs:
            if b in written:
                read_after_write.add(b)
            else:
                inputs.setdefault(b)
        written.update(dict.fromkeys(op.outputs))
    net._external_inputs = inputs
    net._external_outputs = [b for b in written if b not in read_after_write]


# ----------------------------------------------------------------------------- ClonePartial

def clone_partial(net, name, inputs, outputs, remap_funcs=None, *, new_net):
    """``(new_net, [references to the outputs in it])``; see ``Net.ClonePartial``."""
    loc = user_location()
    given = _input_names(inputs, loc)
    wanted = [str(o) for o in outputs]
    for o in wanted:
        if not net.BlobIsDefined(o):
            raise CloneError(f"ClonePartial output {o!r} is not defined in net {net.Name()!r}", loc,
                             "ask for blobs the net's ops write or takes as external inputs")
    path = _VersionedNet(net, given)
    used = path.ops_between(given, wanted)
    making_inputs = path.ops_between((), given)
    clash = sorted(used & making_inputs)
    if clash:
        op = net._ops[clash[0]]
        raise CloneError(f"cannot partially clone net {net.Name()!r}: {op.type} at {op.loc} is needed for "
                         f"{', '.join(wanted)} but also computes the given inputs", loc,
                         "give as inputs blobs that the ops computing the outputs do not make")
    kept = sorted(used)
    read_first = {b for i in kept for b, v in path.ins[i] if v == 0} - set(given)
    prefix = f"{name}/" if name else ""
    remap = {b: given[b] if b in given else b if b in read_first or b not in path.final else prefix + b
             for b in set(path.final) | set(given)}
    new = clone_net(net, name, remap, kept, remap_funcs, new_net=new_net)
    new._external_inputs = dict.fromkeys([remap[b] for b in given] + sorted(read_first))
    new._external_outputs = list(dict.fromkeys(remap[o] for o in wanted))
    return new, [BlobReference(remap[o], new) for o in wanted]


def _input_names(inputs, loc) -> dict:
    """{original name: name in the clone} from a dict, a list of (old, new) pairs, or a list of blobs."""
    if isinstance(inputs, dict):
        pairs = inputs.items()
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(i, tuple) and len(i) == 2
                                                              for i in inputs):
        pairs = inputs
    elif isinstance(inputs, (list, tuple)):
        pairs = [(i, i) for i in inputs]
    else:
        raise CloneError(f"ClonePartial inputs must be a dict, a list of blobs or of (old, new) pairs, "
                         f"got {type(inputs).__name__}", loc)
    return {str(k): str(v) for k, v in pairs}


class _VersionedNet:
    """Each op's inputs and outputs as (blob, version): version 0 is a blob's value before any
    op writes it, each write makes the next version."""

    def __init__(self, net, given: dict):
        current = dict.fromkeys(given, 0)
        self.ins, self.producer = [], {}
        for i, op in enumerate(net._ops):
            self.ins.append([(b, current.get(b, 0)) for b in op.inputs])
            for b in op.outputs:
                current[b] = current.get(b, 0) + 1
                self.producer[(b, current[b])] = i
        self.final = {b: v for b, v in current.items() if v > 0}  # the blobs some op writes

    def ops_between(self, sources, targets) -> set:
        """The ops needed to compute the last version of each of ``targets`` from the last
        version of each of ``sources`` (walking back from the targets, stopping at sources)."""
        stop = {(b, self.final.get(b, 0)) for b in sources}
        todo = [(b, self.final.get(b, 0)) for b in targets]
        used = set()
        while todo:
            key = todo.pop()
            op = self.producer.get(key)
            if key in stop or op is None or op in used:
                continue
            used.add(op)
            todo.extend(self.ins[op])
        return used
