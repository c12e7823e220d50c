"""Protobuf message classes built at import time from a schema written as data.

dslc ships no ``protoc`` output: a schema here is a list of messages, each a list of
fields ``(label, name, number, type[, default])``, and :func:`build` turns it into a
``FileDescriptorProto`` in a private descriptor pool, then into message classes with
protobuf's own ``message_factory``. The classes are ordinary protobuf messages:
they serialize to the same bytes as those ``protoc`` would generate from the same
``.proto`` (the wire format depends only on field numbers and types), print in text
format and copy, merge and compare as protobuf messages do.

A private pool keeps these descriptors apart from any other module that declares a
package of the same name in the default pool (the real Caffe2 imported in the same
process, say).
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
# ("packed": a repeated scalar field written packed on the wire, as ``[packed = true]`` says)
LABELS = {"optional": F.LABEL_OPTIONAL, "required": F.LABEL_REQUIRED, "repeated": F.LABEL_REPEATED,
          "packed": F.LABEL_REPEATED}
SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32, "bool": F.TYPE_BOOL, "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES,
    "uint32": F.TYPE_UINT32,
}


class Message:
    """One message of a schema: ``fields``, and the ``enums`` and ``nested`` messages it scopes.

    A field's default, when given, is its value; an enum field's default is a value's name."""

    def __init__(self, name: str, fields: list, enums: dict | None = None, nested: list | None = None):
        self.name, self.fields = name, fields
        self.enums, self.nested = enums or {}, nested or []


def build(package: str, file_name: str, enums: dict, messages: list[Message]) -> dict:
    """{name: class or enum} for a schema: top-level messages by name, enums by name."""
    fd = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto2")
    for name, values in enums.items():
        _enum(fd.enum_type.add(), name, values)
    known = _type_names(package, enums, messages)
    for m in messages:
        _message(fd.message_type.add(), m, f"{package}.{m.name}", known)
    pool = descriptor_pool.DescriptorPool()
    file_desc = pool.Add(fd) or pool.FindFileByName(file_name)
    out = {name: file_desc.enum_types_by_name[name] for name in enums}
    for m in messages:
        out[m.name] = message_factory.GetMessageClass(file_desc.message_types_by_name[m.name])
    return out


def _type_names(package: str, enums: dict, messages: list[Message]) -> dict:
    """{type name as a field writes it: (full name, is_enum)}; nested ones as ``Outer.Inner``."""
    known = {name: (f"{package}.{name}", True) for name in enums}

    def walk(m: Message, prefix: str):
        known[prefix + m.name] = (f"{package}.{prefix}{m.name}", False)
        for e in m.enums:
            known[f"{prefix}{m.name}.{e}"] = (f"{package}.{prefix}{m.name}.{e}", True)
        for n in m.nested:
            walk(n, f"{prefix}{m.name}.")

    for m in messages:
        walk(m, "")
    return known


def _enum(ed, name: str, values: list[str | tuple]) -> None:
    ed.name = name
    number = 0
    for v in values:
        vname, number = v if isinstance(v, tuple) else (v, number)
        ed.value.add(name=vname, number=number)
        number += 1


def _message(md, m: Message, full: str, known: dict) -> None:
    md.name = m.name
    for name, values in m.enums.items():
        _enum(md.enum_type.add(), name, values)
    for n in m.nested:
        _message(md.nested_type.add(), n, f"{full}.{n.name}", known)
    scope = full.split(".", 1)[1]  # e.g. "TensorProto": names inside resolve against it first
    for label, name, number, ftype, *default in m.fields:
        fd = md.field.add(name=name, number=number, label=LABELS[label])
        if label == "packed":
            fd.options.packed = True
        if ftype in SCALARS:
            fd.type = SCALARS[ftype]
        else:
            target, is_enum = known.get(f"{scope}.{ftype}") or known[ftype]
            fd.type = F.TYPE_ENUM if is_enum else F.TYPE_MESSAGE
            fd.type_name = "." + target
        if default:
            value = default[0]
            fd.default_value = ("true" if value else "false") if isinstance(value, bool) else str(value)
