"""Read-only views shaped like Caffe2's protobuf messages (``net.Proto()``, ``core.CreateOperator``).

Caffe2 code reads a net through its NetDef: ``net.Proto().op[i].type``,
``.input``, ``.output``, ``.arg``, ``.name``, ``net.Proto().external_output[-1]``.
dslc keeps records, not protobufs; these views show the same fields, taken from
the records when asked. They cannot be changed (editing a protobuf in place is
how Caffe2 code rewrites nets; dslc records ops through the Net instead), and a
change is a located error saying so (docs/differences.md).
"""
from __future__ import annotations

import numpy as np

from dslc.ir.diagnostics import TraceError
from dslc.tracing import user_location

_READ_ONLY_HINT = "Proto() is a read-only view in dslc: record ops through the Net (net.<Op>(...)) instead"


def _read_only(what: str):
    raise TraceError(f"cannot change {what}: it is a read-only view", user_location(2), _READ_ONLY_HINT)


class Repeated(tuple):
    """A repeated field: reads like a list, refuses the protobuf mutators."""

    def _refuse(self, *args, **kwargs):
        _read_only("a repeated field of a proto view")

    extend = append = add = remove = insert = pop = MergeFrom = CopyFrom = _refuse


class _View:
    """Fields are set once at construction; assigning one afterwards is an error. A view
    cannot change, so a copy (``copy.deepcopy(net.Proto())``) is the view itself."""

    __slots__ = ()
    _fields: tuple = ()  # the message's fields (other slots are dslc's own)

    def __setattr__(self, name, value):
        _read_only(f"{type(self).__name__}.{name}")

    def _init(self, **fields):
        for k, v in fields.items():
            object.__setattr__(self, k, v)

    def __eq__(self, other):
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in self._fields)

    def __hash__(self):
        return hash(tuple(getattr(self, k) for k in self._fields))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._fields)})"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def HasField(self, name: str) -> bool:
        """Whether an optional message field is set (only device_option is optional here)."""
        return getattr(self, name, None) is not None


class Argument(_View):
    """One operator argument: ``name`` and the field its value's type fills (i, f, s, ints...)."""

    __slots__ = _fields = ("name", "i", "f", "s", "ints", "floats", "strings")

    def __init__(self, name: str, value):
        fields = dict(i=0, f=0.0, s=b"", ints=Repeated(), floats=Repeated(), strings=Repeated())
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, (bool, int, np.integer)):
            fields["i"] = int(value)
        elif isinstance(value, (float, np.floating)):
            fields["f"] = float(value)
        elif isinstance(value, (str, bytes)):
            fields["s"] = value.encode() if isinstance(value, str) else value
        elif isinstance(value, (list, tuple)):
            kinds = {type(v) for v in value}
            if kinds and all(issubclass(k, (bool, int, np.integer)) for k in kinds):
                fields["ints"] = Repeated(int(v) for v in value)
            elif kinds and all(issubclass(k, (str, bytes)) for k in kinds):
                fields["strings"] = Repeated(v.encode() if isinstance(v, str) else v for v in value)
            else:
                fields["floats"] = Repeated(float(v) for v in value)
        self._init(name=name, **fields)


class OperatorDef(_View):
    """An operator as Caffe2's OperatorDef shows it."""

    _fields = ("type", "input", "output", "arg", "name", "engine", "control_input", "device_option")
    __slots__ = _fields + ("record",)  # record: the op record shown (a Net made from the view copies it)

    def __init__(self, type, inputs, outputs, args: dict, name="", engine="", control_input=(),
                 device_option=None, record=None):
        self._init(type=type, input=Repeated(inputs), output=Repeated(outputs),
                   arg=Repeated(Argument(k, v) for k, v in args.items() if not callable(v)),
                   name=name or "", engine=engine or "", control_input=Repeated(control_input),
                   device_option=device_option, record=record)


class NetDef(_View):
    """A net as Caffe2's NetDef shows it: name, ops, external inputs and outputs."""

    __slots__ = _fields = ("name", "op", "external_input", "external_output", "type")

    def __init__(self, name, ops, external_input, external_output):
        self._init(name=name, op=Repeated(ops), external_input=Repeated(external_input),
                   external_output=Repeated(external_output), type="")


def operator_view(rec, name: str | None = None) -> OperatorDef:
    """The OperatorDef view of one op record (``name``: the op's name, if given one)."""
    extra = rec.extra
    control = extra.get("control_input") or ()
    control = [control] if isinstance(control, str) else [str(c) for c in control]
    return OperatorDef(rec.type, rec.inputs, rec.outputs, rec.args,
                       name=name if name is not None else extra.get("name", ""),
                       engine=extra.get("engine", ""), control_input=control,
                       device_option=extra.get("device_option"), record=rec)


__all__ = ["Argument", "NetDef", "OperatorDef", "Repeated", "operator_view"]
