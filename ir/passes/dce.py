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


@register
class DeadCode(Pass):
    name = "dce"

    def run(self, module: Module) -> None:
        ops = module.walk()  # marking adds nothing and removes nothing: one walk serves all
        self.dead_stores: set = set()
        self.drop_dead_stores(module, ops)
        self.live_ops: set = set()
        self.live_vals: set = set()
        self.work: list = []
        for op in ops:
            if not self.removable(op):
                self.mark_op(op)
        while self.work:
            self.mark_source(self.work.pop())
        self.sweep(module.body)

    # --- dead stores
    def drop_dead_stores(self, module: Module, ops: list) -> None:
        """Note the stores that vanish unread (``ops``: the module, walked)."""
        # an optional load only keeps a blob unchanged when nothing writes it; real reads
        # are plain loads, stop flags and the `must` checks promotion leaves at old reads
        read = {op.attrs["blob"] for op in ops
                if op.name in ("flag", "must") or (op.name == "load" and not op.attrs.get("optional"))}
        if any(op.name == "GetAllBlobNames" for op in ops):
            return  # blob names are observable: every blob the job writes must exist
        kept = set()
        for g in module.body.ops:
            kept |= {str(s) for s in g.attrs.get("existing", [])}
            kept |= {str(s) for t in g.walk() if t.name == "task" for s in t.attrs["outputs"]}
        for op in ops:
            if op.name == "task":
                per_instance = int(op.attrs["instances"]) > 1
                for i, r in enumerate(op.regions):
                    private = op.attrs["workspace"] == "private" or (per_instance and i in (1, 2, 3))
                    self._drop_stores(r, private, read | kept)
            elif op.name == "scope":
                self._drop_stores(op.regions[0], True, read | kept)

    def _drop_stores(self, r: Region, private: bool, needed: set) -> None:
        if not private:
            return
        for op in r.walk():
            if op.name == "store" and op.attrs["blob"] not in needed:
                self.dead_stores.add(op)  # removed by the sweep (never marked live)

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
        return op.opdef.has(PURE) or op.name in REMOVABLE

    def mark_op(self, op: Operation) -> None:
        if op in self.live_ops:
            return
        self.live_ops.add(op)
        if op.name in LOOPS:
            if op.name == "for":
                self.mark_val(op.operands[0])
        elif op.name == "if":
            self.mark_val(op.operands[0])
        elif op.name == "yield":
            pass  # yielded values are live only for live slots (see mark_slot)
        elif op.name == "break_if":
            self.mark_val(op.operands[0])
        else:
            for v in op.operands:
                self.mark_val(v)
            if op.name == "fused":  # a kernel is kept whole
                for inner in op.regions[0].walk():
                    self.live_ops.add(inner)
                    for v in inner.operands:
                        self.mark_val(v)
        parent = op.parent.parent if op.parent is not None else None
        if parent is not None:
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
            body = op.regions[0]
            self.mark_val(body.args[skip + k])
            for o in body.ops:
                if o.name == "yield":
                    self.mark_val(o.operands[k])
                elif o.name == "break_if":
                    self.mark_val(o.operands[1 + k])
        else:
            self.mark_val(op.results[k])
            for r in op.regions:
                if r.ops and r.ops[-1].name == "yield":
                    self.mark_val(r.ops[-1].operands[k])

    # --- sweeping
    def sweep(self, r: Region) -> None:
        keep = []
        for op in r.ops:
            if op in self.live_ops or op.name == "yield":
                if op.name in LOOPS or op.name == "if":
                    self.drop_dead_slots(op)
                for sub in op.regions:
                    self.sweep(sub)
                keep.append(op)
            else:
                op.erase()
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
            for o in body.ops:
                if o.name in ("break_if", "yield"):
                    _remove_operands(o, dead, 1 if o.name == "break_if" else 0)
            _remove_operands(op, dead, skip)
            body.args[:] = _renumbered([a for k, a in enumerate(body.args) if k - skip not in dead])
        op.results[:] = _renumbered([res for k, res in enumerate(op.results) if k not in dead])


def _remove_operands(op: Operation, slots: set, skip: int) -> None:
    """Remove operand ``skip + k`` of ``op`` for every ``k`` in ``slots``."""
    keep = [v for i, v in enumerate(op.operands) if i - skip not in slots]
    op.drop_operands()
    for v in keep:
        op.add_operand(v)


def _renumbered(values: list) -> list:
    """``values`` (region arguments or op results), their ``index`` set to their position."""
    for k, v in enumerate(values):
        v.index = k
    return values
