"""Variable names for a module's values, as a person explaining the job would pick them.

Values that are one variable in the Python sense share a name: a loop's carried
value, its start value, what the body yields and the loop's result; an ``if``'s
result and what its branches yield; a fused kernel's arguments and its operands.
Two values share a name only where that cannot mislead: neither is still needed
where the other is defined (``total = Add(total, val)`` reuses ``total`` because the
old value dies there). Otherwise the later one gets ``name_2``.

Where a name comes from, best first:

1. the value's hint (a blob the user named, e.g. ``global_counter``);
2. the job's source line (``val = ops.Add(...)``, ``ops.Add([t, v], [total])``);
3. the blob it is loaded from or stored to (an auto-named blob takes the name of
   what is stored to it; else its base name, ``GE_2``);
4. loop indices by depth: ``i``, ``j``, ``k``...;
5. the op, lowercased (``ge``, ``countup``).

Constants have no name: the plan writes them as literals.
"""
from __future__ import annotations

import keyword
import re

from dslc.ir import OpResult, RegionArg

from .liveness import Positions, Visibility, is_auto_blob, looks_made_up

INDEX_NAMES = "ijklmnpq"
_FILL = re.compile(r"^GivenTensor\w*Fill")  # what Const records
_DUMMY = re.compile(r":output(_\d+)?/ConstantFill(_\d+)?:0$")


# op -> index of the first operand its results repeat, in order (the rest are new)
ALIASES = {"EnqueueBlobs": 1, "SafeEnqueueBlobs": 1}


def aliased(op) -> list[tuple[int, int]]:
    """(result index, operand index) pairs of results that are an operand again."""
    first = ALIASES.get(op.name)
    if first is None:
        return []
    n = len(op.operands) - first
    return [(k, first + k) for k in range(min(n, len(op.results)))]


def is_dummy_output(blob: str) -> bool:
    """The output Caffe2 gives a task that has none (``local/task:output/ConstantFill:0``)."""
    return bool(_DUMMY.search(str(blob)))
NOT_COMPUTING = frozenset({"store", "yield", "break_if", "must", "load", "flag"})


class Names:
    """Names of every needed value and every blob of ``module``."""

    def __init__(self, module, source=None, extra_live=()):
        """``extra_live``: blobs that other modules of the job read (so stores to them show)."""
        self.source = source
        self.positions = Positions(module)
        self._alias: dict = {}
        self._order: dict = {}
        self._depth: dict = {}
        self._walk(module.op, 0)
        live = self._live_blobs(module) | set(extra_live)
        self.vis = Visibility(module, self.canon, lambda b: str(b) in live)
        self._members: dict = {}
        for v in self._order:
            self._members.setdefault(self.canon(v), []).append(v)
        self._uses = {c: self._shown_uses(ms) for c, ms in self._members.items()}
        self._spans: dict = {}
        self._carry: dict = {}  # value -> loads of the blob it was stored to (it lives till then)
        self._parent: dict = {}
        self._group_members: dict = {}
        self._unite(module.op)
        self._join_blob_copies(module)
        self._pref = {v: self._preference(v) for v in self._order if self.canon(v) is v}
        self.blobs = self._blob_names(module)
        self._names = self._allocate()

    # --- the public questions
    def canon(self, v):
        while v in self._alias:
            v = self._alias[v]
        return v

    def of(self, v) -> str:
        """The variable name of ``v`` (or of the value it stands for)."""
        return self._names.get(self._root(self.canon(v)), "_")

    def needed(self, v) -> bool:
        return self.canon(v) in self.vis.needed

    def same(self, a, b) -> bool:
        """Whether two values are one variable (so copying one to the other prints nothing)."""
        return self._root(self.canon(a)) is self._root(self.canon(b))

    def anonymous(self, v) -> bool:
        """A needed value nobody named (no hint, source name or blob), alone in its variable:
        the plan may write it inside its user."""
        v = self.canon(v)
        return self.needed(v) and self._pref[v][0] >= 4 and len(self._group(self._root(v))) == 1

    def shown_uses(self, v) -> list:
        """The ops whose lines use ``v``."""
        return self._uses.get(self.canon(v), [])

    def blob(self, name) -> str:
        return self.blobs.get(str(name)) or _not_a_word(_base(str(name)))

    def interferes(self, a, b) -> bool:
        """Whether ``a`` is still needed where ``b`` is defined, or the other way round."""
        a, b = self.canon(a), self.canon(b)
        (sa, ea), (sb, eb) = self._span(a), self._span(b)
        if ea <= sb or eb <= sa:
            return False  # one is dead before the other exists (the cheap, common answer)
        p = self.positions
        da, db = p.defpoint(a), p.defpoint(b)
        if da == db:
            return a is not b  # two results of one op, or two args of one region
        if p.dominates(da, db):
            return self._live_at(a, db)
        if p.dominates(db, da):
            return self._live_at(b, da)
        return False

    def _live_uses(self, v):
        return self._uses.get(v, []) + self._carry.get(v, [])

    def _live_at(self, v, point) -> bool:
        """Whether ``v`` (defined before ``point``) may still be needed after ``point``."""
        p = self.positions
        d = p.defpoint(v)
        return any(p.reaches(point, p.pos[u], d) for u in self._live_uses(v))

    def _span(self, v):
        got = self._spans.get(v)
        if got is None:
            got = self._spans[v] = self.positions.span(v, self._live_uses(v))
        return got

    # --- structure
    def _walk(self, op, depth: int) -> None:
        inner = depth + (op.name in ("for", "loop"))
        for r in op.regions:
            for a in r.args:
                self._order[a] = len(self._order)
                self._depth[a] = depth
            for child in r.ops:
                self._walk(child, inner)
        if op.name == "fused":
            for a, v in zip(op.regions[0].args, op.operands):
                self._alias[a] = v
        elif op.name == "must":
            self._alias[op.result] = op.operands[0]
        for k, j in aliased(op):
            self._alias[op.results[k]] = op.operands[j]
        for res in op.results:
            self._order[res] = len(self._order)

    @staticmethod
    def _live_blobs(module) -> set:
        """Blobs the plan mentions: read somewhere, fetched as outputs, or named by the user."""
        live = set()
        for op in module.walk():
            if op.name in ("load", "flag"):
                live.add(str(op.attrs["blob"]))
            elif op.name == "task":  # (the dummy output of an output-less task says nothing)
                live.update(str(b) for b in op.attrs["outputs"] if not is_dummy_output(b))
            elif op.name == "store" and not is_auto_blob(str(op.attrs["blob"])):
                live.add(str(op.attrs["blob"]))
        return live

    def _shown_uses(self, members) -> list:
        # (a use by an op no longer in the module is stale: a pass dropped the op)
        pos = self.positions.pos
        return [op for m in members for op, i in m.uses if op in pos and self.vis.shown_use(op, i)]

    # --- groups: values that are one variable
    def _root(self, v):
        while v in self._parent:
            v = self._parent[v]
        return v

    def _group(self, root) -> list:
        return self._group_members.get(root, [root])

    def _try_union(self, a, b) -> None:
        a, b = self.canon(a), self.canon(b)
        if _is_const(a) or _is_const(b) or not (self.needed(a) and self.needed(b)):
            return
        ra, rb = self._root(a), self._root(b)
        if ra is rb:
            return
        ga, gb = self._group(ra), self._group(rb)
        if any(self.interferes(x, y) for x in ga for y in gb):
            return
        self._parent[rb] = ra
        self._group_members[ra] = ga + gb
        self._group_members.pop(rb, None)

    def _unite(self, op) -> None:
        for r in op.regions:  # inner ops first: a loop joins groups its body already formed
            for child in r.ops:
                self._unite(child)
        if op.name in ("for", "loop"):
            body = op.regions[0]
            first = 1 if op.name == "for" else 0
            end = body.ops[-1] if body.ops and body.ops[-1].name == "yield" else None
            for k, arg in enumerate(body.args[first:]):
                if op.name == "for" and k < len(op.results):
                    self._try_union(arg, op.results[k])
                if end is not None:
                    self._try_union(arg, end.operands[k])
                self._try_union(arg, op.operands[first + k])
            for b in body.ops:
                if b.name == "break_if":
                    for res, v in zip(op.results, b.operands[1:]):
                        self._try_union(res, v)
        elif op.name in ("if", "fused", "concurrent"):
            for r in op.regions:
                if r.ops and r.ops[-1].name == "yield":
                    for res, v in zip(op.results, r.ops[-1].operands):
                        self._try_union(res, v)

    def _join_blob_copies(self, module) -> None:
        """A load of a blob written once, by a store that always runs before it, is the
        stored value again: one variable, even where both are still needed."""
        stores: dict = {}
        for op in module.walk():
            if op.name == "store":
                stores.setdefault(str(op.attrs["blob"]), []).append(op)
        p = self.positions
        copies: dict = {}
        for op in module.walk():
            if op.name not in ("load", "flag"):
                continue
            only = stores.get(str(op.attrs["blob"]), [])
            if len(only) != 1:
                continue
            after = p.pos[only[0]][:-1] + (p.pos[only[0]][-1] + 0.5,)
            if not p.dominates(after, p.pos[op], phases=False):  # (in one phase only)
                continue
            w, u = self.canon(op.result), self.canon(only[0].operands[0])
            if _is_const(u) or not (self.needed(w) and self.needed(u)):
                continue
            rw, ru = self._root(w), self._root(u)
            if rw is ru:
                continue
            same = copies.setdefault(u, {u})  # values that all hold what u holds
            # between the store and the load the blob holds u: u's name must stay its own
            self._carry.setdefault(u, []).append(op)
            self._spans.pop(u, None)
            if any(self.interferes(x, y) for x in self._group(rw) for y in self._group(ru)
                   if not (x is w and y in same)):
                self._carry[u].pop()
                self._spans.pop(u, None)
                continue
            same.add(w)
            self._parent[rw] = ru
            self._group_members[ru] = self._group(ru) + self._group(rw)
            self._group_members.pop(rw, None)

    # --- preferences
    def _preference(self, v):
        """(rank, text) for the value's own name (see the module docstring)."""
        if isinstance(v, RegionArg):
            parent = v.region.parent
            if parent is not None and parent.name == "for" and v.index == 0:
                d = self._depth[v]
                return 3, INDEX_NAMES[d] if d < len(INDEX_NAMES) else f"i{d}"
            if v.hint and v.hint != "n" and not looks_made_up(v.hint):
                return 0, v.hint
            return 4, "iters" if v.hint == "n" else "arg"
        if v.hint and not looks_made_up(v.hint):
            return 0, v.hint
        src = self._source_name(v)
        if src:
            return 1, src
        return 4, v.owner.name.lower()

    def _source_name(self, v) -> str | None:
        op = v.owner
        if self.source is None or op.name in NOT_COMPUTING:
            return None
        names = self.source.names_at(op.loc)
        if not names or len(names) != len(op.results):
            return None
        outer, count = self.source.called_at(op.loc)
        if outer is None or outer.lower() != op.name.lower():
            return None  # the line's names belong to another op (or to a library call)
        if count == 1:
            return names[v.index]  # the line's only call of this op (perhaps run several times)
        for r in op.results:  # several: only the outermost op of the line gets the names
            for user, _ in r.uses:
                if user.name not in NOT_COMPUTING and user.loc == op.loc:
                    return None
        return names[v.index]

    def _group_pref(self, root, chosen_only: bool = False):
        """The best name among the group's members (earliest on a tie); ``chosen_only``:
        only names someone chose (hints, the source), not ones made up from blobs or ops."""
        best = None
        for m in self._group(root):
            rank, text = self._pref[m] if m in self._pref else (9, None)
            if rank == 4 and not chosen_only:
                rank, text = self._blob_pref(m) or (rank, text)
            if (rank <= 1 or not chosen_only) and (best is None or (rank, self._order[m]) < best[:2]):
                best = (rank, self._order[m], text)
        return best[2] if best else None

    def _group_rank(self, root) -> int:
        return min((self._pref[m][0] for m in self._group(root) if m in self._pref), default=9)

    def _group_blobs(self, root) -> set:
        """Display names of the blobs the group's values are loaded from or stored to."""
        got = set()
        for m in self._group(root):
            if isinstance(m, OpResult) and m.owner.name in ("load", "flag"):
                got.add(self.blob(m.owner.attrs["blob"]))
            for x in self._members.get(m, [m]):
                got.update(self.blob(u.attrs["blob"]) for u, _ in x.uses
                           if u.name == "store" and u in self.positions.pos)
        return got

    def _blob_pref(self, v):
        """(2, blob name) if ``v`` is loaded from or stored to a blob the plan shows."""
        if isinstance(v, OpResult) and v.owner.name in ("load", "flag"):
            return 2, self.blob(v.owner.attrs["blob"])
        for m in self._members.get(v, [v]):
            for user, _ in m.uses:
                if user.name == "store" and user in self.positions.pos and self.vis.shown_use(user, 0):
                    return 2, self.blob(user.attrs["blob"])
        return None

    def _blob_names(self, module) -> dict:
        """Each blob's name: its own base name, or for an auto-named one, what is stored to it."""
        chosen: dict[str, str | None] = {}
        for op in module.walk():
            if op.name not in ("load", "flag", "store"):
                continue
            blob = str(op.attrs["blob"])
            if chosen.get(blob) is not None:
                continue
            if not is_auto_blob(blob):
                chosen[blob] = _base(blob)
            elif op.name == "store":
                chosen[blob] = self._stored_name(op)
            else:
                chosen.setdefault(blob, None)
        taken: set = set()
        return {blob: _unique(_not_a_word(name or _base(blob)), taken) for blob, name in chosen.items()}

    def _stored_name(self, store) -> str | None:
        """What the job calls the value a store writes: the names on the store's own line
        (``ops.Add([a, one], [accum])`` writes "accum"), else the value's own name."""
        v = self.canon(store.operands[0])
        if isinstance(v, OpResult) and v.owner.loc == store.loc:
            got = self._source_name(v)  # the op that made it: named only if outermost
        else:  # a pass merged or moved the op that wrote it; the store keeps the line
            names = self.source.names_at(store.loc) if self.source is not None else None
            got = names[0] if names and len(names) == 1 else None
        if got or _is_const(v):
            return got
        return self._group_pref(self._root(v), chosen_only=True)

    # --- allocation
    def _allocate(self) -> dict:
        holders: dict[str, list] = {}  # name -> [(end of span, group)] of groups holding it
        names = {}
        blob_names = set(self.blobs.values())
        events = self._blob_events()
        roots = {self._root(v) for v in self._pref if self.needed(v) and not _is_const(v)}
        spans = {r: self._group_span(r) for r in roots}
        # groups in the order they start, so a holder whose span ended is done for good
        for root in sorted(roots, key=lambda r: (spans[r][0], self._order[r])):
            start = spans[root][0]
            base = _identifier(self._group_pref(root))
            # a made-up name must not pass for a blob the value has nothing to do with
            own = self._group_blobs(root) if self._group_rank(root) >= 2 else None
            k, name = 1, base
            while True:
                live = holders[name] = [(e, g) for e, g in holders.get(name, ()) if e > start]
                taken = (own is not None and name in blob_names and name not in own) or \
                    self._overwritten(root, events.get(name, ()))
                if not taken and not any(self._groups_interfere(root, g) for _, g in live):
                    break
                k += 1
                name = f"{base}_{k}"
            holders[name].append((spans[root][1], root))
            names[root] = name
        return names

    def _blob_events(self) -> dict:
        """Blob display name -> the ops that write or read it by that name in the plan
        (shown stores, loads): while a variable of that name is needed, they would clash."""
        events: dict = {}
        for op in self.positions.pos:
            if op.name == "store" and self.vis.shown_use(op, 0):
                events.setdefault(self.blob(op.attrs["blob"]), []).append((op, op.operands[0]))
            elif op.name in ("load", "flag") and self.needed(op.result):
                events.setdefault(self.blob(op.attrs["blob"]), []).append((op, op.result))
        return events

    def _overwritten(self, root, events) -> bool:
        """Whether naming the group after a blob (``events``: that blob's stores and loads)
        would mislead: a value of the group still needed where the plan writes or reads
        the blob holding something else, or a value of the group defined (so the name
        rebound) while the blob's content waits for a later read, when the group is never
        that content itself (stored there, or read from there)."""
        p = self.positions
        group = self._group(root)
        own = False
        for op, v in events:
            if self._root(self.canon(v)) is root:
                own = True
                continue
            at = p.pos[op][:-1] + (p.pos[op][-1] + 0.5,)
            for m in group:
                if p.dominates(p.defpoint(m), at) and self._live_at(m, at):
                    return True
        if own:
            return False
        reads = [op for op, v in events if op.name != "store"]
        stores = [p.pos[op][:-1] + (p.pos[op][-1] + 0.5,) for op, _ in events if op.name == "store"]
        for m in group:
            d = p.defpoint(m)
            for r in reads:
                # a store after the definition and before the read on every path refreshes it
                fresh = any(p.dominates(d, s) and p.dominates(s, p.pos[r]) for s in stores)
                if not fresh and p.reaches(d, p.pos[r], ()):
                    return True
        return False

    def _group_span(self, root):
        spans = [self._span(m) for m in self._group(root)]
        return min(s for s, _ in spans), max(e for _, e in spans)

    def _groups_interfere(self, a, b) -> bool:
        return any(self.interferes(x, y) for x in self._group(a) for y in self._group(b))


def _is_const(v) -> bool:
    return isinstance(v, OpResult) and v.owner.name == "Const"


def _base(blob: str) -> str:
    """The name a blob is shown by: its last path part; a name Caffe2 made up from an op
    type in lower case (``GE_2`` -> ``ge_2``: never the op's own name), a constant's
    ``const``."""
    base = blob.rsplit("/", 1)[-1] or blob
    base = base.split("@", 1)[0] or base  # x@if3: the branch-local copy of x
    if base.endswith(":0"):
        base = base[:-2]
    if looks_made_up(base):
        base = _FILL.sub("const", base).lower()
    return base.replace(":", "_")


def _identifier(text: str | None) -> str:
    text = text or "v"
    out = "".join(c if (c.isalnum() or c in "_.") else "_" for c in text)
    out = "_" + out if out[0].isdigit() else out
    return _not_a_word(out)


def _not_a_word(name: str) -> str:
    """``and`` -> ``and_``: a name must not read as Python's own words."""
    return name + "_" if keyword.iskeyword(name) or name in _BUILTIN_NAMES else name


_BUILTIN_NAMES = frozenset({"range", "True", "False", "None"})  # the plan's own words


def _unique(name: str, taken: set) -> str:
    k, out = 1, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out
