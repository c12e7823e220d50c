"""Net: a recorded network's ops, the blob names it makes and reads, and its composition.

Recording itself (``net.<Op>(...)``, ``net.Const`` ...) is in dslc/trace/net_record.py; copies
(``Clone``, ``ClonePartial``) in dslc/trace/net_clone.py.
"""
from __future__ import annotations

import copy
import hashlib

import numpy as np

from dslc.trace import names, net_clone, netdef
from dslc.trace.blobref import BlobReference, CurrentNameScope, ScopedBlobReference, ScopedName
from dslc.ir.diagnostics import TraceError
from dslc.ir.gcpause import paused
from dslc.trace.net_record import NetRecording, _OpRecorder
from dslc.trace.oprecord import FILL_ALIASES, OpRecord
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.tracing import call_site, user_location


_BULK = 1 << 16  # a fill's values of at least this many bytes are held by its record alone


def _digest(msg) -> bytes:
    """A digest of ``msg``'s bytes: what _pull compares (a net of a model's weights is not
    kept a second time as bytes)."""
    return hashlib.blake2b(msg.SerializeToString(), digest_size=16).digest()


def _not_a_name(got):
    raise TraceError(f"core.Net takes a name, a Net or a NetDef from net.Proto(), not a {type(got).__name__}",
                     user_location(), "pass the net's name (a str), the Net itself, or net.Proto()")


class Net(NetRecording):
    """A recorded network: ops in order, plus the names it produces and reads."""

    _is_net = True  # (how netdef.py and net_ssa.py, below this module, know a Net)
    # Parts most nets never use start as these class-level defaults (a task makes a net per
    # block, most with a few ops); the first write gives the net its own.
    _external_outputs: list[str] | tuple = ()
    _registered: set[str] | None = None  # names NextBlob handed out
    _attributes: dict[str, list] | None = None
    _input_record = None
    _output_record = None
    _next_blob = 0
    _next_index: dict[tuple, int] | None = None  # (scope, base, suffix) -> where _next_name's scan resumes
    _op_names: dict[int, str] | None = None  # op index -> the name PopulateProtoWithFileName gave it
    _message = None  # the NetDef Proto() hands out (``_proto``), kept in step with the records (see _pull)
    _source = None  # a copied NetDef's bytes, until its message is first asked for (``_proto``)
    _synced = None  # _proto's digest when it last agreed with the records (None: not known)
    _bulk_args: list | tuple = ()  # (op index, arg name) of the fill values _source leaves out

    def __init__(self, name_or_proto=None, inplace=False, _prefix=None, _bulk=None):
        """A new net named ``name_or_proto``, or a copy of a Net or of a NetDef message
        (``net.Proto()``, or one parsed or built by hand): its ops, external inputs and outputs.
        With ``inplace``, a NetDef is not copied: it is this net's Proto() (its name kept), and
        a change made to it is what the net runs, as in Caffe2."""
        # (_prefix: the innermost builder's name, from a caller that has that builder at hand)
        src = name_or_proto if isinstance(name_or_proto, (Net, caffe2_pb2.NetDef)) else None
        if src is None and name_or_proto is not None and not isinstance(name_or_proto, str):
            _not_a_name(name_or_proto)
        requested = name_or_proto if src is None else src.name if isinstance(src, caffe2_pb2.NetDef) else src._name
        prefix = _builder_prefix() if _prefix is None else _prefix
        self._name = names.unique_net_name(prefix, requested)
        self._op_list: list[OpRecord] = []
        self._produced: set[str] = set()
        self._external_inputs: dict[str, None] = {}  # an ordered set: O(1) membership
        if isinstance(src, Net):
            self.AppendNet(src)
        elif src is not None and inplace:
            self._name = src.name
            self._load(src, user_location())
            self._proto = src
            self._synced = _digest(src)
        elif src is not None:
            self._copy_proto(src, _bulk)

    def _copy_proto(self, proto, bulk=None) -> None:
        """The ops of a NetDef (the very records, for ops made from records), its external
        lists, and its other fields (type, arg ...), which the copy's Proto() keeps.
        ``bulk``: {(op index, arg name): array} read apart from ``proto`` (a fill's values,
        dslc/trace/netdef_wire.py).

        The copy is kept as bytes (protobuf's wire form is about a tenth of its message
        in memory: 29 against some 330 bytes per op of a NetDef of 200k ops), its message
        made when something first asks for it (Proto(), a recorded op, a clone). A fill's
        values are not in those bytes: they are in its record, as one array (a model's
        weights are held once), and go back into the message when it is made."""
        self._load(proto, user_location(), bulk)
        self._bulk_args = [(i, name) for i, rec in enumerate(self._op_list) if rec.type in FILL_ALIASES
                           for name, v in rec.args.items() if isinstance(v, np.ndarray) and v.nbytes >= _BULK]
        if self._bulk_args or bulk:
            proto = netdef.without_args(proto, self._bulk_args)
        # (bytes parse as one message merged from both parts: the net's own name, last, wins)
        self._source = proto.SerializeToString() + caffe2_pb2.NetDef(name=self._name).SerializeToString()

    @property
    def _proto(self):
        """The NetDef this net hands out (made from a copied NetDef's bytes when first
        asked for), or None while nobody has asked."""
        msg = self._message
        if msg is None and self._source is not None:
            msg = self._message = caffe2_pb2.NetDef.FromString(self._source)
            self._source = None
            for i, name in self._bulk_args:
                netdef.set_argument(msg.op[i].arg.add(), name, self._op_list[i].args[name])
            self._bulk_args = ()
            self._synced = _digest(msg)  # (the records were made from it)
        return msg

    @_proto.setter
    def _proto(self, msg) -> None:
        self._message, self._source = msg, None

    def _load(self, msg, loc, bulk=None) -> None:
        """Records from the NetDef ``msg`` (ops the user added or changed are located at ``loc``;
        ``bulk`` as in _copy_proto)."""
        with paused():  # (a record per op, each a few objects: no rescan of them all as they come)
            if bulk:
                by_op: dict = {}
                for (i, name), value in bulk.items():
                    by_op.setdefault(i, {})[name] = value
                self._op_list = [netdef.op_record(op, loc, by_op.get(i)) for i, op in enumerate(msg.op)]
            else:
                self._op_list = [netdef.op_record(op, loc) for op in msg.op]
        self._op_names = None
        for i, (op, rec) in enumerate(zip(msg.op, self._op_list)):
            if op.name != rec.extra.get("name", ""):  # (a name PopulateProtoWithFileName gave)
                self._op_names = self._op_names or {}
                self._op_names[i] = op.name
        self._produced.update(b for rec in self._op_list for b in rec.outputs)
        self._external_inputs = dict.fromkeys(msg.external_input)
        self._external_outputs = list(msg.external_output)

    # --- the NetDef mirror
    @property
    def _ops(self) -> list[OpRecord]:
        """The op records, with any change made through ``Proto()`` read in first."""
        if self._message is not None:  # (a message nobody was given has no changes to read)
            self._pull()
        return self._op_list

    def _fresh(self):
        msg = caffe2_pb2.NetDef()
        netdef.fill_net(msg, self._name, self._op_list, self._op_names or {}, self._external_inputs,
                        self._external_outputs)
        return msg

    def _pull(self) -> None:
        """Read the handed-out NetDef back when the user changed it (ops, external lists, name).

        Recording mirrors each new op into the message as it goes (_mirror), so the message
        differs from one built afresh from the records only where the user edited it.
        Bytes equal to those it had when it last agreed with the records answer first:
        building it afresh costs far more than serializing it (a NetDef of 200k ops)."""
        mine = self._proto
        now = _digest(mine)
        if now == self._synced:
            return
        fresh = self._fresh()
        if not (mine.name == fresh.name and mine.op == fresh.op and mine.external_input == fresh.external_input
                and mine.external_output == fresh.external_output):
            if mine.name != self._name:
                self._name = mine.name
            self._load(mine, user_location())
        self._synced = now

    def _push(self) -> None:
        """Rewrite the handed-out NetDef from the records (its other fields stay)."""
        netdef.fill_net(self._proto, self._name, self._op_list, self._op_names or {}, self._external_inputs,
                        self._external_outputs)
        self._synced = _digest(self._proto)

    def _mirror(self, rec: OpRecord, new_inputs) -> None:
        """Append one just-recorded op (and the external inputs it added) to the handed-out NetDef."""
        netdef.fill_op(self._proto.op.add(), rec, in_net=True)
        self._proto.external_input.extend(new_inputs)
        self._synced = None  # (in step still, but its bytes are new: _pull compares once)

    # --- identity
    def Name(self) -> str:
        return self._name

    def Proto(self):
        """This net as a NetDef message (name, op, external_input/output).

        The same message each time, as in Caffe2: ops recorded later appear in it, and a
        change made to it (an op added, removed or edited, an external list, the name) is
        what the net runs from then on."""
        if self._proto is None:
            self._proto = caffe2_pb2.NetDef()
            self._push()
        else:
            self._pull()
        return self._proto

    @property
    def _net(self):
        """Caffe2's attribute for the NetDef (code reaches in for ``net._net.op[-1]``)."""
        return self.Proto()

    def __str__(self):
        return self._name  # Caffe2 code runs nets by name: workspace.RunNet(str(net))

    def __repr__(self):
        return f"Net({self._name!r}, {len(self._ops)} ops)"

    def PopulateProtoWithFileName(self):
        """Name each op ``file:line:function`` after the user's call that recorded it."""
        self._op_names = {}
        for i, op in enumerate(self._ops):
            file, func = call_site(op.loc)
            self._op_names[i] = f"{file}:{op.loc.line}:{func}"
        if self._proto is not None:
            self._push()

    def RunAllOnGPU(self, gpu_id=0, use_cudnn=False):
        """Caffe2's: the net's device option, and its recurrent networks' step nets', say GPU
        ``gpu_id`` (and, with ``use_cudnn``, its ops' engine cuDNN). Recorded, not acted on:
        dslc runs every device option's ops on the CPU (dslc/trace/devices.py)."""
        proto = self.Proto()
        gpu = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA, device_id=gpu_id)
        proto.device_option.CopyFrom(gpu)
        for op in proto.op:
            if use_cudnn:
                op.engine = "CUDNN"
            for arg in op.arg if op.type == "RecurrentNetwork" else ():
                if arg.name == "step_net" and arg.HasField("n"):
                    arg.n.device_option.CopyFrom(gpu)

    def _CheckLookupTables(self):
        """Assert that the names this net counts as made are those its ops write."""
        made = {b for op in self._ops for b in op.outputs}
        assert made <= self._produced, f"ops of {self._name} write {sorted(made - self._produced)} unrecorded"

    # --- names
    def BlobIsDefined(self, blob) -> bool:
        name = str(blob)
        return name in self._produced or name in self._external_inputs

    def NextName(self, prefix=None, output_id=None) -> str:
        """An unused auto name: ``<net>/<prefix>[:id]``, then ``_2``, ``_3`` ...; no prefix: ``<net>_blob_<k>``.

        Net ``local/task``: ``NextName('Add')`` -> ``local/task/Add`` (then ``Add_2``);
        ``NextName('Fill', 0)`` -> ``local/task/Fill:0`` (then ``Fill_2:0``). The caller
        adds the NameScope; candidates are checked with it, as Caffe2 does.
        """
        return self._next_name(prefix, output_id, CurrentNameScope())

    def _next_name(self, prefix, output_id, scope: str) -> str:
        """``NextName`` under the NameScope ``scope`` (callers naming several outputs look it up once)."""
        if not prefix:
            name = f"{self._name}_blob_{self._next_blob}"
            while self.BlobIsDefined(name):  # Caffe2 does not check; a collision helps nobody
                self._next_blob += 1
                name = f"{self._name}_blob_{self._next_blob}"
            self._next_blob += 1
            return name
        base = f"{self._name}/{prefix}"
        suffix = "" if output_id is None else f":{output_id}"
        candidate = base + suffix
        produced, external = self._produced, self._external_inputs
        scoped = scope + candidate
        if not (scoped in produced or scoped in external):  # BlobIsDefined, inlined: runs per auto name
            return candidate
        # The first free index from 2 up. Names are never undefined, so the scan resumes
        # where the last one for these parts stopped (from 2 each time it was quadratic).
        if self._next_index is None:
            self._next_index = {}
        key = (scope, base, suffix)
        index = self._next_index.get(key, 2)
        while True:
            candidate = f"{base}_{index}{suffix}"
            scoped = scope + candidate
            if not (scoped in produced or scoped in external):
                break
            index += 1
        self._next_index[key] = index  # not past it: NextName() alone does not define the name
        return candidate

    def _reserve(self, prefix, output_id=None) -> str:
        """Take an auto name as if an op produced it (keeps later auto names in step with Caffe2)."""
        scope = CurrentNameScope()
        name = scope + self._next_name(prefix, output_id, scope)
        self._produced.add(name)
        return name

    def NextBlob(self, prefix="unnamed") -> BlobReference:
        """``prefix`` if this net neither made nor handed it out yet, else ``prefix_auto_0``, ``_auto_1`` ..."""
        return BlobReference(self._next_registered(str(prefix)), self)

    def NextScopedBlob(self, prefix="unnamed") -> BlobReference:
        """``NextBlob`` of the NameScope-qualified ``prefix``."""
        return BlobReference(self._next_registered(ScopedName(str(prefix))), self)

    def _next_registered(self, name: str) -> str:
        if self._registered is None:
            self._registered = set()
        candidate, k = name, 0
        while candidate in self._registered or self.BlobIsDefined(candidate):
            candidate = f"{name}_auto_{k}"
            k += 1
        self._registered.add(candidate)
        return candidate

    def AddExternalInput(self, *inputs):
        if self._proto is not None:
            self._pull()
        refs = []
        for b in inputs:
            for ref in (b if isinstance(b, (list, tuple)) else [b]):
                ref = ref if isinstance(ref, BlobReference) else BlobReference(str(ref), self)
                self._external_inputs.setdefault(str(ref))
                refs.append(BlobReference(str(ref), self))
        if self._proto is not None:
            self._push()
        return refs[0] if len(refs) == 1 else refs

    AddExternalInputs = AddExternalInput

    def AddExternalOutput(self, *outputs):
        if self._proto is not None:
            self._pull()
        if not self._external_outputs:
            self._external_outputs = []  # (the class default is an empty tuple)
        for b in outputs:
            for ref in (b if isinstance(b, (list, tuple)) else [b]):
                if str(ref) not in self._external_outputs:
                    self._external_outputs.append(str(ref))
        if self._proto is not None:
            self._push()

    AddExternalOutputs = AddExternalOutput

    def AddScopedExternalInputs(self, *inputs):
        """``AddExternalInput`` of the names under the current NameScope."""
        return self.AddExternalInput(*[ScopedBlobReference(str(b)) for b in inputs])

    def AddScopedExternalOutputs(self, *outputs):
        return self.AddExternalOutput(*[ScopedBlobReference(str(b)) for b in outputs])

    @property
    def external_inputs(self) -> list:
        return [BlobReference(n, self) for n in self._external_inputs]

    @property
    def external_outputs(self) -> list:
        return [BlobReference(n, self) for n in self._external_outputs]

    def UsedBlobNames(self) -> set[str]:
        used = set(self._external_inputs) | set(self._external_outputs)
        for op in self._ops:
            used.update(op.inputs)
            used.update(op.outputs)
        return used

    # --- attributes (setup blocks, report steps)
    def add_attribute(self, key, obj):
        if self._attributes is None:
            self._attributes = {}
        self._attributes.setdefault(key, []).append(obj)

    def get_attributes(self, key):
        return self._attributes.get(key, []) if self._attributes else []

    # --- records (schema)
    def set_input_record(self, record):
        self._input_record = record
        return record

    def set_output_record(self, record):
        self._output_record = record
        return record

    def input_record(self):
        return self._input_record

    def output_record(self):
        return self._output_record

    # --- composition
    def AppendNet(self, other: "Net") -> "Net":
        """Append ``other``'s ops; its external inputs not produced here become ours (attributes stay)."""
        self._extend_ops(other)
        self.AddExternalOutput(*other._external_outputs)
        return self

    def _extend_ops(self, other: "Net") -> None:
        """Append ``other``'s ops; its external inputs not produced here become ours."""
        mine = self._ops  # (reads in a change made through Proto())
        for b in other._external_inputs:
            if b not in self._produced:
                self._external_inputs.setdefault(b)
        for op in other._ops:
            mine.append(op)
            self._produced.update(op.outputs)
        if self._proto is not None:
            self._push()

    def Clone(self, name, blob_remap=None, op_id_mask=None, remap_funcs=None, keep_schema=True,
              update_external_list=False) -> "Net":
        """A copy named ``name``: blob names mapped through ``blob_remap``, only the ops
        ``op_id_mask`` lists (in its order), external lists recomputed from the ops if
        ``update_external_list``. See dslc/trace/net_clone.py."""
        return net_clone.clone_net(self, name, blob_remap, op_id_mask, remap_funcs, keep_schema,
                                   update_external_list, new_net=Net)

    def ClonePartial(self, name, inputs, outputs, remap_funcs=None) -> tuple:
        """``(net, refs)``: the ops computing ``outputs`` from ``inputs`` (a list, or a dict
        renaming them), other blobs prefixed ``<name>/``. See dslc/trace/net_clone.py."""
        return net_clone.clone_partial(self, name, inputs, outputs, remap_funcs, new_net=Net)

    def ops(self) -> list[OpRecord]:
        return list(self._ops)

    def reroute_tensor(self, tensor, new_producer, can_modify=None) -> int:
        """Insert the operator ``new_producer`` (which reads ``tensor``) right after the op that
        makes ``tensor`` (first, for an external input), and have the later ops read its first
        output instead of ``tensor``: those in ``can_modify`` (operator messages, compared by
        value), else all of them. Returns how many ops now read the new blob."""
        tensor = str(tensor)
        proto = self.Proto()
        ops = [copy.deepcopy(op) for op in proto.op]
        if tensor in proto.external_input:
            at = 0
        else:
            if tensor not in new_producer.input:
                raise TraceError(f"reroute_tensor: the new {new_producer.type} does not read {tensor!r}",
                                 user_location(), f"give it {tensor!r} as an input")
            at = next((i + 1 for i, op in enumerate(ops) if tensor in op.output), None)
            if at is None:
                raise TraceError(f"reroute_tensor: no op of net {self._name!r} makes {tensor!r}", user_location(),
                                 "name a blob an op of this net writes, or an external input")
        new_tensor = new_producer.output[0]
        count = 0
        for op in ops[at:]:
            if tensor in op.input and (can_modify is None or op in can_modify):
                op.input[:] = [new_tensor if b == tensor else b for b in op.input]
                count += 1
        del proto.op[:]
        proto.op.extend(ops[:at] + [new_producer] + ops[at:])
        return count


_OpRecorder.owner = Net


def _no_builder() -> str:
    return ""


# The name of the innermost open NetBuilder ("" if none): a new net's name starts with it.
# The builder (builder_base.py, which builds on Net) installs its lookup when it is imported;
# until then no NetBuilder can be open.
_builder_prefix = _no_builder


def set_builder_prefix(lookup) -> None:
    global _builder_prefix
    _builder_prefix = lookup

