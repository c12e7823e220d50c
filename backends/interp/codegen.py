"""Compiling one IR region into a Python function that calls pre-resolved kernels.

    %s = Add(%a, %b) : i64        ->   v3 = k0(v1, v2)
    for(%n) { ^(%i): ... }        ->   for v5 in _ar(rt.trip(v4)): ...
    %x = load @"x" : i64          ->   v6 = b0.v; if v6 is None: rt.unset(b0)

This is how the interpreter keeps dispatch cheap: kernels are looked up once, values
live in Python locals, blobs are cells bound when the region is bound to a
workspace. The generated source is registered with ``linecache`` so tracebacks
show it, and every line maps back to its op (and so to the user's line).
"""
from __future__ import annotations

import itertools
import linecache
import re
import weakref
from time import perf_counter

import numpy as np

from dslc.ir import Operation, Region
from dslc.ir.diagnostics import UNKNOWN_LOC, DSLError, ExecutionError
from dslc.runtime.values import type_of_value

from .kernels import Constant, kernel_entry
from .together import together

SOURCES: "weakref.WeakValueDictionary[str, _Part]" = weakref.WeakValueDictionary()  # (its parts keep them)
_ids = itertools.count()
PLAN_OPS = ("parallel", "scope", "reporting")


class RegionCode:
    """A compiled region: its function, the blobs it binds, its per-instance op makers."""

    __slots__ = ("fn", "names", "eager", "makers", "parts", "empty", "__weakref__")

    def bind(self, ws, inst) -> "Bound":
        """Resolve the region's blobs in ``ws`` (creating missing ones) and build op state."""
        own, cell = ws.blobs, ws.cell  # (most names are the workspace's own: one dict look-up)
        cells = [own.get(n) or cell(n) for n in self.names]
        for n in self.eager:
            ws.cell(n)
        return Bound(self, cells, [make(inst) for make in self.makers])


class Bound:
    __slots__ = ("code", "cells", "states")

    def __init__(self, code, cells, states):
        self.code, self.cells, self.states = code, cells, states


class _Named:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class ChildPlan:
    """A nested plan op (parallel, scope, reporting) and its compiled regions."""

    __slots__ = ("op", "codes")

    def __init__(self, op, codes):
        self.op, self.codes = op, codes


# What Python says when generated code nests too deeply (the only SyntaxError a valid
# job can cause): 20 nested loops, 100 indents.
NESTING_LIMITS = ("too many statically nested blocks", "too many levels of indentation")


class GeneratedCodeError(Exception):
    """A backend wrote Python that does not compile: dslc's bug, never the user's.

    Not a ``DSLError``: the CLI reports it as an internal error (exit 1), naming the
    backend, the generated line and the op it came from.
    """

    def __init__(self, backend: str, e: SyntaxError, op=None):
        where = f" (from the op at {op.loc})" if op is not None and op.loc and op.loc.line else ""
        super().__init__(f"the {backend} backend generated Python that does not compile: {e.msg}, "
                         f"line {e.lineno}: {(e.text or '').strip()!r}{where}")
        self.backend, self.op = backend, op


def syntax_error(e: SyntaxError, op, backend: str) -> Exception:
    """The error for generated code Python refuses to compile: the user's (located) when
    the job nests deeper than Python can run, else ours (``GeneratedCodeError``)."""
    if any(limit in (e.msg or "") for limit in NESTING_LIMITS):
        return DSLError(f"the job nests loops and conditionals deeper than Python can run ({e.msg})",
                        op.loc if op is not None else None,
                        "nest fewer loops: move the inner ones into a net or task of their own")
    return GeneratedCodeError(backend, e, op)


def compile_region(region: Region, cfg, emitter=None) -> RegionCode:
    """Compile ``region`` with ``emitter`` (a subclass of Emitter; default: the interpreter's)."""
    e = (emitter or Emitter)(cfg)
    e.region(region, 2, [], None)
    return e.finish()


class Emitter:
    """Writes the Python function for one region; backends subclass it (see ``partition``)."""

    backend = "interp"  # (named in the error for generated code that does not compile)

    def __init__(self, cfg):
        self.cfg = cfg
        self.body: list[tuple[str, Operation | None]] = []
        self.env: dict[str, object] = {}
        self.blobs: dict[str, str] = {}
        self.makers: list = []
        self.eager: list[str] = []
        self.vars: dict = {}
        self.n = 0
        self.state_of: dict = {}  # op -> the index of its per-instance state in makers
        # op -> its operands' variables, for the ops typed with an unknown dim (see rechecked)
        self.rechecks: dict = {}

    # --- names
    def var(self, v) -> str:
        name = self.vars.get(v)
        if name is None:
            self.n += 1
            # (ASCII only: the hint is the input's text, and must stay an identifier)
            hint = "".join(c if c.isascii() and c.isalnum() else "_" for c in (v.hint or ""))[:24]
            name = self.vars[v] = f"v{self.n}_{hint}" if hint else f"v{self.n}"
        return name

    def bind(self, prefix: str, obj) -> str:
        name = f"{prefix}{len(self.env)}"
        self.env[name] = obj
        return name

    def cell(self, blob: str) -> str:
        c = self.blobs.get(blob)
        if c is None:
            c = self.blobs[blob] = f"b{len(self.blobs)}"
        return c

    def instance_state(self, op, make) -> str:
        """The name of ``op``'s per-instance state, made by ``make(inst)`` when the region is
        bound: one per op (a region written again from this emitter's names, the numba
        backend's once it is hot, keeps the states the first writing's calls made)."""
        i = self.state_of.get(op)
        if i is None:
            self.makers.append(make)
            i = self.state_of[op] = len(self.makers) - 1
        return f"s{i}"

    def emit(self, indent: int, text: str, op=None) -> None:
        self.body.append(("    " * indent + text, op))

    def emit_timed(self, indent: int, text: str, op, kind: str | None = None) -> None:
        """``emit`` a statement that calls an op's kernel; with the backend's ``profile`` set
        (runtime/profile.py), timed into the counter of (``kind`` or the op's name, its line)."""
        profile = getattr(self.cfg, "profile", None)
        if profile is None:
            return self.emit(indent, text, op)
        counter, clock = self.bind("p", profile.counter(kind or op.name, op.loc)), self.bind("c", perf_counter)
        # (one line: a long region's function is cut into parts between lines, never inside one)
        self.emit(indent, f"_t0 = {clock}(); {text}; {counter}[0] += {clock}() - _t0; {counter}[1] += 1", op)

    # --- regions and ops
    def region(self, r: Region, indent: int, targets: list[str], loop_targets) -> None:
        start = len(self.body)
        for item in self.partition(r):
            if not isinstance(item, Operation):
                self.island(item, indent, loop_targets)
            elif item.name == "yield":
                self.assign(indent, targets, [self.var(v) for v in item.operands], item)
            else:
                self.op(item, indent, loop_targets)
        if len(self.body) == start:
            self.emit(indent, "pass")

    def partition(self, r: Region) -> list:
        """The region's ops, some grouped into islands a backend compiles its own way."""
        return r.ops

    def island(self, item, indent: int, loop_targets) -> None:
        raise NotImplementedError  # only emitters whose partition makes islands

    def assign(self, indent, targets, values, op) -> None:
        pairs = [(t, v) for t, v in zip(targets, values) if t != v]
        if pairs:
            self.emit(indent, ", ".join(t for t, _ in pairs) + " = " + ", ".join(v for _, v in pairs), op)

    def kernel_entry(self, name: str):
        """``(factory, per_instance)`` of op ``name``'s kernel (a backend may add its own)."""
        return kernel_entry(name)

    def op(self, op: Operation, indent: int, loop_targets) -> None:
        special = getattr(self, "op_" + op.name, None)
        if special is not None:
            return special(op, indent, loop_targets)
        if op.name in PLAN_OPS:
            return self.plan(op, indent)
        entry = self.kernel_entry(op.name)
        if entry is None:
            raise ExecutionError(f"the interp backend has no kernel for {op.name}", op.loc)
        factory, per_instance = entry
        try:  # a factory may compute (a ConstantFill's tensor) or look up what the op names
            k = factory(op, self.cfg)
        except DSLError as e:
            if e.loc is None or e.loc == UNKNOWN_LOC:
                e.loc = op.loc
            raise
        if per_instance:
            callee = self.instance_state(op, k)
        else:
            if isinstance(k, Constant):  # uses read the bound value directly
                self.vars[op.result] = self.bind("c", k.value)
                return
            callee = self.bind("k", k)
        args = [self.var(v) for v in op.operands]
        if op.opdef.infer is not None and any(_unknown_dims(v.type) for v in op.operands):
            self.rechecks[op] = args
        call = f"{callee}({', '.join(args)})"
        outs = [self.var(r) for r in op.results]
        self.emit_timed(indent, (", ".join(outs) + " = " if outs else "") + call, op)

    def op_load(self, op, indent, _):
        v, c = self.var(op.result), self.cell(op.attrs["blob"])
        self.emit(indent, f"{v} = {c}.v", op)
        if not op.attrs.get("optional"):
            self.emit(indent, f"if {v} is None: rt.unset({c})", op)

    def op_must(self, op, indent, _):
        v = self.var(op.operands[0])
        self.vars[op.result] = v
        named = self.bind("c", _Named(op.attrs["blob"]))  # only for the error message
        self.emit(indent, f"if {v} is None: rt.unset({named})", op)

    def op_concurrent(self, op, indent, loop_targets):
        """Each inner op becomes a thunk; ``together`` runs them on the pool and joins."""
        body = [o for o in op.regions[0].ops if o.name != "yield"]
        thunks = []
        for o in body:
            k = self.bind("k", self.kernel_entry(o.name)[0](o, self.cfg))
            thunks.append(f"(lambda: {k}({', '.join(self.var(v) for v in o.operands)}))")
        outs = [self.var(o.result) for o in body]
        self.emit(indent, f"{', '.join(outs)}, = {self.bind('t', together)}({', '.join(thunks)})", op)
        y = op.regions[0].ops[-1]
        self.assign(indent, [self.var(r) for r in op.results], [self.var(v) for v in y.operands], op)

    def op_fused(self, op, indent, loop_targets):
        body = op.regions[0]
        for a, v in zip(body.args, op.operands):
            self.vars[a] = self.var(v)
        self.region(body, indent, [self.var(r) for r in op.results], loop_targets)

    def op_flag(self, op, indent, _):
        c = self.cell(op.attrs["blob"])
        self.emit(indent, f"{self.var(op.result)} = {c}.v is not None and bool({c}.v)", op)

    def op_store(self, op, indent, _):
        self.emit(indent, f"{self.cell(op.attrs['blob'])}.v = {self.var(op.operands[0])}", op)

    def op_defer(self, op, indent, _):
        """The cell computes the body's op when read: its kernel, the operands' values now."""
        inner, done = op.regions[0].ops
        factory, per_instance = self.kernel_entry(inner.name)
        k = factory(inner, self.cfg)
        if per_instance:
            self.makers.append(k)
            k = f"s{len(self.makers) - 1}"
        else:
            k = self.bind("k", k)
        index = inner.results.index(done.operands[0])
        args = "".join(f", {self.var(v)}" for v in op.operands)
        self.emit(indent, f"{self.cell(op.attrs['blob'])}.defer({self.bind('c', _picked)}, {k}, {index}{args})", op)

    def op_break_if(self, op, indent, loop_targets):
        self.emit(indent, f"if {self.var(op.operands[0])}:", op)
        self.assign(indent + 1, loop_targets, [self.var(v) for v in op.operands[1:]], op)
        self.emit(indent + 1, "break", op)

    def op_for(self, op, indent, _):
        body = op.regions[0]
        carried = [self.var(a) for a in body.args[1:]]
        self.assign(indent, carried, [self.var(v) for v in op.operands[1:]], op)
        n = self.var(op.operands[0])
        top = indent == 2  # a loop at the top of a phase: long runs show its progress
        if top:
            self.emit(indent, f"_pg = rt.progress({self.bind('L', op.loc)}, {n})", op)
        self.emit(indent, f"for {self.var(body.args[0])} in rt.arange(rt.trip({n})):", op)
        if top:
            self.emit(indent + 1, "if _pg is not None: _pg()", op)
        self.loop_body(op, body, indent, carried)

    def op_loop(self, op, indent, _):
        body = op.regions[0]
        carried = [self.var(a) for a in body.args]
        self.assign(indent, carried, [self.var(v) for v in op.operands], op)
        self.emit(indent, "while True:", op)
        self.loop_body(op, body, indent, carried)

    def loop_body(self, op, body, indent, carried):
        self.emit(indent + 1, "if _cx.flag: rt.cancelled()", op)
        self.region(body, indent + 1, carried, carried)
        self.assign(indent, [self.var(r) for r in op.results], carried, op)

    def op_if(self, op, indent, loop_targets):
        outs = [self.var(r) for r in op.results]
        then, other = op.regions
        if not then.ops and not outs:
            self.emit(indent, f"if not {self.var(op.operands[0])}:", op)
            self.region(other, indent + 1, outs, loop_targets)
            return
        self.emit(indent, f"if {self.var(op.operands[0])}:", op)
        self.region(then, indent + 1, outs, loop_targets)
        if other.ops or outs:
            self.emit(indent, "else:", op)
            self.region(other, indent + 1, outs, loop_targets)

    def plan(self, op, indent):
        codes = [compile_region(r, self.cfg, type(self)) for r in op.regions]
        if op.name != "scope":
            for c in codes:
                self.eager += c.names + c.eager
        self.emit(indent, f"rt.plan({self.bind('p', ChildPlan(op, codes))}, ws)", op)

    # --- the function
    def finish(self) -> RegionCode:
        # the kernels and constants are the module's globals, not names bound by an outer
        # function: CPython compiles a function that closes over n names in O(n^2) (4.1 s
        # at 30,000 kernels, against 0.23 s as globals), and reads a global as fast
        ns = {"np": np, **self.env}
        pieces = _pieces(self.body, PIECE_LINES)
        code = RegionCode()
        if len(pieces) == 1:
            code.fn, part = _compiled(ns, "run", "", self.body, [], [], self.blobs, len(self.makers), self.backend)
            code.parts = [part]
        else:
            loads, stores, n = _carried(pieces)
            code.parts = []
            calls = []
            for k, piece in enumerate(pieces):
                _, part = _compiled(ns, f"run_{k}", ", _x", piece, loads[k], stores[k], self.blobs, len(self.makers),
                                    self.backend)
                code.parts.append(part)
                calls.append(f"    run_{k}(_cells, _states, rt, ws, _x)")
            main = "\n".join(["def run(_cells, _states, rt, ws):", f"    _x = [None] * {n}", *calls, ""])
            exec(compile(main, f"<dslc-region-{next(_ids)}>", "exec"), ns)
            code.fn = ns["run"]
        for part in code.parts:
            part.rechecks = self.rechecks
        code.names = list(self.blobs)
        code.eager = self.eager
        code.makers = self.makers
        # (nothing to bind or run: the executor skips it, e.g. a plain net's empty task phases)
        code.empty = not self.blobs and not self.eager and not self.makers and \
            all(text.strip() == "pass" for text, _ in self.body)
        return code


# A region's function is compiled in pieces of about this many lines, each a function of
# its own, called in turn: CPython's compiler holds some 4 KB per line of the function it
# compiles (830 MB for a straight-line region of 200k ops), and a piece's is freed before
# the next. Values one piece makes and a later one reads pass through a list (_x).
PIECE_LINES = 1000
TOP = "        "  # the indent of a region's top-level lines
_LOCALS = re.compile(r"\b(?:v\d+(?:_\w*)?|_pg|_ht|_t0|_tr)\b")  # its variables (Emitter.var, op_for, clock reads)
_CELL, _STATE = re.compile(r"\bb(\d+)\b"), re.compile(r"\bs(\d+)\b")


class _Part:
    """One compiled function of a region: its source's name, the op of each line, and
    the operands' variables of the ops whose types left a dim unknown (``rechecked``)."""

    __slots__ = ("filename", "line_ops", "rechecks", "__weakref__")


def _picked(kernel, index, *args):
    """Result ``index`` of ``kernel(*args)``: a deferred blob's value (``op_defer``)."""
    return kernel(*args)[index]


def _unknown_dims(t) -> bool:
    shape = getattr(t, "shape", None)
    return shape is not None and None in shape


def rechecked(part: _Part, op, frame) -> DSLError | None:
    """The type error compiling ``op`` for its operands' run-time values would have raised.

    A module compiled with a dim unknown (a net run with sizes that change) leaves the op's
    shape checks to its kernel; when the kernel fails, its type rule runs again on the
    operands it was given, so the user gets the located error a compile for those sizes gives.
    """
    names = part.rechecks.get(op) if part is not None else None
    if names is None:
        return None
    values = frame.f_locals
    if not all(n in values for n in names):
        return None
    try:
        op.opdef.inferred(tuple(type_of_value(values[n]) for n in names), op.attrs, len(op.results))
    except DSLError as e:
        e.loc = op.loc
        return e
    return None


def _pieces(body: list, limit: int) -> list:
    """``body``'s lines cut into pieces of at least ``limit`` lines, each cut before a
    top-level statement (a loop or a conditional stays whole)."""
    if len(body) <= limit:
        return [body]
    out, cur = [], []
    for line in body:
        text = line[0]
        if len(cur) >= limit and text.startswith(TOP) and text[len(TOP)] != " " and \
                not text.startswith(TOP + "else:"):
            out.append(cur)
            cur = []
        cur.append(line)
    out.append(cur)
    return out


def _carried(pieces: list) -> tuple:
    """What each piece reads from ``_x`` at its start and writes to it at its end: every
    variable a later piece names, by its slot. (A variable may be assigned again in a
    later piece, a loop's carried value: each piece that names it writes it back.)"""
    names = [set(_LOCALS.findall("\n".join(text for text, _ in p))) for p in pieces]
    first, last = {}, {}
    for k, got in enumerate(names):
        for n in got:
            first.setdefault(n, k)
            last[n] = k
    slots = {n: i for i, n in enumerate(sorted(n for n in first if last[n] > first[n]))}
    loads = [[(n, slots[n]) for n in sorted(got) if n in slots and first[n] < k] for k, got in enumerate(names)]
    stores = [[(n, slots[n]) for n in sorted(got) if n in slots and last[n] > k] for k, got in enumerate(names)]
    return loads, stores, len(slots)


def _compiled(ns: dict, name: str, extra: str, body: list, loads: list, stores: list, blobs: dict,
              n_makers: int, backend: str) -> tuple:
    """Compile ``body`` as the function ``name`` in the namespace ``ns``: (the function,
    its _Part). A piece (``extra``: its ``_x``) unpacks only the cells and states it uses."""
    head = [f"def {name}(_cells, _states, rt, ws{extra}):"]
    if not extra:
        if blobs:
            head.append(f"{TOP}({', '.join(blobs.values())},) = _cells")
        if n_makers:
            head.append(f"{TOP}({', '.join(f's{i}' for i in range(n_makers))},) = _states")
    else:
        text = "\n".join(t for t, _ in body)
        head += [f"{TOP}b{i} = _cells[{i}]" for i in sorted({int(i) for i in _CELL.findall(text)})]
        head += [f"{TOP}s{i} = _states[{i}]" for i in sorted({int(i) for i in _STATE.findall(text)})]
        head += [f"{TOP}{n} = _x[{i}]" for n, i in loads]
    head.append(f"{TOP}_cx = rt.cancel")
    lines = head + [text for text, _ in body] + [f"{TOP}_x[{i}] = {n}" for n, i in stores] + [""]
    source = "\n".join(lines)
    filename = f"<dslc-region-{next(_ids)}>"
    try:
        code_obj = compile(source, filename, "exec")
    except SyntaxError as e:  # Python's own limits: 20 nested loops, 100 indents
        op = next((o for i, (_, o) in enumerate(body) if o is not None and len(head) + i + 1 >= (e.lineno or 0)), None)
        raise syntax_error(e, op, backend) from None
    exec(code_obj, ns)
    part = _Part()
    part.filename = filename
    part.line_ops = {len(head) + i + 1: op for i, (_, op) in enumerate(body) if op is not None}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    SOURCES[filename] = part
    weakref.finalize(part, linecache.cache.pop, filename, None)
    return ns[name], part
