"""Lowering state of one IR region: the SSA value each blob name holds right now.

A read of a blob not yet defined in the region becomes a ``load``; writes stay SSA
values until ``flush`` stores the last one. The workspace is brought up to date
before every nested region, stop check and synchronising effect (counters,
Python ops), so concurrent steps and tasks see what Caffe2 would show them.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from dslc.ir import Builder, Region, Symbol
from dslc.ir.core import MAX_NESTING
from dslc.ir.diagnostics import TraceError, VerifyError
from dslc.ir.opdef import OPS
from dslc.ir.analysis import is_barrier

_AUTO = re.compile(r"^[A-Z][A-Za-z0-9]*(_\d+)?(:\d+)?$")


def hint(name: str) -> str | None:
    """A readable SSA name for a blob: its last path part, unless it was auto-generated."""
    return _hint_of(name.rpartition("/")[2])


@functools.lru_cache(maxsize=1 << 12)
def _hint_of(base: str) -> str | None:
    # (remembered by last part: blob names are mostly unique, their last parts are not)
    if not base or _AUTO.match(base) or base.startswith("stop_blob"):
        return None
    return base


class Scope:
    """Name resolution inside an IfNet/WhileNet branch: new blobs stay local to it.

    ``made`` (shared by the whole lowering) records where each branch-local name was
    made, so that reading it after its block can say why it is not defined there.
    """

    def __init__(self, outer: frozenset, tag: str, parent: "Scope | None", made: dict | None = None,
                 loc=None):
        self.outer, self.tag, self.parent = outer, tag, parent
        self.local: set[str] = set()
        self.made = made if made is not None else {}
        self.loc = loc

    def resolve(self, name: str, write: bool, loc) -> str:
        if name in self.local:
            return f"{name}@{self.tag}"
        if name in self.outer:
            return self.parent.resolve(name, write, loc) if self.parent else name
        if not write:
            raise TraceError(f"blob {name!r} is read in this IfNet/WhileNet branch before it is written there, "
                             "and it is not defined outside", loc,
                             "define it before the IfNet/WhileNet block")
        self.local.add(name)
        self.made.setdefault(name, self.loc or loc)
        return f"{name}@{self.tag}"


class Block:
    """One region being filled by the lowering."""

    def __init__(self, ctx, region: Region, iters=None, scope: Scope | None = None,
                 inherited: "Block | None" = None):
        self.ctx = ctx
        self.region = region
        self.b = Builder(region)
        self.iters = dict(iters or {})
        self.scope = scope
        # The values of this region's own writes and loads; ``lookup`` falls back to the
        # enclosing block's (``inherited``) for names not ``hidden`` here. Looking through
        # rather than copying: a copy per branch made top-level ifs quadratic in the blobs
        # a task body defines. (The enclosing block does not change while a branch is filled.)
        self.env: dict = {}
        self.inherited = inherited
        self.hidden: set[str] = set()
        self.dirty: dict[str, object] = {}
        # In a loop body: the values a break_if passes as the loop's results.
        self.break_values: tuple = ()
        self.depth = 0  # regions it sits in

    def child(self, region: Region, inherit: bool, iters=None, scope="same") -> "Block":
        """A block for a nested region; ``inherit`` forwards this block's (clean) values."""
        if self.depth >= MAX_NESTING:  # (nets in arguments may nest without end: located by lower_op)
            raise VerifyError(f"nets, loops and conditionals nest more than {MAX_NESTING} deep",
                              None, "flatten the program: no job nests nets this deep")
        blk = Block(self.ctx, region, self.iters if iters is None else iters,
                    self.scope if scope == "same" else scope, self if inherit else None)
        blk.depth = self.depth + 1
        return blk

    def lookup(self, key: str):
        """The value blob slot ``key`` holds in this region now, or None (not known here)."""
        v = self.env.get(key)
        if v is None and self.inherited is not None and key not in self.hidden:
            v = self.inherited.lookup(key)
        return v

    def key(self, name: str, write: bool, loc) -> str:
        return self.scope.resolve(name, write, loc) if self.scope else name

    def read(self, name: str, loc):
        if name in self.iters:
            return self.iters[name]
        # (self.key inlined: a read or write per recorded blob name)
        key = self.scope.resolve(name, False, loc) if self.scope else name
        v = self.lookup(key)
        if v is None:
            self._check_not_branch_local(key, loc)
            after = key in self.ctx.stored
            v = self.b.load(key, self.ctx.blob_type(key), loc, hint(key))
            self.ctx.loads.append((key, v, loc, after))
            self.env[key] = v
        return v

    def read_state(self, name: str, loc):
        """``read`` for an operand its op may take unset (``OpDef.unset_ok``).

        A blob the workspace holds created but empty (``workspace.CreateBlob``) is read
        with an optional load, whose value is None while nothing has written it; the
        load is not shared, so other readers still fail on the unset blob. Any other
        blob is an ordinary read (a blob the workspace lacks stays an error).
        """
        key = self.scope.resolve(name, False, loc) if self.scope else name
        if name in self.iters or self.lookup(key) is not None or key not in self.ctx.created:
            return self.read(name, loc)
        v = self.b.load(key, self.ctx.blob_type(key), loc, hint(key))
        v.owner.attrs["optional"] = 1
        self.ctx.loads.append((key, v, loc, key in self.ctx.stored))
        return v

    def _check_not_branch_local(self, key: str, loc) -> None:
        """A name made only inside an IfNet/WhileNet branch, read after it: say so."""
        made = self.ctx.branch_locals.get(key)
        if made is None or key in self.ctx.stored or key in self.ctx.assumed:
            return
        raise TraceError(f"blob {key!r} is local to the IfNet/WhileNet block at {made}: it is not "
                         "defined after that block", loc,
                         "define it (e.g. with ops.Const) before the block to share it with the code after")

    def read_flag(self, name: str, loc):
        """A stop flag: its current value if this block wrote it, else the ``flag`` op."""
        key = self.key(name, False, loc)
        v = self.lookup(key)
        if v is not None:
            return v
        return self.b.value("flag", attrs={"blob": Symbol(key)}, loc=loc)

    def write(self, name: str, value, loc) -> None:
        key = self.scope.resolve(name, True, loc) if self.scope else name
        if value.hint is None:
            value.hint = hint(key)
        self.env[key] = value
        if key not in self.ctx.ephemeral:
            self.dirty[key] = loc

    def flush(self) -> None:
        env, store, note_store = self.env, self.b.store, self.ctx.note_store
        for key, loc in self.dirty.items():
            v = env[key]
            store(v, key, loc)
            note_store(key, v.type)
        self.dirty.clear()

    def forget(self, op=None) -> None:
        """Drop forwarded values (of the blobs ``op`` writes, or all): later reads load again."""
        written = None if op is None else _stored_inside(op, self.ctx.stored_inside)
        if written is None:
            self.env = {k: v for k, v in self.env.items() if k in self.dirty}
            self.inherited = None
            return
        for k in written:
            if k not in self.dirty:
                self.env.pop(k, None)
                self.hidden.add(k)

    def const(self, value, loc):
        arr = np.asarray(value)
        arr.setflags(write=False)
        return self.b.const(arr, loc)

    def create(self, name, operands, attrs=None, loc=None, result_types=None, n_results=None,
               regions=(), hints=None):
        return self.b.create(name, operands, attrs, result_types, n_results, regions, loc, hints)


def _stored_inside(op, known: dict) -> set | None:
    """The blobs stored anywhere inside ``op``; None if it may write any blob.

    ``known`` holds the answers for ops already asked. The lowering asks about each
    structured op once it is complete, inner ones first: each region is walked once,
    not once per enclosing op.
    """
    if op in known:
        return known[op]
    written = None if op.name == "Python" or is_barrier(op) else _stored_in_regions(op, known)
    known[op] = written
    return written


def _stored_in_regions(op, known: dict) -> set | None:
    written = set()
    for r in op.regions:
        for o in r.ops:
            if o.name == "store":  # (not a barrier: no need to ask)
                written.add(o.attrs["blob"])
            elif o.regions:
                inner = _stored_inside(o, known)
                if inner is None:
                    return None
                written |= inner
            elif o.name == "Python" or is_barrier(o):
                return None
    return written


SYNC_RESOURCES = frozenset({"counter", "python", "workspace", "queue", "db", "mutex", "cursor"})


def is_sync(opdef) -> bool:
    """Ops other threads may synchronise through: the workspace must be current around them."""
    got = _SYNC.get(opdef.name)
    if got is None:
        got = _SYNC[opdef.name] = any(e.resource in SYNC_RESOURCES for e in opdef.effects)
    return got


_SYNC: dict = {}  # op name -> is_sync (declarations do not change)


__all__ = ["Block", "Scope", "hint", "is_sync", "OPS"]
