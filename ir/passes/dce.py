"""``dce``: remove what cannot change the job's results.

* stores to blobs that vanish unread: nothing in the module reads them, they are no
  task's output, they were not in the workspace before, and they are written in a
  workspace that is dropped afterwards (a PRIVATE task, one instance of a
  multi-instance task, a ``scope``). Stores in GLOBAL tasks stay: later runs of the
  session may read those blobs;
* then, mark and sweep: ops with effects are live, and so is whatever they use,
  transitively, through carried loop values and ``if`` results; the rest goes,
  including carried values and results nothing live needs.

    %c = Const {value = dense<i64: 2>} : i64       (nothing uses %c)
    store @"tmp"(%x)        (in a PRIVATE task; nothing reads @"tmp")   ->   (both gone)
"""
from __future__ import annotations

from ..core import Module, Operation, OpResult, Region, RegionArg
from ..opdef import PURE
from .analysis import set_ops
from .manager import Pass, register

REMOVABLE = ("flag", "yield", "for", "if")  # besides pure ops and optional loads
LOOPS = ("for", "loop")
_SPECIAL_OPERANDS = frozenset(LOOPS + ("if", "yield", "break_if", "fused"))  # see mark_op


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
        stores, tasks, read = [], [], set()
        names_observable = False
        for op in module.walk():
            n = op.name
            if n == "store":
                stores.append(op)
                continue
            # an optional load only keeps a blob unchanged when nothing writes it; real
            # reads are plain loads, stop flags and the `must` checks promotion leaves
            if n == "flag" or n == "must" or (n == "load" and not op.attrs.get("optional")):
                read.add(op.attrs["blob"])
            elif n == "task":
                tasks.append(op)
            elif n == "GetAllBlobNames":
                names_observable = True  # every blob the job writes must exist
            if not self.removable(op):
                self.mark_op(op)
        self.dead_stores = set() if names_observable else self.find_dead_stores(module, stores, tasks, read)
        for op in stores:
            if op not in self.dead_stores:
                self.mark_op(op)
        while self.work:
            self.mark_source(self.work.pop())
        self.sweep(module.body)

    # --- dead stores
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
        dropped: dict = {}  # region -> whether the workspace it writes is dropped afterwards
        dead = set()
        for op in stores:
            if op.attrs["blob"] in needed:
                continue
            r = op.parent
            in_dropped = dropped.get(r)
            if in_dropped is None:
                in_dropped = dropped[r] = _writes_dropped_workspace(r)
            if in_dropped:
                dead.add(op)
        return dead

    # --- marking
    def removable(self, op: Operation) -> bool:
        """Whether ``op`` may go when nothing needs its results.

        Plain loads stay (a read of an unset blob is an error the user should see), and
        so does a ``for`` whose count may be negative (that too is an error).
        """
        if op.name == "store":
            return op in self.dead_stores
        if op.name == "load":
            return bool(op.attrs.get("optional"))
        if op.name == "for":
            c = getattr(op.operands[0], "owner", None)
            return c is not None and c.name == "Const" and int(c.attrs["value"]) >= 0
        return PURE in op.opdef.traits or op.name in REMOVABLE

    def mark_op(self, op: Operation) -> None:
        if op in self.live_ops:
            return
        self.live_ops.add(op)
        if op.name not in _SPECIAL_OPERANDS:  # the usual op: all its operands are needed
            live_vals = self.live_vals
            for v in op.operands:
                if v not in live_vals:  # mark_val, inline: this is the hottest loop
                    live_vals.add(v)
                    self.work.append(v)
        elif op.name in LOOPS:
            if op.name == "for":
                self.mark_val(op.operands[0])
        elif op.name == "if":
            self.mark_val(op.operands[0])
        elif op.name == "yield":
            pass  # yielded values are live only for live slots (see mark_slot)
        elif op.name == "break_if":
            self.mark_val(op.operands[0])
        else:  # fused
            for v in op.operands:
                self.mark_val(v)
            for inner in op.regions[0].walk():  # a kernel is kept whole
                self.live_ops.add(inner)
                for v in inner.operands:
                    self.mark_val(v)
        parent = op.parent.parent if op.parent is not None else None
        if parent is not None and parent not in self.live_ops:
            self.mark_op(parent)

    def mark_val(self, v) -> None:
        if v not in self.live_vals:
            self.live_vals.add(v)
            self.work.append(v)

    def mark_source(self, v) -> None:
        if isinstance(v, OpResult):
            op = v.owner
            if op.name in LOOPS or op.name == "if":
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
                if op.regions:
                    if op.name in LOOPS or op.name == "if":
                        self.drop_dead_slots(op)
                    for sub in op.regions:
                        self.sweep(sub)
                keep.append(op)
            elif op.regions:
                op.erase()
            elif op.operands:
                op.drop_operands()  # all that erase() does for an op without regions
        if len(keep) != len(r.ops):
            set_ops(r, keep)

    def drop_dead_slots(self, op: Operation) -> None:
        """Remove the carried values / if results nothing live needs, all at once (one
        rebuild of each operand list, not one per slot: loops may carry many blobs)."""
        dead = {k for k, res in enumerate(op.results) if res not in self.live_vals}
        if not dead:
            return
        if op.name == "if":
            for r in op.regions:
                if r.ops and r.ops[-1].name == "yield":
                    _remove_operands(r.ops[-1], dead, 0)
        else:
            skip = 1 if op.name == "for" else 0
            body = op.regions[0]
            for o, first in self.loop_exits(op):
                _remove_operands(o, dead, first)
            _remove_operands(op, dead, skip)
            body.args[:] = _renumbered([a for k, a in enumerate(body.args) if k - skip not in dead])
        op.results[:] = _renumbered([res for k, res in enumerate(op.results) if k not in dead])


def _writes_dropped_workspace(r: Region) -> bool:
    """Whether ops of region ``r`` (or nested in it) write a workspace dropped afterwards:
    a PRIVATE task's, that of one instance of a multi-instance task (its phases 1-3), or
    a ``scope``'s."""
    while r is not None and r.parent is not None:
        op = r.parent
        if op.name == "task":
            if op.attrs["workspace"] == "private":
                return True
            if int(op.attrs["instances"]) > 1 and op.regions.index(r) in (1, 2, 3):
                return True
        elif op.name == "scope" and r is op.regions[0]:
            return True
        r = op.parent
    return False


def _remove_operands(op: Operation, slots: set, skip: int) -> None:
    """Remove operand ``skip + k`` of ``op`` for every ``k`` in ``slots``."""
    op.set_operands([v for i, v in enumerate(op.operands) if i - skip not in slots])


def _renumbered(values: list) -> list:
    """``values`` (region arguments or op results), their ``index`` set to their position."""
    for k, v in enumerate(values):
        v.index = k
    return values
