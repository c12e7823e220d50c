"""Op records to and from Caffe2's protobuf messages (``OperatorDef``, ``NetDef``).

A net is recorded as op records (dslc/trace/oprecord.py); ``net.Proto()`` and
``core.CreateOperator`` show them as real ``caffe2_pb2`` messages, and a message
(edited, copied, parsed from bytes or text) becomes records again when dslc runs it.

Arguments map by their value's type, as Caffe2's ``utils.MakeArgument`` does: a bool
or int -> ``i``, a float -> ``f``, a str or bytes -> ``s``, a list of ints / floats /
strings -> ``ints`` / ``floats`` / ``strings``, a NetDef (or Net) -> ``n``, a TensorProto
-> ``t``. Reading back gives the Python value (``s`` as str when it is UTF-8).

Two things a message cannot hold are kept beside it: the source location of each op,
and a Python op's function. An op message made from a record is remembered (by its
bytes, in a bounded table), so a message op that still matches it reads back as that
very record, location and all. A Python op's function travels as a token
(a string argument, as in Caffe2) naming an object this process registered; a token
from anywhere else (a file) names nothing and is refused, never imported.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict
from sys import intern

import numpy as np
from google.protobuf.message import Message

from dslc.ir.diagnostics import DSLError, Location
from dslc.ir.escape import brief
from dslc.ir.pyrefs import PyRef
from dslc.trace.oprecord import FILL_ALIASES, OpRecord
from dslc.runtime.proto import caffe2 as caffe2_pb2

_REMEMBERED = 1 << 17  # op messages whose records are kept (oldest forgotten first)
_BULKY = 1 << 12  # an op with more values than this is not remembered (a fill of a model's weights)
_known: OrderedDict[bytes, OpRecord] = OrderedDict()
_objects: dict[str, object] = {}  # token -> the object registered under it
# A random part of this process's own: a message written by another process (a file) names no
# object here, rather than whatever this process registered at the same address.
_TOKEN_KIND = "dslc.object:"
_TOKEN = f"{_TOKEN_KIND}{secrets.token_hex(8)}:"


class ProtoError(DSLError, ValueError):
    """A message that cannot become an op record: an argument dslc cannot read, an unknown token."""


def parse_message(cls, data, what: str, loc: Location | None = None, hint: str | None = None):
    """A ``cls`` message from ``data``: bytes in protobuf's wire form, or a str in its text
    form. Bytes or text that are not one, or that nest deeper than protobuf's limit or
    Python's stack, are a ProtoError at ``loc`` naming ``what`` (never protobuf's own error)."""
    msg = cls()
    kind = cls.DESCRIPTOR.name
    try:
        if isinstance(data, str):
            from google.protobuf import text_format
            text_format.Parse(data, msg)
        else:
            msg.ParseFromString(bytes(data))
    except RecursionError:
        raise ProtoError(f"{what} nests messages deeper than dslc reads", loc,
                         "flatten it: no net or plan nests this deep") from None
    except Exception as e:  # (DecodeError, text_format.ParseError: protobuf's word on bad input)
        form = f"{kind} in text form" if isinstance(data, str) else f"serialized {kind}"
        raise ProtoError(f"{what} is not a {form}: {brief(e)}", loc,
                         hint or f"pass a {kind} (or what its SerializeToString() gave)") from None
    return msg


# ----------------------------------------------------------------------------- records -> messages

def _is_net(value) -> bool:
    """A recorded Net (net.py, which builds on this module: it is known by its marker)."""
    return getattr(type(value), "_is_net", False)



def set_argument(arg, name: str, value) -> None:
    """Fill ``arg`` (an Argument message) with ``name`` and ``value`` (see the module docstring)."""
    arg.name = name
    if isinstance(value, np.ndarray):
        if value.ndim and value.size > 1024 and value.dtype.kind == "f":
            # (protobuf parses packed floats as one copy; extending the field takes them one by one)
            body = np.ascontiguousarray(value, dtype="<f4").tobytes()
            arg.MergeFromString(_PACKED_FLOATS + varint_bytes(len(body)) + body)
            return
        value = value.reshape(-1).tolist() if value.ndim else value.item()
    if isinstance(value, (bool, int, np.integer)):
        arg.i = int(value)
    elif isinstance(value, (float, np.floating)):
        arg.f = float(value)
    elif isinstance(value, str):
        arg.s = value.encode()
    elif isinstance(value, bytes):
        arg.s = value
    elif _is_net(value):  # (nets as arguments: RecurrentNetwork's step net, If's branches)
        arg.n.CopyFrom(value.Proto())
    elif isinstance(value, caffe2_pb2.NetDef):
        arg.n.CopyFrom(value)
    elif isinstance(value, caffe2_pb2.TensorProto):
        arg.t.CopyFrom(value)
    elif isinstance(value, (list, tuple)):
        _set_list(arg, name, list(value))
    elif isinstance(value, Message):  # (as Caffe2 does: a message argument is its bytes)
        arg.s = value.SerializeToString()
    else:
        raise ProtoError(f"argument {name!r} of type {type(value).__name__} has no protobuf form", None,
                         "arguments are numbers, strings, lists of them, nets or tensors")


_PACKED_FLOATS = bytes([caffe2_pb2.Argument.DESCRIPTOR.fields_by_name["floats"].number << 3 | 2])


def varint_bytes(n: int) -> bytes:
    """``n`` as protobuf's varint."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _set_list(arg, name: str, values: list) -> None:
    if all(isinstance(v, (bool, int, np.integer)) for v in values):
        arg.ints.extend(int(v) for v in values)
    elif all(isinstance(v, (int, float, np.integer, np.floating)) for v in values):
        arg.floats.extend(float(v) for v in values)
    elif all(isinstance(v, (str, bytes)) for v in values):
        arg.strings.extend(v.encode() if isinstance(v, str) else v for v in values)
    elif all(_is_net(v) or isinstance(v, caffe2_pb2.NetDef) for v in values):
        for v in values:
            arg.nets.add().CopyFrom(v.Proto() if _is_net(v) else v)
    elif all(isinstance(v, caffe2_pb2.TensorProto) for v in values):
        arg.tensors.extend(values)
    else:
        raise ProtoError(f"argument {name!r} mixes values protobuf cannot hold in one list", None,
                         "a list argument holds numbers, strings, nets or tensors, one kind at a time")


def register_object(obj) -> str:
    """The token an argument message names ``obj`` by: an object protobuf cannot hold (a
    Python op's function reference). Tokens are found only in the process that made them."""
    token = f"{_TOKEN}{id(obj):x}"
    _objects[token] = obj
    return token


def fill_op(msg, rec: OpRecord, name: str | None = None, in_net: bool = False):
    """Fill the OperatorDef ``msg`` from ``rec`` (``name``: the op's name, if given one;
    ``in_net``: an op of a net's NetDef); return it."""
    msg.type = rec.type
    msg.input.extend(rec.inputs)
    msg.output.extend(rec.outputs)
    for k, v in rec.args.items():
        set_argument(msg.arg.add(), k, register_object(v) if isinstance(v, PyRef) else v)
    extra = rec.extra
    op_name = name if name is not None else extra.get("name", "")
    if op_name or in_net:  # (a net's ops carry the field even when empty, as Caffe2's do)
        msg.name = op_name
    if extra.get("engine"):
        msg.engine = extra["engine"]
    control = extra.get("control_input") or ()
    msg.control_input.extend([control] if isinstance(control, str) else [str(c) for c in control])
    option = extra.get("device_option")
    if option is not None:
        msg.device_option.CopyFrom(option)
    if extra.get("is_gradient_op"):
        msg.is_gradient_op = True
    if extra.get("debug_info"):
        msg.debug_info = extra["debug_info"]
    if not is_bulky(msg):
        _remember(msg.SerializeToString(deterministic=True), rec)
    return msg


def op_message(rec: OpRecord, name: str | None = None):
    """A new OperatorDef for ``rec``."""
    return fill_op(caffe2_pb2.OperatorDef(), rec, name)


def fill_net(msg, name: str, records, op_names: dict, external_inputs, external_outputs) -> None:
    """Set ``msg``'s name, ops and external lists (its other fields, e.g. ``type``, stay)."""
    msg.name = name
    del msg.op[:]
    for i, rec in enumerate(records):
        fill_op(msg.op.add(), rec, op_names.get(i), in_net=True)
    del msg.external_input[:]
    msg.external_input.extend(external_inputs)
    del msg.external_output[:]
    msg.external_output.extend(external_outputs)


def without_args(msg, drop):
    """A copy of the NetDef ``msg`` without the arguments ``drop`` lists as (op index, arg
    name), made without copying them (a model's weights)."""
    by_op: dict = {}
    for i, name in drop:
        by_op.setdefault(i, set()).add(name)
    out = caffe2_pb2.NetDef()
    _copy_fields(out, msg, "op")
    for i, op in enumerate(msg.op):
        names = by_op.get(i)
        if not names:
            out.op.add().CopyFrom(op)
            continue
        small = out.op.add()
        _copy_fields(small, op, "arg")
        small.arg.extend(a for a in op.arg if a.name not in names)
    return out


def _copy_fields(dst, src, skip: str) -> None:
    """Set ``dst``'s fields to ``src``'s, all but ``skip``."""
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if isinstance(value, Message):
            getattr(dst, fd.name).CopyFrom(value)
        elif isinstance(value, (str, bytes, int, float)):
            setattr(dst, fd.name, value)
        else:
            getattr(dst, fd.name).extend(value)


def _remember(key: bytes, rec: OpRecord) -> None:
    _known[key] = rec
    _known.move_to_end(key)
    if len(_known) > _REMEMBERED:
        _known.popitem(last=False)


# ----------------------------------------------------------------------------- messages -> records

def argument_value(arg):
    """The Python value of an Argument message."""
    for field in ("f", "i", "s", "n", "t"):
        if arg.HasField(field):
            value = getattr(arg, field)
            if field == "s":
                try:
                    return value.decode()
                except UnicodeDecodeError:
                    return value
            return value
    for field in ("floats", "ints", "strings", "nets", "tensors", "qtensors"):
        values = getattr(arg, field)
        if len(values):
            if field == "strings":
                return [v.decode() if _utf8(v) else v for v in values]
            return list(values)
    return []


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


_NOTHING: dict = {}  # the args and extra of a record that has none (shared: records are never changed)


def is_bulky(op) -> bool:
    """Whether the OperatorDef ``op`` holds a long list of values (a fill of a model's
    weights), asked without serializing it (protobuf's ByteSize() would, in full)."""
    return any(a.name == "values" and (len(a.floats) > _BULKY or len(a.ints) > _BULKY) for a in op.arg)


def _fill_values(msg_type: str, arg):
    """A fill's ``values`` as one array (the field's own type: float32 or int64), read from
    the message's repeated field by numpy in one call; None for the other arguments."""
    if arg.name != "values" or FILL_ALIASES.get(msg_type, np.object_) is np.object_:
        return None
    if len(arg.floats):
        return np.array(arg.floats, dtype=np.float32)
    if len(arg.ints):
        return np.array(arg.ints, dtype=np.int64)
    return None


def op_record(msg, loc: Location | None, bulk: dict | None = None) -> OpRecord:
    """The op record of an OperatorDef: the record it was made from if it still matches one,
    else a new record at ``loc`` (where the message entered dslc). ``bulk``: arguments
    read apart from the message (dslc/trace/netdef_wire.py), by name, as arrays.

    A fill's values become one array (never a list of Python numbers): a model's weights
    take their own size once."""
    if _known and not bulk and not is_bulky(msg):
        known = _known.get(msg.SerializeToString(deterministic=True))
        if known is not None:
            return known
    if not msg.arg and not bulk and not msg.name and not msg.engine and not msg.control_input \
            and not msg.is_gradient_op and not msg.debug_info and not msg.HasField("device_option"):
        # (most ops of a NetDef from a file: no argument, no name; blob names interned, so
        # each is held once however many ops name it; a NetDef of 200k ops is 200k records)
        return OpRecord(intern(msg.type), tuple(map(intern, msg.input)), tuple(map(intern, msg.output)), _NOTHING, loc,
                        _NOTHING)
    args = {}
    for arg in msg.arg:
        value = _fill_values(msg.type, arg) if msg.type in FILL_ALIASES else None
        if value is not None:
            args[arg.name] = value
            continue
        value = argument_value(arg)
        if isinstance(value, str) and value.startswith(_TOKEN_KIND):
            if value not in _objects:
                raise ProtoError(f"{msg.type} op {msg.name or ''!r}: argument {arg.name!r} names {value!r}, "
                                 "an object this process never registered", loc,
                                 "a Python op's function cannot come from a message made elsewhere; "
                                 "record the op with net.Python(f)(...) in this process")
            value = _objects[value]
        args[arg.name] = value
    if bulk:
        args.update(bulk)
    extra = {}
    if msg.name:
        extra["name"] = msg.name
    if msg.engine:
        extra["engine"] = msg.engine
    if len(msg.control_input):
        extra["control_input"] = list(msg.control_input)
    if msg.is_gradient_op:
        extra["is_gradient_op"] = True
    if msg.debug_info:
        extra["debug_info"] = msg.debug_info
    if msg.HasField("device_option"):
        option = caffe2_pb2.DeviceOption()
        option.CopyFrom(msg.device_option)
        extra["device_option"] = option
    return OpRecord(intern(msg.type), tuple(map(intern, msg.input)), tuple(map(intern, msg.output)), args or _NOTHING, loc,
                    extra or _NOTHING)


__all__ = ["ProtoError", "argument_value", "fill_net", "fill_op", "op_message", "op_record", "parse_message",
           "is_bulky", "varint_bytes", "without_args",
           "register_object", "set_argument"]
