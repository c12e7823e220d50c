"""Ops the plan writes in their own words instead of ``Op(args, attr=value)``.

Each entry takes the op, its operand expressions, its non-default attributes (as
text, already formatted) and the plan's blob namer, and returns the right-hand side
of its line::

    q = Queue(capacity=4)            CreateBlobsQueue {capacity = 4}
    q.put(a, b)                      EnqueueBlobs(%q, %a, %b)
    a, b = q.get()                   DequeueBlobs(%q)
    a, b, done = q.get_unless_closed()
    Save(x, y, db='/ck/n.3')         Save(%x, %y) {db = "/ck/n.3", input_names = ["x", "y"]}

An op missing here (or not declared at all) is written the generic way. Results that are
an operand again (a queue write hands back its inputs) are ``aliased`` (backends/common/names.py).
"""
from __future__ import annotations


def _kw(attrs: dict, drop=()) -> list[str]:
    return [f"{k}={v}" for k, v in attrs.items() if k not in drop]


def _method(name: str):
    def write(op, args, attrs, blob):
        return f"{args[0]}.{name}({', '.join(args[1:] + _kw(attrs))})"
    return write


def _call(shown: str, drop=()):
    def write(op, args, attrs, blob):
        return f"{shown}({', '.join(args + _kw(attrs, drop))})"
    return write


def _save(op, args, attrs, blob):
    """A checkpoint is about blobs: name them (a saved constant is still the blob ``w``)."""
    names = op.attrs.get("input_names") or []
    shown = [blob(n) for n in names] if len(names) == len(args) else args
    return f"Save({', '.join(shown + _kw(attrs, ('input_names',)))})"


SPECIAL = {
    "CreateBlobsQueue": _call("Queue", drop=("enforce_unique_name",)),
    "EnqueueBlobs": _method("put"),
    "SafeEnqueueBlobs": _method("put_unless_closed"),
    "DequeueBlobs": _method("get"),
    "SafeDequeueBlobs": _method("get_unless_closed"),
    "CloseBlobsQueue": _method("close"),
    # the blob names these carry are for the runtime; the plan shows the values
    "Save": _save,
    "Load": _call("Load", drop=("output_names",)),
    "Print": _call("Print", drop=("blob",)),
    "Summarize": _call("Summarize", drop=("blob",)),
}
