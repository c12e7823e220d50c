"""``schedule``: order each block by its dependency DAG, and let large independent ops
run at the same time.

The DAG (networkx) has a data edge from each value's definer to its users, and an
ordering edge between two ops touching one resource when either writes it: a
blob, a counter, a queue... (``io``, Python ops and ``must`` checks share one
resource, the outside world; so do blobs that other threads may touch). Stop
checks, terminators, ops that run other code on the workspace and ops that may fail
(an error must come after the effects before it, and before those after it) are
barriers.
Ops are then placed by topological generation (original order within one); in a
generation, two or more pure ops over large arrays become a ``concurrent`` op (when the
process may run on two CPUs or more: its affinity mask says)::

    %x = Exp(%a) : f32[1000000]           %x, %y = concurrent : f32[1000000], f32[1000000] {
    %y = Log(%b) : f32[1000000]     ->      %x1 = Exp(%a) : f32[1000000]
                                            %y1 = Log(%b) : f32[1000000]
                                            yield(%x1, %y1)
                                          }
"""
from __future__ import annotations

import math

from ..analysis import STRUCTURED, is_barrier, volatile_blobs
from ..builder import make_op, set_ops
from ..cores import usable_cpus
from ..core import Module, Operation, Region
from ..types import TensorType
from .manager import Pass, register

LARGE = 1 << 18  # elements: below this a thread hand-off costs more than it saves
WORLD = "world"
PINNED = ("yield", "break_if")


@register
class Schedule(Pass):
    name = "schedule"

    def run(self, module: Module) -> None:
        if usable_cpus() < 2:
            return  # (one CPU: ops run together only take turns, and a `concurrent` op splits
            #        the stretch of ops a backend would compile as one function)
        self.module = module
        self._volatile = None
        for op in module.walk():  # a list made before any rewrite
            if not op.regions or op.name in ("fused", "concurrent"):
                continue
            for r in op.regions:
                # ordering by generation pays only where large ops can then run together
                if len(r.ops) > 2 and _two_large_pure(r.ops):
                    self.block(r)

    @property
    def volatile(self) -> set:
        """``volatile_blobs`` of the module, worked out when first asked: most modules
        have no block worth scheduling, and then no one asks."""
        if self._volatile is None:
            self._volatile = volatile_blobs(self.module)
        return self._volatile

    # --- effects of an op (and everything nested in it)
    def accesses(self, op: Operation):
        """(resource, is_write) pairs; ``None`` as resource means a barrier.

        A blob no other thread touches is its own resource, and so are timers; every
        other effect (counters, queues, printing, Python ops, shared blobs, checks)
        may be how threads synchronise or what the user sees, so it keeps its order.
        """
        out = set()
        for o in op.walk():
            n = o.name
            if n in PINNED or is_barrier(o) or o.opdef.fails(o):
                out.add((None, True))
            elif n in ("load", "store", "flag") and str(o.attrs["blob"]) not in self.volatile:
                out.add(("blob:" + str(o.attrs["blob"]), n == "store"))
            elif n in ("load", "store", "flag", "must"):
                out.add((WORLD, True))
            elif o.opdef.effects:
                timer = all(e.resource == "timer" for e in o.opdef.effects)
                out.add(("timer" if timer else WORLD, True))
            elif not o.opdef.is_pure and n not in STRUCTURED + ("yield", "fused", "concurrent"):
                out.add((WORLD, True))
        return out

    # --- one block
    def block(self, r: Region) -> None:
        import networkx as nx  # imported when a block is scheduled: it costs a CLI start 0.3 s

        ops = r.ops
        g = nx.DiGraph()
        g.add_nodes_from(range(len(ops)))
        where = {}
        for i, op in enumerate(ops):
            for res in op.results:
                where[res] = i
        last_write: dict = {}
        readers: dict = {}
        barrier, since = None, []
        for i, op in enumerate(ops):
            for o in op.walk():
                for v in o.operands:
                    j = where.get(v)
                    if j is not None and j != i:
                        g.add_edge(j, i)
            acc = self.accesses(op)
            if (None, True) in acc:
                g.add_edges_from((j, i) for j in since)
                if barrier is not None:
                    g.add_edge(barrier, i)
                barrier, since = i, []
                last_write.clear()
                readers.clear()
                continue
            if barrier is not None:
                g.add_edge(barrier, i)
            since.append(i)
            for key, write in acc:
                if key in last_write:
                    g.add_edge(last_write[key], i)
                if write:
                    g.add_edges_from((j, i) for j in readers.pop(key, ()) if j != i)
                    last_write[key] = i
                else:
                    readers.setdefault(key, []).append(i)
        order = []
        for gen in nx.topological_generations(g):
            gen = sorted(gen)
            big = [ops[i] for i in gen if _large_pure(ops[i])]
            if len(big) >= 2:
                order.append(_concurrent(big))
                order += [ops[i] for i in gen if ops[i] not in big]
            else:
                order += [ops[i] for i in gen]
        set_ops(r, order)


def _two_large_pure(ops) -> bool:
    """Whether at least two of ``ops`` are ``_large_pure``."""
    found = 0
    for op in ops:
        if _large_pure(op):
            found += 1
            if found == 2:
                return True
    return False


def _large_pure(op: Operation) -> bool:
    # (a sparse update's result is its whole table, but it works on the rows it touches)
    if not op.opdef.is_pure or op.regions or len(op.results) != 1 or op.name == "Const" \
            or op.opdef.fails(op) or op.opdef.updates:
        return False
    t = op.result.type
    return isinstance(t, TensorType) and t.shape is not None and None not in t.shape and \
        math.prod(t.shape) >= LARGE


def _concurrent(ops) -> Operation:
    region = Region()
    c = make_op("concurrent", result_types=[op.result.type for op in ops], regions=[region], loc=ops[0].loc)
    for op, res in zip(ops, c.results):
        res.hint = op.result.hint
        for user, i in list(op.result.uses):
            user.set_operand(i, res)
    for op in ops:
        region.append(op)
    region.append(make_op("yield", [op.result for op in ops], loc=ops[0].loc))
    return c
