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
threads may touch at the same time (see ``analysis.volatile_blobs``) keep every
load and store.
"""
from __future__ import annotations

from ..core import Module, OpResult, Operation, Region, RegionArg, Symbol
from ..opdef import OPS
from ..types import BOOL, join
from .analysis import STRUCTURED, blob_refs, is_barrier, isolated_regions, set_ops, volatile_blobs
from .infer import InferTypes
from .manager import Pass, register


def _new_op(name: str, operands, attrs: dict, result_types, loc, hints=None) -> Operation:
    """A load, store, must or yield this pass makes, without ``make_op``'s checks.

    These ops are made by the thousand. Their attributes come complete (in declaration
    order) and their result types are known (a must's is its operand's), so make_op's
    checks would pass and its inference would give the same types.
    """
    return Operation(OPS[name], operands, result_types, attrs, (), loc, hints)


def _hint(blob: str):
    base = blob.rsplit("/", 1)[-1]
    return base if base and base[0].islower() else None


class _Forwarder:
    def __init__(self, module: Module, carry: bool):
        self.volatile = volatile_blobs(module)
        self.maybe: set = set()  # values that may be 'unset' (from optional loads)
        self.carry_enabled = carry

    def run(self, module: Module) -> None:
        for r in list(isolated_regions(module)):
            self.region(r)

    def region(self, r: Region) -> None:
        for op in r.ops:
            if op.name in STRUCTURED:
                for sub in op.regions:
                    self.region(sub)
        self.block(r)

    # --- one block
    def block(self, r: Region) -> None:
        env, dirty, out = {}, {}, []
        for op in r.ops:
            n = op.name
            blob = op.attrs.get("blob") if n in ("load", "store", "flag") else None
            if blob is not None and blob in self.volatile:
                out.append(op)
            elif n == "load":
                if blob in env:
                    self.replace_load(op, env[blob], out)
                else:
                    env[blob] = op.result
                    if op.attrs.get("optional"):
                        self.maybe.add(op.result)
                    out.append(op)
            elif n == "store":
                env[blob], dirty[blob] = op.operands[0], op
                op.drop_operands()
            elif n == "flag":
                v = env.get(blob)
                if v is not None and v not in self.maybe and v.type == BOOL:
                    op.result.replace_all_uses_with(v)
                else:
                    self.flush(out, env, dirty, {blob})
                    out.append(op)
            elif n in STRUCTURED and self.carry_enabled:
                self.carry(op, env, dirty, out)
            elif n in STRUCTURED:
                self.around(op, env, dirty, out)
                out.append(op)
            elif is_barrier(op):
                self.flush(out, env, dirty)
                env.clear()
                out.append(op)
            elif n in ("break_if", "yield"):
                self.flush(out, env, dirty)
                out.append(op)
            else:
                out.append(op)
        self.flush(out, env, dirty)
        set_ops(r, out)

    def flush(self, out, env, dirty, only=None) -> None:
        # a subset is taken in name order: these blobs are private, so order is not seen
        blobs = list(dirty) if only is None else sorted(b for b in only if b in dirty)
        for blob in blobs:
            store = dirty.pop(blob)  # the last store of the blob, re-placed here
            if isinstance(store, Operation):
                store.add_operand(env[blob])
            else:
                store = _new_op("store", [env[blob]], {"blob": Symbol(blob)}, (), store)
            out.append(store)

    def replace_load(self, load: Operation, v, out) -> None:
        if v in self.maybe and not load.attrs.get("optional"):
            must = _new_op("must", [v], {"blob": load.attrs["blob"]}, [v.type], load.loc)
            out.append(must)
            v = must.result
        load.result.replace_all_uses_with(v)

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
    def carry(self, op: Operation, env, dirty, out) -> None:
        refs = blob_refs(op)
        types = self.blob_types(op)
        top = types.keys()
        blobs = sorted(b for b in top if b not in self.volatile and b not in refs.flags) \
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
        inits = {b: env.get(b) or self.optional_load(op, b, types[b], out, env) for b in blobs}
        results = self.carry_if(op, blobs, inits) if op.name == "if" else \
            self.carry_loop(op, blobs, inits, types)
        out.append(op)
        for b, res in zip(blobs, results):
            env[b], dirty[b] = res, op.loc

    def optional_load(self, op, blob, t, out, env):
        ld = _new_op("load", (), {"blob": Symbol(blob), "optional": 1}, [t], op.loc, [_hint(blob)])
        out.append(ld)
        self.maybe.add(ld.result)
        env[blob] = ld.result
        return ld.result

    @staticmethod
    def blob_types(op) -> dict:
        """Blob -> the join of the types loaded from and stored to it by the ops directly in
        ``op``'s regions (in program order), for every blob those ops load or store."""
        types: dict = {}
        for r in op.regions:
            for o in r.ops:
                if o.name in ("load", "store"):
                    b = o.attrs["blob"]
                    ot = o.result.type if o.name == "load" else o.operands[0].type
                    t = types.get(b)
                    types[b] = ot if t is None else join(t, ot)
        return types

    def new_result(self, op, t, maybe: bool):
        res = OpResult(t, op, len(op.results))
        op.results.append(res)
        if maybe:
            self.maybe.add(res)
        return res

    def carry_loop(self, op, blobs, inits, types):
        body = op.regions[0]
        cur, results = {}, []
        for b in blobs:
            t = join(inits[b].type, types[b])
            arg = body.add_arg(t, _hint(b))
            op.add_operand(inits[b])
            maybe = inits[b] in self.maybe
            if maybe:
                self.maybe.add(arg)
            results.append(self.new_result(op, t, maybe))
            cur[b] = arg
        new = []
        for o in body.ops:
            b = o.attrs.get("blob") if o.name in ("load", "store") else None
            if b in cur and o.name == "load":
                self.replace_load(o, cur[b], new)
                continue
            if b in cur:
                cur[b] = o.operands[0]
                o.drop_operands()
                continue
            if o.name in ("break_if", "yield"):
                for blob in blobs:
                    o.add_operand(cur[blob])
            new.append(o)
        set_ops(body, new)
        return results

    def carry_if(self, op, blobs, inits):
        finals = []
        for r in op.regions:
            cur, new, y = dict(inits), [], None
            for o in r.ops:
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
            y = y or _new_op("yield", (), {}, (), op.loc)
            for b in blobs:
                y.add_operand(cur[b])
            new.append(y)
            set_ops(r, new)
            finals.append(cur)
        results = []
        for b in blobs:
            vals = [c[b] for c in finals]
            t = vals[0].type
            for v in vals[1:]:
                t = join(t, v.type)
            results.append(self.new_result(op, t, any(v in self.maybe for v in vals)))
        return results


def maybe_unset(module: Module, ops=None) -> set:
    """Values that may be 'unset': optional loads, and what carries them (to a fixpoint).

    ``ops``: the module walked, when the caller has that list at hand. The fixpoint is
    what the optional loads reach along the flows into carried loop values and if
    results (see ``_flows_from``), found by following uses from those loads.
    """
    ops = module.walk() if ops is None else ops
    maybe = {op.result for op in ops if op.name == "load" and op.attrs.get("optional")}
    if not maybe:
        return maybe
    live = set(ops)  # uses by ops no longer in the module carry nothing
    todo = list(maybe)
    while todo:
        for target in _flows_from(todo.pop(), live):
            if target not in maybe:
                maybe.add(target)
                todo.append(target)
    return maybe


def _flows_from(v, live: set) -> list:
    """The carried loop values and if results that ``v`` flows into, directly.

    A loop's initial value flows into its carried argument; the body's final yield into
    the argument too; the argument, and each break_if's value, into the loop result;
    each region's final yield of an ``if`` into its result. Only ops in ``live`` count.
    """
    out = []
    if isinstance(v, RegionArg):
        loop = v.region.parent
        if loop in live and loop.name in ("for", "loop") and v.region is loop.regions[0]:
            k = v.index - (loop.name == "for")  # a for's first argument is its counter
            if 0 <= k < len(loop.results):
                out.append(loop.results[k])
    for user, i in v.uses:
        n = user.name
        if n not in _CARRIERS or user not in live:
            continue
        if n in ("for", "loop"):
            k = i - (n == "for")  # a for's first operand is its count
            args = user.regions[0].args
            if 0 <= k < len(args) - (n == "for"):
                out.append(args[k + (n == "for")])
            continue
        r = user.parent
        op = r.parent
        if op is None or op.name not in STRUCTURED:
            continue
        if op.name == "if":
            if n == "yield" and user is r.ops[-1] and i < len(op.results):
                out.append(op.results[i])
        elif r is op.regions[0]:
            skip = op.name == "for"
            if n == "yield" and user is r.ops[-1] and i < len(r.args) - skip:
                out.append(r.args[i + skip])
            elif n == "break_if" and 1 <= i <= len(r.args) - skip:
                out.append(op.results[i - 1])
    return out


_CARRIERS = ("for", "loop", "yield", "break_if")  # the ops a value flows through (see _flows_from)


def drop_needless_musts(module: Module, ops=None) -> None:
    """Remove ``must`` checks on values that are always set (``ops``: the module walked)."""
    ops = module.walk() if ops is None else ops
    holders = {op.parent for op in ops if op.name == "must"}
    if not holders:
        return
    maybe = maybe_unset(module, ops)
    for r in [r for op in ops for r in op.regions if r in holders]:
        keep = []
        for op in r.ops:
            if op.name == "must" and op.operands[0] not in maybe:
                op.result.replace_all_uses_with(op.operands[0])
                op.drop_operands()
            else:
                keep.append(op)
        if len(keep) != len(r.ops):
            set_ops(r, keep)


def drop_invariant_carried(module: Module, ops=None) -> None:
    """A carried value every exit passes on unchanged is just its initial value.

    It changes operands only, never which ops there are: ``ops`` (the module walked)
    stays valid after it.
    """
    for op in module.walk() if ops is None else ops:
        if op.name not in ("for", "loop"):
            continue
        body = op.regions[0]
        skip = 1 if op.name == "for" else 0
        exits = [o for o in body.ops if o.name in ("yield", "break_if")]
        for k in reversed(range(len(op.results))):
            arg = body.args[skip + k]
            if all(e.operands[(1 if e.name == "break_if" else 0) + k] is arg for e in exits) and exits:
                init = op.operands[skip + k]
                if init.type != arg.type:
                    continue
                for e in exits:
                    e.set_operand((1 if e.name == "break_if" else 0) + k, init)
                arg.replace_all_uses_with(init)
                op.results[k].replace_all_uses_with(init)


@register
class FuseNets(Pass):
    """Merge the nets of each block into one dataflow graph (store-to-load forwarding)."""

    name = "fuse-nets"

    def run(self, module: Module) -> None:
        _Forwarder(module, carry=False).run(module)
        drop_needless_musts(module)
        InferTypes().run(module)


@register
class PromoteBlobs(Pass):
    """Carry blobs through loops and conditionals as SSA values (loads/stores at the edges)."""

    name = "promote-blobs"

    def run(self, module: Module) -> None:
        _Forwarder(module, carry=True).run(module)
        ops = module.walk()
        drop_invariant_carried(module, ops)
        drop_needless_musts(module, ops)
        InferTypes().run(module)
