"""``fuse-nets`` and ``promote-blobs``: blobs become SSA values.

``fuse-nets`` works inside each block, which is what merging consecutive nets
means once they are lowered: a load after a store of the same blob uses the stored
value, repeated loads share one, and stores wait until the block ends, a stop
check, or an op that runs other code on the workspace::

    store @"x"(%a)                         %b = Add(%a, %a) : i64
    %x = load @"x" : i64          ->       store @"x"(%a)
    %b = Add(%x, %x) : i64

``promote-blobs`` also carries blobs through ``for``, ``loop`` and ``if`` (as loop
-carried values and if results), so a loop nest becomes pure dataflow with loads
before it and stores after it::

    for(%n) {                              %t0 = load @"t" {optional = true} : i64
    ^(%i: i64):                            %t = for(%n, %t0) {
      %t = load @"t" : i64         ->      ^(%i: i64, %ta: i64):
      %u = Add(%t, %i) : i64                 %tb = must @"t"(%ta) : i64
      store @"t"(%u)                         %u = Add(%tb, %i) : i64
      yield                                  yield(%u)
    }                                      }
                                           store @"t"(%t)

A hoisted load is ``optional`` (the blob may be unset before the loop); ``must``
keeps the read-before-write error where the original read was. Blobs that other
threads may touch at the same time (see ``dslc.ir.analysis.volatile_blobs``) keep every
load and store.
"""
from __future__ import annotations

import functools

from ..analysis import STRUCTURED, blob_refs, is_barrier, isolated_regions, volatile_blobs
from ..builder import set_ops
from ..core import Module, OpResult, Operation, Region, RegionArg, Symbol, Value
from ..opdef import OPS
from ..types import BOOL, join, join_all, join_into
from .infer import InferTypes
from .manager import Pass, register


def _new_op(name: str, operands, attrs: dict, result_types, loc, hints=None) -> Operation:
    """A load, store, must or yield this pass makes, without ``make_op``'s checks.

    These ops are made by the thousand. Their attributes come complete (in declaration
    order) and their result types are known (a must's is its operand's), so make_op's
    checks would pass and its inference would give the same types.
    """
    return Operation(OPS[name], operands, result_types, attrs, (), loc, hints)


@functools.lru_cache(maxsize=1 << 16)  # asked for the same blobs over and over
def _hint(blob: str):
    base = blob.rsplit("/", 1)[-1]
    return base if base and base[0].islower() else None


def _symbol(blob: str) -> Symbol:
    """``blob`` as an attribute value (blob names taken from attributes already are)."""
    return blob if type(blob) is Symbol else Symbol(blob)


def _replace_uses(old, new, stale) -> None:
    """Re-point every use of ``old`` to ``new``. Its users join ``stale`` (the ops whose
    types the closing inference must work out again, see ``InferTypes.run``; None: all)
    when the two types differ."""
    if stale is not None and old.type is not new.type:  # (types are interned)
        stale.update([user for user, _ in old.uses])
    old.replace_all_uses_with(new)


# How a block's forwarding treats an op, by op name (see _kind).
_KEEP, _LOAD, _STORE, _FLAG, _NESTED, _EXIT, _BARRIER, _PYTHON = range(8)
_KINDS: dict = {"load": _LOAD, "store": _STORE, "flag": _FLAG, "for": _NESTED, "loop": _NESTED,
                "if": _NESTED, "break_if": _EXIT, "yield": _EXIT, "Python": _PYTHON}


def _kind(op: Operation) -> int:
    """How forwarding treats ``op``: one dict look-up per op, since most ops (``_KEEP``) are
    only kept in place. Besides the named kinds, whether an op is a barrier depends on its
    name alone (see ``is_barrier``), except for Python ops (``_PYTHON``: look at the op)."""
    k = _KINDS.get(op.name)
    if k is None:
        k = _KINDS[op.name] = _BARRIER if is_barrier(op) else _KEEP
    return k


class _Forwarder:
    def __init__(self, module: Module, carry: bool):
        self.walked = module.walk()  # (asked twice before any op changes)
        self.volatile = volatile_blobs(module, self.walked)
        self.maybe: set = set()  # values that may be 'unset' (from optional loads)
        self.carry_enabled = carry
        # ops whose operand types may no longer be those their types were inferred from
        # (see InferTypes.run): the users of a load or flag replaced by a value of another
        # type, and exits given more operands
        self.stale: set = set()
        self.clean: dict = {}  # structured op -> whether it is clean (see scan)
        # region -> the (blob, value) stores its block left pending at its end, and the
        # (op, blob, value) values it stands in for optional loads with (see block)
        self.pending: dict = {}
        self.entries: dict = {}
        # load or flag result -> the value that replaced it (a pending store's value may
        # have been replaced since it was noted: see current)
        self.replaced: dict = {}

    def run(self, module: Module) -> None:
        regions, self.walked = list(isolated_regions(module, self.walked)), None
        for r in regions:
            self.region(r)

    def region(self, r: Region, lazy: bool = False) -> None:
        for op in r.ops:
            if op.name in STRUCTURED:
                clean = self.clean.get(op)
                if clean is None:
                    clean = self.scan(op)
                for sub in op.regions:
                    self.region(sub, clean and self.carry_enabled)
        self.block(r, lazy)

    def scan(self, op: Operation) -> bool:
        """Whether the structured ``op`` is clean: nothing inside it flags a blob or is a
        barrier, and every op inside it with regions is a for, loop or if. Noted for it and
        for the structured ops inside it.

        Carrying a clean op carries every blob loaded or stored inside it but the volatile
        ones: those nested deeper are by then loaded or stored directly in its regions (each
        structured op inside carried them out), so ``blob_refs`` need not be asked."""
        clean = True
        for r in op.regions:
            for o in r.ops:
                k = _KINDS.get(o.name)
                if k is None:
                    k = _kind(o)
                if k == _NESTED:
                    clean = self.scan(o) and clean
                elif k == _FLAG or k == _BARRIER or o.regions or (k == _PYTHON and is_barrier(o)):
                    clean = False
        self.clean[op] = clean
        return clean

    # --- one block
    def block(self, r: Region, lazy: bool = False) -> None:
        """Forward stores to loads in ``r``; stores wait until they must happen.

        ``lazy``: ``r`` is a region of a clean structured op (see ``scan``) that its block
        will carry. The stores due at the end of ``r`` (before its yield) would be taken
        out again by that carrying (their blobs are all carried); they are only noted in
        ``self.pending`` instead, and the carrying reads them from there. Likewise the
        optional loads that carrying an op in ``r`` needs would be replaced by the values
        carried into ``r``: a plain value stands in for each (``self.entries``), and the
        carrying replaces it where the load would have been, before that op.
        """
        env, dirty, out = {}, {}, []
        entries = [] if lazy else None
        volatile = self.volatile
        for op in r.ops:
            k = _KINDS.get(op.name)
            if k is None:
                k = _kind(op)
            if k == _KEEP:  # most ops: only kept in place
                out.append(op)
                continue
            if k == _LOAD or k == _STORE or k == _FLAG:
                blob = op.attrs["blob"]
                if blob in volatile:
                    out.append(op)
                elif k == _LOAD:
                    if blob in env:
                        self.replace_load(op, env[blob], out)
                    else:
                        env[blob] = v = op.results[0]
                        if op.attrs.get("optional"):
                            self.maybe.add(v)
                        out.append(op)
                elif k == _STORE:
                    env[blob] = v = op.operands[0]
                    dirty[blob] = op
                    del v.uses[(op, 0)]  # op.drop_operands(), for its one operand
                    op.operands = []
                else:
                    v = env.get(blob)
                    if v is not None and v not in self.maybe and v.type == BOOL:
                        self.replaced[op.results[0]] = v
                        _replace_uses(op.results[0], v, self.stale)
                    else:
                        self.flush(out, env, dirty, {blob})
                        out.append(op)
            elif k == _NESTED:
                if self.carry_enabled:
                    self.carry(op, env, dirty, out, entries)
                else:
                    self.around(op, env, dirty, out)
                    out.append(op)
            elif k == _EXIT:
                if lazy and op.name == "yield" and dirty:
                    self.pend(r, env, dirty)
                else:
                    self.flush(out, env, dirty)
                out.append(op)
            elif k == _BARRIER or is_barrier(op):
                self.flush(out, env, dirty)
                env.clear()
                out.append(op)
            else:
                out.append(op)
        if lazy and dirty:
            self.pend(r, env, dirty)
        else:
            self.flush(out, env, dirty)
        set_ops(r, out)
        if entries:
            self.entries[r] = entries

    def pend(self, r: Region, env, dirty) -> None:
        """The stores due at the end of ``r``, noted instead of made (see ``block``)."""
        self.pending[r] = [(b, env[b]) for b in dirty]
        dirty.clear()

    def current(self, pending) -> list:
        """The (blob, value) pending stores, each value followed to what replaced it since
        (a store made would have had its operand re-pointed)."""
        replaced = self.replaced
        out = []
        for b, v in pending:
            while v in replaced:
                v = replaced[v]
            out.append((b, v))
        return out

    def flush(self, out, env, dirty, only=None) -> None:
        # a subset is taken in name order: these blobs are private, so order is not seen
        blobs = list(dirty) if only is None else sorted(b for b in only if b in dirty)
        for blob in blobs:
            store = dirty.pop(blob)  # the last store of the blob, re-placed here
            if type(store) is Operation:
                v = env[blob]
                v.uses[(store, 0)] = None  # store.add_operand(v): it has no operand
                store.operands.append(v)
            else:
                store = _new_op("store", [env[blob]], {"blob": _symbol(blob)}, (), store)
            out.append(store)

    def replace_load(self, load: Operation, v, out) -> None:
        if v in self.maybe and not load.attrs.get("optional"):
            must = _new_op("must", [v], {"blob": load.attrs["blob"]}, [v.type], load.loc)
            out.append(must)
            v = must.result
        self.replaced[load.results[0]] = v
        _replace_uses(load.results[0], v, self.stale)

    def around(self, op, env, dirty, out) -> None:
        """A nested op that keeps its blob ops: pending stores land first, its writes end forwarding."""
        refs = blob_refs(op)
        if refs.barrier:
            self.flush(out, env, dirty)
            env.clear()
            return
        self.flush(out, env, dirty, refs.all)
        for b in refs.stores:
            env.pop(b, None)

    # --- carrying blobs through structured ops
    def carry(self, op: Operation, env, dirty, out, entries=None) -> None:
        types = self.blob_types(op)
        if self.clean[op]:  # then nothing else inside it needs flushing first (see scan)
            blobs = sorted(b for b in types if b not in self.volatile)
        else:
            refs = blob_refs(op)
            blobs = sorted(b for b in types if b not in self.volatile and b not in refs.flags) \
                if not refs.barrier else []
            others = refs.all - set(blobs)
            if refs.barrier:
                self.flush(out, env, dirty)
                env.clear()
            else:
                self.flush(out, env, dirty, others)
                for b in refs.stores - set(blobs):
                    env.pop(b, None)
        if not blobs:
            out.append(op)
            return
        inits = {b: env.get(b) or self.optional_load(op, b, types[b], out, env, entries) for b in blobs}
        results = self.carry_if(op, blobs, inits) if op.name == "if" else \
            self.carry_loop(op, blobs, inits, types)
        out.append(op)
        for b, res in zip(blobs, results):
            env[b], dirty[b] = res, op.loc

    def optional_load(self, op, blob, t, out, env, entries=None):
        """The value of ``blob`` before ``op``, where it may be unset: an optional load, or
        a value standing in for one (``entries``: see ``block``)."""
        if entries is not None:
            v = Value(t)
            entries.append((op, blob, v))
        else:
            ld = _new_op("load", (), {"blob": _symbol(blob), "optional": 1}, [t], op.loc)
            ld.results[0].hint = _hint(blob)
            out.append(ld)
            v = ld.results[0]
        self.maybe.add(v)
        env[blob] = v
        return v

    def entries_at(self, r: Region) -> dict:
        """Op -> the (blob, value) stand-ins for optional loads made before it in ``r``."""
        at: dict = {}
        for op, blob, v in self.entries.pop(r, ()):
            at.setdefault(op, []).append((blob, v))
        return at

    def enter(self, stand_ins, cur) -> None:
        """Replace stand-ins for optional loads by the carried values (an optional load
        replaced needs no must)."""
        for blob, v in stand_ins:
            self.replaced[v] = cur[blob]
            _replace_uses(v, cur[blob], self.stale)

    def blob_types(self, op) -> dict:
        """Blob -> the join of the types loaded from and stored to it by the ops directly in
        ``op``'s regions (in program order, pending stores last), for every blob those ops
        load or store."""
        types: dict = {}
        for r in op.regions:
            for o in r.ops:
                if o.name in ("load", "store"):
                    t = o.results[0].type if o.name == "load" else o.operands[0].type
                    join_into(types, o.attrs["blob"], t)
            for b, v in self.pending.get(r, ()):
                join_into(types, b, v.type)
            for _, b, v in self.entries.get(r, ()):  # (join is commutative and associative)
                join_into(types, b, v.type)
        return types

    def new_result(self, op, t, maybe: bool):
        res = OpResult(t, op, len(op.results))
        op.results.append(res)
        if maybe:
            self.maybe.add(res)
        return res

    def carry_loop(self, op, blobs, inits, types):
        body = op.regions[0]
        cur, results, maybe_set = {}, [], self.maybe
        for b in blobs:
            init = inits[b]
            t = init.type
            if t is not types[b]:  # (types are interned)
                t = join(t, types[b])
            arg = body.add_arg(t, _hint(b))
            op.add_operand(init)
            maybe = init in maybe_set
            if maybe:
                maybe_set.add(arg)
            results.append(self.new_result(op, t, maybe))
            cur[b] = arg
        new = []
        pending = self.pending.pop(body, ())
        at = self.entries_at(body)
        for o in body.ops:
            if at and o in at:
                self.enter(at[o], cur)
            b = o.attrs.get("blob") if o.name in ("load", "store") else None
            if b in cur and o.name == "load":
                self.replace_load(o, cur[b], new)
                continue
            if b in cur:
                cur[b] = o.operands[0]
                o.drop_operands()
                continue
            if o.name == "yield":
                cur.update(self.current(pending))  # the stores due before it (all of carried blobs)
            if o.name in ("break_if", "yield"):
                for blob in blobs:
                    o.add_operand(cur[blob])
                self.stale.add(o)
            new.append(o)
        set_ops(body, new)
        return results

    def carry_if(self, op, blobs, inits):
        finals = []
        for r in op.regions:
            cur, new, y = dict(inits), [], None
            pending = self.pending.pop(r, ())
            at = self.entries_at(r)
            for o in r.ops:
                if at and o in at:
                    self.enter(at[o], cur)
                b = o.attrs.get("blob") if o.name in ("load", "store") else None
                if b in cur and o.name == "load":
                    self.replace_load(o, cur[b], new)
                elif b in cur:
                    cur[b] = o.operands[0]
                    o.drop_operands()
                elif o.name == "yield":
                    y = o
                else:
                    new.append(o)
            cur.update(self.current(pending))  # the stores due at its end (all of carried blobs)
            y = y or _new_op("yield", (), {}, (), op.loc)
            for b in blobs:
                y.add_operand(cur[b])
            new.append(y)
            set_ops(r, new)
            finals.append(cur)
        results, maybe_set = [], self.maybe
        for b in blobs:
            vals = [c[b] for c in finals]
            maybe = any(v in maybe_set for v in vals)
            results.append(self.new_result(op, join_all([v.type for v in vals]), maybe))
        return results


class _MaybeUnset:
    """Whether a value may be 'unset': an optional load's result, or a carried loop value
    or if result that one flows into (see ``_sources``), to a fixpoint.

    Each question searches backwards from the value, so only what flows into the values
    asked about is looked at. Answers are remembered; the module must not change while
    it is asked.
    """

    def __init__(self):
        self.known: dict = {}  # value -> whether it may be unset

    def __call__(self, v) -> bool:
        known = self.known
        if v in known:
            return known[v]
        seen, todo = {v}, [v]
        while todo:
            x = todo.pop()
            if known.get(x) or _is_optional_load(x):
                known[v] = True
                return True
            if x in known:  # known to be set: so is everything that flows into it
                continue
            for s in _sources(x):
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
        for x in seen:  # no optional load flows into any of them
            known[x] = False
        return False


def _is_optional_load(v) -> bool:
    return isinstance(v, OpResult) and v.owner.name == "load" and bool(v.owner.attrs.get("optional"))


def _sources(v) -> list:
    """The values that flow directly into ``v``: into a loop's carried argument, its initial
    value and the body's final yield; into a loop's result, the argument and each break_if
    of the body; into an if's result, each region's final yield. Other values: none."""
    if isinstance(v, RegionArg):
        loop = v.region.parent
        if loop is None or loop.name not in ("for", "loop") or v.region is not loop.regions[0]:
            return []
        skip = loop.name == "for"  # a for's first argument is its counter, its first operand the count
        k = v.index - skip
        if k < 0:
            return []
        body = v.region
        ends = [body.ops[-1].operands[k]] if body.ops and body.ops[-1].name == "yield" else []
        return [loop.operands[k + skip]] + ends
    op = getattr(v, "owner", None)
    if op is None:
        return []
    if op.name in ("for", "loop"):
        body = op.regions[0]
        exits = [o.operands[1 + v.index] for o in body.ops if o.name == "break_if"]
        return [body.args[v.index + (op.name == "for")]] + exits
    if op.name == "if":
        return [r.ops[-1].operands[v.index] for r in op.regions if r.ops and r.ops[-1].name == "yield"]
    return []


def drop_needless_musts(module: Module, ops=None, stale=None) -> None:
    """Remove ``must`` checks on values that are always set (``ops``: the module walked;
    ``stale``: see ``_replace_uses``)."""
    ops = module.walk() if ops is None else ops
    musts = [op for op in ops if op.name == "must"]
    if not musts:
        return
    # Asked before anything changes: a dropped must passes its operand (another must's,
    # in a chain of them) on to the ops that used it.
    unset = _MaybeUnset()
    maybe = {m.operands[0] for m in musts if unset(m.operands[0])}
    holders = {m.parent for m in musts}
    for r in [r for op in ops if op.regions for r in op.regions if r in holders]:  # in program order
        keep = []
        for op in r.ops:
            if op.name == "must" and op.operands[0] not in maybe:
                _replace_uses(op.result, op.operands[0], stale)
                op.drop_operands()
            else:
                keep.append(op)
        if len(keep) != len(r.ops):
            set_ops(r, keep)


def drop_invariant_carried(module: Module, ops=None, stale=None) -> None:
    """A carried value every exit passes on unchanged is just its initial value.

    It changes operands only, never which ops there are: ``ops`` (the module walked)
    stays valid after it. ``stale``: see ``_replace_uses``.
    """
    ops = module.walk() if ops is None else ops
    for op in [op for op in ops if op.name in ("for", "loop")]:
        body = op.regions[0]
        skip = 1 if op.name == "for" else 0
        # each exit, with where its carried values start (after a break_if's condition)
        exits = [(o, 1 if o.name == "break_if" else 0) for o in body.ops if o.name in ("yield", "break_if")]
        if not exits:
            continue
        args = body.args
        for k in reversed(range(len(op.results))):
            arg = args[skip + k]
            for e, at in exits:
                if e.operands[at + k] is not arg:
                    break
            else:  # every exit passes it on
                init = op.operands[skip + k]
                if init.type != arg.type:
                    continue
                for e, at in exits:
                    e.set_operand(at + k, init)
                _replace_uses(arg, init, stale)
                _replace_uses(op.results[k], init, stale)


@register
class FuseNets(Pass):
    """Merge the nets of each block into one dataflow graph (store-to-load forwarding)."""

    name = "fuse-nets"
    sets_types_settled = True

    def run(self, module: Module) -> None:
        module.types_settled = False  # its closing inference infers every op and sets it again
        _Forwarder(module, carry=False).run(module)
        drop_needless_musts(module)
        InferTypes().run(module)


@register
class PromoteBlobs(Pass):
    """Carry blobs through loops and conditionals as SSA values (loads/stores at the edges)."""

    name = "promote-blobs"
    sets_types_settled = True

    def run(self, module: Module) -> None:
        settled = module.types_settled  # then only the ops this pass makes stale need inferring
        module.types_settled = False
        forwarder = _Forwarder(module, carry=True)
        forwarder.run(module)
        stale = forwarder.stale if settled else None
        ops = module.walk()
        drop_invariant_carried(module, ops, stale)
        drop_needless_musts(module, ops, stale)
        InferTypes().run(module, ops, stale)  # ops still lists every store: only musts were dropped
