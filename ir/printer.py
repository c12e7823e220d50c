"""The IR's text form.

    %r = Add(%a, %b) : i64  loc("job.py":12)
    for(%n) {
    ^(%i: i64):
      ...
    }  loc("job.py":10)

Values print as ``%name`` (from a blob-name hint or a number), blob names as
``@"name"``, ops with several regions label each one (``then {...} else {...}``).
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

from .core import Module, Operation, Region, Symbol, Value
from .pyrefs import PyRef
from .types import Type, dtype_of_numpy

_HINT_RE = re.compile(r"[^A-Za-z0-9_]")

# The version of the IR's text form. A file written to disk starts with a stamp naming it
# (``// dslir 1, written by dslc 0.1.0``); the parser reads a file without one as version 1 and
# refuses a newer version, naming the dslc that wrote it. Raise it when old text would be
# read wrongly (an op's meaning or an attribute's form changes), not for additions.
IR_VERSION = 1
STAMP = re.compile(r"^// dslir (\d+)(?:, written by dslc (\S+))?")


def stamped(text: str, writer: str) -> str:
    """``text`` (printed modules) with the version stamp a file of it begins with."""
    return f"// dslir {IR_VERSION}, written by dslc {writer}\n{text}"


def format_attr(v) -> str:
    if isinstance(v, Symbol):
        return "@" + json.dumps(str(v))
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return format_float(v)
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "none"
    if isinstance(v, PyRef):
        return _format_pyref(v)
    if isinstance(v, np.ndarray):
        return _format_dense(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, Type):
        return f"type<{v}>"
    raise TypeError(f"cannot print attribute value {v!r}")


def _format_pyref(v: PyRef) -> str:
    """``pyref<token, "name", "why">`` (this process only) or ``pyref<"name", "source"[, "args"]>``."""
    if v.token is not None:
        return f"pyref<{v.token}, {json.dumps(v.name)}, {json.dumps(v.why)}>"
    parts = [v.name, v.source] + ([v.args] if v.args else [])
    return "pyref<" + ", ".join(map(json.dumps, parts)) + ">"


def _format_float(f: float, dtype: str = "f64") -> str:
    """The shortest text that reads back to the same value of ``dtype`` (f32: 0.9, not the
    double expansion of its float32, 0.8999999761581421)."""
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    s = str(np.float32(f)) if dtype == "f32" else str(np.float16(f)) if dtype == "f16" else repr(f)
    return s if ("." in s or "e" in s or "n" in s) else s + ".0"


def format_float(x) -> str:
    """A float as the IR and the plan print it: a float32 (or float16) as the shortest text that
    reads back to it, any other float as Python's repr."""
    dtype = "f32" if isinstance(x, np.float32) else "f16" if isinstance(x, np.float16) else "f64"
    return _format_float(float(x), dtype)


def _format_dense(a: np.ndarray) -> str:
    dt = dtype_of_numpy(a.dtype)
    shape = "" if a.ndim == 0 else "[" + ",".join(map(str, a.shape)) + "]"
    flat = a.reshape(-1)
    if dt == "str":
        items = [json.dumps(str(x)) for x in flat]
    elif dt == "bool":
        items = ["true" if x else "false" for x in flat]
    elif dt.startswith("f"):
        items = [_format_float(float(x), dt) for x in flat]
    else:
        items = [str(int(x)) for x in flat]
    return f"dense<{dt}{shape}: " + ", ".join(items) + ">"


def format_loc(loc) -> str:
    return f"loc({json.dumps(loc.file)}:{loc.line})"


class Printer:
    """Prints ops with stable value names: same module, same text."""

    def __init__(self, with_locs: bool = True):
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        self.with_locs = with_locs
        self.lines: list[str] = []

    def name(self, v: Value) -> str:
        n = self.names.get(v)
        if n is None:
            n = self._fresh(v.hint)
            self.names[v] = n
        return "%" + n

    def _fresh(self, hint: str | None) -> str:
        if hint:
            base = _HINT_RE.sub("_", hint)
            if base[0].isdigit():
                base = "_" + base
            n, k = base, 1
            while n in self.used:
                n = f"{base}_{k}"
                k += 1
        else:
            while str(self.counter) in self.used:
                self.counter += 1
            n = str(self.counter)
            self.counter += 1
        self.used.add(n)
        return n

    def op(self, op: Operation, indent: int) -> None:
        pad = "  " * indent
        head = ""
        if op.results:
            head = ", ".join(self.name(r) for r in op.results) + " = "
        head += op.name
        sym = op.opdef.symbol
        if sym:
            head += " " + format_attr(Symbol(op.attrs[sym]))
        if op.operands:
            head += "(" + ", ".join(self.name(v) for v in op.operands) + ")"
        attrs = [(k, op.attrs[k]) for k in _attr_order(op) if k != sym and not _is_default(op, k, op.attrs[k])]
        if attrs:
            head += " {" + ", ".join(f"{k} = {format_attr(v)}" for k, v in attrs) + "}"
        if op.results:
            head += " : " + ", ".join(str(r.type) for r in op.results)
        loc = f"  {format_loc(op.loc)}" if self.with_locs and op.loc.line else ""
        regions = [(n, r) for n, r in zip(_region_names(op), op.regions)]
        if not regions:
            self.lines.append(pad + head + loc)
            return
        labelled = len(op.opdef.regions) > 1 or op.opdef.regions == ("*",)
        shown = [(n, r) for n, r in regions if not (labelled and n and r.empty)]
        text = head
        for i, (n, r) in enumerate(shown):
            text += (" " + n if n and labelled else "") + " {"
            self.lines.append(pad + text)
            self.region(r, indent)
            text = "}"
        self.lines.append(pad + text + loc)

    def region(self, r: Region, indent: int) -> None:
        if r.args:
            args = ", ".join(f"{self.name(a)}: {a.type}" for a in r.args)
            self.lines.append("  " * indent + f"^({args}):")
        for op in r.ops:
            self.op(op, indent + 1)


def _region_names(op: Operation):
    names = op.opdef.regions
    if names == ("*",):
        return [""] * len(op.regions)
    return list(names)


def _attr_order(op: Operation) -> list[str]:
    """The op's attribute names in declaration order (the order the parser rebuilds),
    then any undeclared ones: the text does not depend on how the dict was filled."""
    declared = [k for k in op.opdef.attrs if k in op.attrs]
    return declared + [k for k in op.attrs if k not in op.opdef.attrs]


def _is_default(op: Operation, key: str, value) -> bool:
    """Whether ``value`` prints as the attribute's default (then the text leaves it out).

    Compared as text, not as Python values: ``np.int64(0)`` for a default of ``0`` is
    left out too, where comparing types would print it, and the parser, filling in the
    plain default, would make the next print leave it out.
    """
    default = op.opdef.attrs.get(key)
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    try:
        return format_attr(value) == format_attr(default)
    except TypeError:  # REQUIRED, or a value with no text form: print it (or fail) as it is
        return False


def print_op(op: Operation, with_locs: bool = True) -> str:
    p = Printer(with_locs)
    p.op(op, 0)
    return "\n".join(p.lines) + "\n"


def print_module(module: Module, with_locs: bool = True) -> str:
    """The module's text form (the parser reads it back)."""
    return print_op(module.op, with_locs)


_DENSE = re.compile(r"dense<(\w+)(\[[\d,]*\])?: ([^>]*)>")
ELIDE_OVER = 16  # elements: a constant with more prints its first few and its size on a terminal


def elide_constants(text: str, keep: int = 8) -> str:
    """``text`` with each dense constant of more than ``ELIDE_OVER`` elements cut to its first
    ``keep`` and a count (``dense<f32[1000]: 0.5, 0.25, ... (1000 elements)>``): for reading, not
    for parsing back (``dslc ir --full-constants`` and files keep every element)."""
    def cut(m):
        items = m.group(3).split(", ")
        if len(items) <= ELIDE_OVER:
            return m.group(0)
        return f"dense<{m.group(1)}{m.group(2) or ''}: {', '.join(items[:keep])}, ... ({len(items)} elements)>"
    return _DENSE.sub(cut, text)
