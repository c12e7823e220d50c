"""``dce``: remove what cannot change the job's results.

* stores to blobs that vanish unread: nothing in the module reads them, they are no
  task's output, they were not in the workspace before, and they are written in a
  workspace that is dropped afterwards (a PRIVATE task, one instance of a
  multi-instance task, a ``scope``). Stores in GLOBAL tasks stay: later runs of the
  session may read those blobs;
* then, mark and sweep: ops with effects are live, and so are pure ops that may fail
  (an integer ``Div`` whose divisor may be 0: its error is a result the user sees), and
  whatever they use, transitively, through carried loop values and ``if`` results; the rest goes,
  including carried values and results nothing live needs, and the optional last
  results of an op (FCGradient's dX) when nothing live needs them;
* a store that stays of such an optional result that nothing else uses (``data_grad``:
  Caffe2 makes the blob, but no op needs it) becomes a ``defer`` of the op: the blob
  gets its value when something reads it, and the op does not compute it now.

    %c = Const {value = dense<i64: 2>} : i64       (nothing uses %c)
    store @"tmp"(%x)        (in a PRIVATE task; nothing reads @"tmp")   ->   (both gone)

    %dw, %db, %dx = FCGradient(%x, %w, %dy)          %dw, %db = FCGradient(%x, %w, %dy)
    store @"data_grad"(%dx)                    ->    defer @"data_grad"(%x, %w, %dy) ({
                                                     ^bb0(%a, %b, %c):
                                                       %0, %1, %2 = FCGradient(%a, %b, %c)
                                                       yield %2 })
"""
from __future__ import annotations

from ..analysis import in_dropped_workspaces
from ..builder import make_op
from ..core import Module, Operation, OpResult, Region, RegionArg
from .manager import Pass, register

REMOVABLE = ("flag", "yield", "for", "if")  # besides pure ops and optional loads
LOOPS = ("for", "loop")
_SPECIAL_OPERANDS = frozenset(LOOPS + ("if", "yield", "break_if", "fused", "defer"))  # see mark_op
_SLOTTED = frozenset(LOOPS + ("if",))  # ops with carried values or results fed by yields


# How the first walk treats an op, by name (worked out once per name, see ``_kind``)
_DROPPABLE = "droppable"  # removable when unused, and nothing to note: nearly every op
_LIVE = "live"            # has effects: live for its own sake
_ASK = "ask"              # to note, or removable or not depending on the op itself
_KINDS: dict = {}
_NOTED = ("store", "load", "for", "flag", "must", "task", "GetAllBlobNames")


def _kind(op: Operation) -> str:
    """``op``'s kind for the first walk; every op of its name has it."""
    if op.name in _NOTED or op.opdef.may_fail is not None:
        kind = _ASK
    elif op.opdef.is_pure or op.name in REMOVABLE:
        kind = _DROPPABLE
    else:
        kind = _LIVE
    _KINDS[op.name] = kind
    return kind


@register
class DeadCode(Pass):
    name = "dce"

    def run(self, module: Module) -> None:
        self.live_ops: set = set()
        self.live_vals: set = set()
        self.work: list = []
        self.exits: dict = {}  # loop -> loop_exits(loop)
        # One walk marks what is live for its own sake, and notes the stores, which wait
        # for the blobs read anywhere (marking is a closure: the order does not matter).
        self.stores, self.tasks, self.read = [], [], set()
        self.names_observable = False
        self.dead_stores: set = set()
        self.scan([module.op])
        self.mark_stores(module)
        self.mark_sources()
        self.sweep(module.body)

    # --- the first walk
    def scan(self, ops: list) -> None:
        """Mark the ops of ``ops`` (and nested in them) that are live for their own sake;
        note the stores, tasks and blobs read."""
        kinds = _KINDS
        live = self.live_ops
        for op in ops:
            n = op.name
            kind = kinds.get(n)
            if kind is None:
                kind = _kind(op)
            if kind is _DROPPABLE:
                pass  # the usual op: live only if something live needs it
            elif n == "store":
                self.stores.append(op)
            elif n == "load":
                # an optional load only keeps a blob unchanged when nothing writes it; real
                # reads are plain loads, stop flags and the `must` checks promotion leaves
                if not op.attrs.get("optional"):
                    self.read.add(op.attrs["blob"])
                    self.mark_op(op)  # a read that may fail stays
            elif kind is _LIVE:
                if op not in live:
                    self.mark_op(op)
            else:
                self.note(op)
            if op.regions:
                for r in op.regions:
                    self.scan(r.ops)

    def note(self, op: Operation) -> None:
        """The first walk's other ops to note (``flag``, ``must``, ``task``,
        ``GetAllBlobNames``), and ``for`` and ops that may fail: marked unless
        ``removable``."""
        n = op.name
        if n == "flag" or n == "must":
            self.read.add(op.attrs["blob"])
        elif n == "task":
            self.tasks.append(op)
        elif n == "GetAllBlobNames":
            self.names_observable = True  # every blob the job writes must exist
        if not self.removable(op):
            self.mark_op(op)

    # --- dead stores
    def mark_stores(self, module: Module) -> None:
        """Mark the stores that stay: all but those ``find_dead_stores`` finds (none when
        the job may list its blobs)."""
        if not self.names_observable:
            self.dead_stores = self.find_dead_stores(module, self.stores, self.tasks, self.read)
        dead = self.dead_stores
        for op in self.stores:
            if op not in dead:
                self.mark_op(self.deferred(op) or op)

    def deferred(self, store: Operation) -> Operation | None:
        """A ``defer`` in place of ``store`` (inserted before it; the store, unmarked, goes),
        if it stores an optional result of a pure op that nothing else uses, of a blob
        nothing in the module reads; else None."""
        v = store.operands[0]
        if type(v) is not OpResult or store.attrs["blob"] in self.read:
            return None
        op = v.owner
        d = op.opdef
        if not d.optional_results or v.index < len(op.results) - d.optional(op) or not d.is_pure \
                or d.fails(op) or any(u.name != "store" for u, _ in v.uses):
            return None
        body = Region([x.type for x in op.operands], [x.hint for x in op.operands])
        inner = body.append(Operation(d, body.args, [r.type for r in op.results], op.attrs, loc=op.loc,
                                      hints=[r.hint for r in op.results]))
        body.append(make_op("yield", [inner.results[v.index]], loc=op.loc))
        defer = make_op("defer", list(op.operands), attrs={"blob": store.attrs["blob"]}, regions=[body],
                        loc=store.loc)
        r = store.parent
        r.insert(r.ops.index(store), defer)
        return defer

    @staticmethod
    def find_dead_stores(module: Module, stores: list, tasks: list, read: set) -> set:
        """Of ``stores``, those that vanish unread: their blob is not in ``read``, not
        existing before, no output of one of ``tasks`` (all of the module's), and the
        workspace they write is dropped afterwards."""
        needed = set(read)
        for g in module.body.ops:
            needed |= {str(s) for s in g.attrs.get("existing", [])}
        for t in tasks:
            needed |= {str(s) for s in t.attrs["outputs"]}
        return set(in_dropped_workspaces(op for op in stores if op.attrs["blob"] not in needed))

    # --- marking
    def removable(self, op: Operation) -> bool:
        """Whether ``op`` may go when nothing needs its results.

        Plain loads stay (a read of an unset blob is an error the user should see), and
        so do a ``for`` whose count may be negative and a pure op that may fail (those
        too are errors).
        """
        if op.name == "store":
            return op in self.dead_stores
        if op.name == "load":
            return bool(op.attrs.get("optional"))
        if op.name == "for":
            c = getattr(op.operands[0], "owner", None)
            return c is not None and c.name == "Const" and int(c.attrs["value"]) >= 0
        d = op.opdef
        return (d.is_pure and not d.fails(op)) or op.name in REMOVABLE

    def mark_op(self, op: Operation) -> None:
        """``op`` is live: so are the values it needs, and the op whose region holds it."""
        live_ops = self.live_ops
        while op not in live_ops:  # (then its parent op, and so on out)
            live_ops.add(op)
            if op.name not in _SPECIAL_OPERANDS:  # the usual op: all its operands are needed
                live_vals = self.live_vals
                for v in op.operands:
                    if v not in live_vals:  # mark_val, inline: this is the hottest loop
                        live_vals.add(v)
                        self.work.append(v)
            else:
                self.mark_special_operands(op)
            r = op.parent
            if r is None or r.parent is None:
                return
            op = r.parent

    def mark_special_operands(self, op: Operation) -> None:
        """What a live loop, ``if``, ``yield``, ``break_if``, ``fused`` or ``defer`` needs, besides
        its carried values and results (see ``mark_slot``)."""
        if op.name in LOOPS:
            if op.name == "for":
                self.mark_val(op.operands[0])
        elif op.name == "if":
            self.mark_val(op.operands[0])
        elif op.name == "yield":
            pass  # yielded values are live only for live slots (see mark_slot)
        elif op.name == "break_if":
            self.mark_val(op.operands[0])
        else:  # fused, defer
            for v in op.operands:
                self.mark_val(v)
            for inner in op.regions[0].walk():  # a kernel is kept whole
                self.live_ops.add(inner)
                for v in inner.operands:
                    self.mark_val(v)

    def mark_val(self, v) -> None:
        if v not in self.live_vals:
            self.live_vals.add(v)
            self.work.append(v)

    def mark_sources(self) -> None:
        """Mark what defines each value on the work list, until it is empty."""
        work, live_ops = self.work, self.live_ops
        while work:
            v = work.pop()
            if type(v) is OpResult and v.owner.name not in _SLOTTED:  # the usual value, inline
                if v.owner not in live_ops:
                    self.mark_op(v.owner)
            else:
                self.mark_source(v)

    def mark_source(self, v) -> None:
        if isinstance(v, OpResult):
            op = v.owner
            if op.name in _SLOTTED:
                self.mark_slot(op, v.index)
            self.mark_op(op)
        elif isinstance(v, RegionArg):
            op = v.region.parent
            if op is not None and op.name in LOOPS:
                k = v.index - (1 if op.name == "for" else 0)
                if k >= 0:
                    self.mark_slot(op, k)
                self.mark_op(op)
            elif op is not None:
                self.mark_op(op)

    def mark_slot(self, op: Operation, k: int) -> None:
        """Carried value / if result ``k`` is needed: so is everything flowing into it."""
        if op.name in LOOPS:
            skip = 1 if op.name == "for" else 0
            self.mark_val(op.operands[skip + k])
            self.mark_val(op.results[k])
            self.mark_val(op.regions[0].args[skip + k])
            for o, first in self.loop_exits(op):
                self.mark_val(o.operands[first + k])
        else:
            self.mark_val(op.results[k])
            for r in op.regions:
                if r.ops and r.ops[-1].name == "yield":
                    self.mark_val(r.ops[-1].operands[k])

    def loop_exits(self, loop: Operation) -> list:
        """(op, where carried value 0 is among its operands) for each ``yield`` and
        ``break_if`` of the loop's body, in order (found once per loop: marking asks
        for every carried value)."""
        got = self.exits.get(loop)
        if got is None:
            got = self.exits[loop] = [(o, 0 if o.name == "yield" else 1) for o in loop.regions[0].ops
                                      if o.name in ("yield", "break_if")]
        return got

    # --- sweeping
    def sweep(self, r: Region) -> None:
        keep = []
        live = self.live_ops
        for op in r.ops:
            if op in live or op.name == "yield":
                if op.opdef.optional_results:
                    self.drop_optional_results(op)
                if op.regions:
                    if op.name in _SLOTTED:
                        self.drop_dead_slots(op)
                    for sub in op.regions:
                        self.sweep(sub)
                keep.append(op)
            elif op.regions:
                op.erase()
            elif op.operands:  # all that erase() does for an op without regions, inline
                for i, v in enumerate(op.operands):
                    del v.uses[(op, i)]
                op.operands = []
        if len(keep) != len(r.ops):
            r.ops = keep  # (the ops kept are the region's already)

    def drop_optional_results(self, op: Operation) -> None:
        """Drop the last results nothing live needs, as many as the op's declaration allows
        (``optional_results``): the op then does not compute them."""
        results, live_vals = op.results, self.live_vals
        k, most = 0, op.opdef.optional(op)
        while k < most and results[-1 - k] not in live_vals:
            k += 1
        if k:  # (their users are dead: this sweep erases them, and their uses with them)
            results[:] = results[:len(results) - k]

    def drop_dead_slots(self, op: Operation) -> None:
        """Remove the carried values / if results nothing live needs, all at once (one
        rebuild of each operand list, not one per slot: loops may carry many blobs)."""
        live_vals = self.live_vals
        results = op.results
        kept = [k for k, res in enumerate(results) if res in live_vals]
        if len(kept) == len(results):
            return
        if op.name == "if":
            for r in op.regions:
                if r.ops and r.ops[-1].name == "yield":
                    _keep_operands(r.ops[-1], kept, 0)
        else:
            skip = 1 if op.name == "for" else 0
            for o, first in self.loop_exits(op):
                _keep_operands(o, kept, first)
            _keep_operands(op, kept, skip)
            args = op.regions[0].args
            args[:] = _renumbered(args[:skip] + [args[skip + k] for k in kept])
        results[:] = _renumbered([results[k] for k in kept])


def _keep_operands(op: Operation, kept: list, first: int) -> None:
    """Keep operand ``first + k`` of ``op`` for each ``k`` in ``kept`` (ascending), and
    the ``first`` operands before them; drop the others."""
    operands = op.operands
    op.set_operands(operands[:first] + [operands[first + k] for k in kept])


def _renumbered(values: list) -> list:
    """``values`` (region arguments or op results), their ``index`` set to their position."""
    for k, v in enumerate(values):
        v.index = k
    return values
