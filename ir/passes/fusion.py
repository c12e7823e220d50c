"""``fuse-elementwise``: group elementwise ops into ``fused`` kernels.

A group is a maximal set of elementwise ops of one block, over one iteration space
(every member's result has the group's array shape; operands have it too or are
scalars; no dim unknown), connected by def-use edges. Values used outside the group become its
results; everything else is internal. Backends compile a group as one kernel (the
interpreter simply runs it inline). The kernel runs where the group's last member was:
a member that may fail (integer Div) is not moved past an op with effects, or one that
may fail too (its error would come at another time). Groups are capped in size: a huge kernel body
costs more to compile than it saves.

    %t = Mul(%a, %b) : f32[8]             %y = fused(%a, %b, %c) : f32[8] {
    %u = Add(%t, %c) : f32[8]      ->     ^(%x0: f32[8], %x1: f32[8], %x2: f32[8]):
    %y = Relu(%u) : f32[8]                  %t = Mul(%x0, %x1) : f32[8]
                                            %u = Add(%t, %x2) : f32[8]
                                            %r = Relu(%u) : f32[8]
                                            yield(%r)
                                          }
"""
from __future__ import annotations

from ..builder import make_op, set_ops
from ..core import Module, OpResult, Region
from ..opdef import ELEMENTWISE, PURE
from ..types import TensorType
from .manager import Pass, register

MAX_GROUP = 32


def _array_shape(op):
    """The op's iteration space if it can join a group, else None."""
    traits = op.opdef.traits
    if ELEMENTWISE not in traits or PURE not in traits or op.regions or len(op.results) != 1:
        return None
    t = op.result.type
    # (an unknown dim: two operands typed f32[?] may differ at run time, and a fused kernel
    # reads every operand at the output's flat index, with no broadcasting check)
    if not isinstance(t, TensorType) or t.dtype is None or not t.shape or None in t.shape:
        return None
    for v in op.operands:
        vt = v.type
        if not isinstance(vt, TensorType) or vt.dtype is None or vt.shape not in ((), t.shape):
            return None
    return t.shape


@register
class FuseElementwise(Pass):
    name = "fuse-elementwise"

    def run(self, module: Module) -> None:
        for op in module.walk():  # a list made before any rewrite
            if op.regions and op.name != "fused":
                for r in op.regions:
                    self.block(r)

    def block(self, r: Region) -> None:
        """Union producer and consumer when both fit one iteration space (capped in size)."""
        root, size, shape = {}, {}, {}

        def find(op):
            while root[op] is not op:
                root[op] = root[root[op]]
                op = root[op]
            return op

        for op in r.ops:
            s = _array_shape(op)
            if s is None:
                continue
            root[op], size[op], shape[op] = op, 1, s
            for v in op.operands:
                producer = getattr(v, "owner", None)
                if producer not in root:
                    continue
                a, b = find(producer), find(op)
                if a is not b and shape[a] == s and size[a] + size[b] <= MAX_GROUP:
                    root[b] = a
                    size[a] += size[b]
        if len(root) < 2:
            return  # no group to form (most blocks)
        members: dict = {}
        for op in r.ops:
            if op in root:
                members.setdefault(find(op), []).append(op)
        groups = [g for g in members.values() if len(g) >= 2]
        if groups:
            self.rewrite(r, groups)

    def rewrite(self, r: Region, groups) -> None:
        position = {op: i for i, op in enumerate(r.ops)}
        replace = {}
        for members in groups:
            fused = self.fuse(r, members, position)
            if fused is not None:
                replace[members[-1]] = fused
                for m in members[:-1]:
                    replace[m] = None
        if replace:
            set_ops(r, [replace.get(op, op) for op in r.ops if replace.get(op, op) is not None])

    def fuse(self, r: Region, members, position):
        inside = set(members)
        last = position[members[-1]]
        if _moves_error(r, members, inside, position, last):
            return None
        inputs, outputs = [], []
        for m in members:
            for v in m.operands:
                if getattr(v, "owner", None) not in inside and v not in inputs:
                    inputs.append(v)
            for res in m.results:
                users = [u for u, _ in res.uses if _top(u, r) not in inside]
                if users:
                    if any(position.get(_top(u, r), last + 1) <= last for u in users):
                        return None  # used before the group ends: not convex, leave it
                    outputs.append(res)
        if not outputs:  # nothing uses the group (kept as it may fail): it still makes a value
            outputs.append(members[-1].result)
        region = Region([v.type for v in inputs], [v.hint for v in inputs])
        fused = make_op("fused", inputs, result_types=[v.type for v in outputs], regions=[region],
                        loc=members[-1].loc)
        for res, new in zip(outputs, fused.results):
            new.hint = res.hint
            for user, i in list(res.uses):
                if _top(user, r) not in inside:
                    user.set_operand(i, new)
        args = dict(zip(inputs, region.args))
        for m in members:
            for i, v in enumerate(m.operands):
                if v in args:
                    m.set_operand(i, args[v])
            region.append(m)
        region.append(make_op("yield", outputs, loc=members[-1].loc))
        return fused


def _moves_error(r: Region, members, inside, position, last) -> bool:
    """Whether fusing would move a member that may fail past an op that is not pure, or
    may fail too (the kernel runs at ``last``)."""
    for m in members:
        if m.opdef.fails(m):
            for o in r.ops[position[m] + 1:last]:
                if o not in inside and (not o.opdef.is_pure or o.opdef.fails(o)):
                    return True
    return False


def _top(op, r: Region):
    """The op of region ``r`` that is or contains ``op``."""
    while op is not None and op.parent is not r:
        op = op.parent.parent if op.parent is not None else None
    return op


__all__ = ["FuseElementwise", "OpResult"]
