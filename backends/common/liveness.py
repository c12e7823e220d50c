"""Where values live in a module: positions, dominance, interference, and what is shown.

A position is the path from the module op down to an op: (region, index) pairs,
flattened. The point just after op ``(.., 3, 2)`` is ``(.., 3, 2.5)``; the start of
region 1 of that op is ``(.., 3, 2, 1, -0.5)``. Structured control flow makes the
questions simple: a use is reached from a point if it comes later in the same region
(or in a later phase of a task), or if a loop around both goes round again without
redefining the value. ``if`` branches never reach each other.

``Visibility`` is the plan's own dead-code view: a value is *needed* if something
the plan shows uses it (an effect, a store to a blob someone reads or fetches, a
condition, a loop count). Hidden: stores to auto-named blobs nobody reads, loop
counters nobody looks at, and the pure ops that only fed them.
"""
from __future__ import annotations

import re

from dslc.ir import OpResult, RegionArg

LOOPS = frozenset({"for", "loop"})
EXCLUSIVE = frozenset({"if"})                      # regions of which exactly one runs
CONCURRENT = frozenset({"parallel", "reporting"})  # regions that run at the same time
CONTROL = frozenset({"for", "loop", "if", "yield", "break_if"})
BLOB_READS = frozenset({"load", "flag"})
SEQUENTIAL = frozenset({"task", "group"})          # regions that run one after the other
STRUCTURAL = CONTROL | BLOB_READS | {"store", "fused", "concurrent", "must"}

_AUTO = re.compile(r"^[A-Z][A-Za-z0-9]*(_\d+)?(:\d+)?$")


def is_auto_blob(name: str) -> bool:
    """Blob names Caffe2 made up from an op type (``local/task/Add_2``, ``Python:1``), and
    blobs local to an IfNet/WhileNet branch (``x@if3``): nobody can fetch either by name."""
    base = name.rsplit("/", 1)[-1]
    return "@" in base or bool(_AUTO.match(base)) or base.startswith("stop_blob")


def looks_made_up(name: str) -> bool:
    """A name Caffe2 derived from an op type (``GE_2``), branch tags aside."""
    return bool(_AUTO.match(name.split("@", 1)[0]))


class Positions:
    """The position of every op and the definition point of every value."""

    def __init__(self, module):
        self.pos: dict = {}
        self.op_at: dict = {}
        self.region_at: dict = {}
        self.first: dict = {}  # op -> its number in program order
        self.last: dict = {}   # op -> the number of the last op nested in it
        self._index(module.op, ())

    def _index(self, op, path):
        self.pos[op] = path
        self.op_at[path] = op
        self.first[op] = len(self.first)
        for r, region in enumerate(op.regions):
            self.region_at[id(region)] = path + (r,)
            for i, child in enumerate(region.ops):
                self._index(child, path + (r, i))
        self.last[op] = len(self.first) - 1

    def span(self, v, uses) -> tuple[float, float]:
        """From where ``v`` is defined to the last op number at which it may still be needed
        (a use inside a loop keeps a value from outside alive to the loop's end). Values
        whose spans do not overlap never interfere; the converse needs ``reaches``."""
        if isinstance(v, OpResult):
            start, home = self.last[v.owner] + 0.5, v.owner.parent
        else:
            start, home = self.first[v.region.parent] + 0.25, v.region
        stop = start
        for u in uses:
            x, op = self.first[u], u
            while op.parent is not None and op.parent is not home:
                outer = op.parent.parent
                if outer is None:
                    break
                if outer.name in LOOPS:
                    x = max(x, self.last[outer])
                op = outer
            stop = max(stop, x)
        return start, stop

    def defpoint(self, v) -> tuple:
        if isinstance(v, OpResult):
            p = self.pos[v.owner]
            return p[:-1] + (p[-1] + 0.5,)
        if isinstance(v, RegionArg):
            return self.region_at[id(v.region)] + (-0.5,)
        raise TypeError(f"not an IR value: {v!r}")

    def dominates(self, a: tuple, b: tuple, phases: bool = True) -> bool:
        """Whether the definition point ``a`` comes before point or position ``b`` on every
        path: later in ``a``'s region, or (``phases``) in a later phase of the task (or
        group) whose phase ``a`` is directly in."""
        region = a[:-1]
        k = len(region)
        if len(b) > k and b[:k] == region:
            return b[k] > a[-1]
        if not phases:
            return False
        owner = region[:-1]
        return (k >= 1 and len(b) >= k and b[:k - 1] == owner and b[k - 1] > region[-1]
                and self.op_at[owner].name in SEQUENTIAL)

    def reaches(self, x: tuple, u: tuple, d: tuple) -> bool:
        """Whether the op at ``u`` can run after point ``x`` while the value defined at ``d`` lives."""
        n = min(len(x), len(u))
        m = next((k for k in range(n) if x[k] != u[k]), n)
        if m < n:
            if m % 2 == 1 and u[m] > x[m]:
                return True  # later in the same region
            if m % 2 == 0:
                owner = self.op_at[x[:m]].name
                if owner not in EXCLUSIVE and owner not in CONCURRENT and u[m] > x[m]:
                    return True  # a later phase of a task or group
        # Otherwise only a loop around both brings u round again, and only if the value
        # is defined outside that loop (inside it, going round redefines it first).
        limit = len(u) - 2 if m == len(u) else (m if m % 2 == 0 else m - 1)
        for k in range(0, limit + 1, 2):
            op = self.op_at.get(x[:k])
            if op is not None and op.name in LOOPS and not (len(d) > k and d[:k] == x[:k]):
                return True
        return False


class Visibility:
    """Which values the plan needs, and which uses of a value it shows.

    ``canon`` maps a value to the value it stands for (a fused kernel's argument is
    its operand; ``must`` is its operand).
    """

    def __init__(self, module, canon, live_blob):
        self.canon, self.live_blob = canon, live_blob
        self.needed: set = set()
        self._effect: dict = {}
        self._work: list = []
        for op in module.walk():
            self._seed(op)
        while self._work:
            self._implied(self._work.pop())

    def mark(self, v) -> None:
        v = self.canon(v)
        if v not in self.needed:
            self.needed.add(v)
            self._work.append(v)

    def _seed(self, op) -> None:
        name = op.name
        if name == "store":
            if self.live_blob(op.attrs["blob"]):
                self.mark(op.operands[0])
        elif name in ("for", "break_if") or (name == "if" and self.has_effect(op)):
            self.mark(op.operands[0])
        elif name not in STRUCTURAL and not op.opdef.is_pure:
            for v in op.operands:  # effects, and ops this backend does not know
                self.mark(v)

    def has_effect(self, op) -> bool:
        """Whether anything inside ``op`` shows without being used: an effect, a store to a
        blob the plan shows, a loop, a stop. (Ifs without such ops and results vanish.)"""
        got = self._effect.get(op)
        if got is None:
            got = False
            for r in op.regions:
                for o in r.ops:
                    if o.name == "store":
                        got = self.live_blob(o.attrs["blob"])
                    elif o.name in ("for", "loop", "break_if"):
                        got = True
                    elif o.name == "if" or o.regions:
                        got = self.has_effect(o) or (o.name != "if" and o.name not in STRUCTURAL)
                    else:
                        got = o.name not in STRUCTURAL and not o.opdef.is_pure
                    if got:
                        break
                if got:
                    break
            self._effect[op] = got
        return got

    def _implied(self, v) -> None:
        if isinstance(v, OpResult):
            op, k = v.owner, v.index
            if op.name == "for":
                self._slot(op, k)
            elif op.name == "loop":
                for b in op.regions[0].ops:
                    if b.name == "break_if" and len(b.operands) > k + 1:
                        self.mark(b.operands[k + 1])
            elif op.name in ("if", "fused", "concurrent"):
                if op.name == "if":
                    self.mark(op.operands[0])
                for r in op.regions:
                    if r.ops and r.ops[-1].name == "yield":
                        self.mark(r.ops[-1].operands[k])
            elif op.name not in BLOB_READS and op.opdef.is_pure:
                for x in op.operands:
                    self.mark(x)
        elif isinstance(v, RegionArg):
            op = v.region.parent
            if op is not None and op.name == "for" and v.index > 0:
                self._slot(op, v.index - 1)
            elif op is not None and op.name == "loop":
                self._slot(op, v.index)

    def _slot(self, op, k: int) -> None:
        """Carried value ``k`` of a loop: its start value, its argument, what the body yields."""
        body = op.regions[0]
        first = 1 if op.name == "for" else 0
        self.mark(body.args[first + k])
        self.mark(op.operands[first + k])
        if body.ops and body.ops[-1].name == "yield":
            self.mark(body.ops[-1].operands[k])

    def shown_use(self, op, index: int) -> bool:
        """Whether the plan shows operand ``index`` of ``op``."""
        name = op.name
        if name == "store":
            return self.live_blob(op.attrs["blob"])
        if name == "yield":
            parent = op.parent.parent
            if parent.name == "for":
                return self.slot_needed(parent, index)
            if parent.name == "loop":
                return self.canon(op.parent.args[index]) in self.needed
            return self.canon(parent.results[index]) in self.needed
        if name in ("for", "loop"):
            first = 1 if name == "for" else 0
            return index < first or self.slot_needed(op, index - first)
        if name == "break_if":
            loop = op.parent.parent
            return index == 0 or self.canon(loop.results[index - 1]) in self.needed
        if name in ("if", "fused", "concurrent", "must"):
            return True
        if op.opdef.is_pure or name in BLOB_READS:
            return any(self.canon(r) in self.needed for r in op.results)
        return True

    def slot_needed(self, op, k: int) -> bool:
        """Whether carried value ``k`` of a loop matters. A ``for``'s results are its carried
        values; a ``loop``'s come from its break_ifs, so only the argument counts there."""
        first = 1 if op.name == "for" else 0
        if self.canon(op.regions[0].args[first + k]) in self.needed:
            return True
        return op.name == "for" and k < len(op.results) and self.canon(op.results[k]) in self.needed
