"""``fuse-conv``: a convolution and its epilogue become one ``ConvFused`` op (ir/ops/conv_fused.py).

Inside one block, an NCHW ``Conv`` whose output only a test-mode ``SpatialBN`` reads takes
that normalization in (folded into a per-channel scale and shift); the value so far, when
only a two-input ``Sum`` (or ``Add``) of one shape reads it, takes the other operand in
as the residual; and when only a ``Relu`` reads it, the ReLU. Each step needs the value
to have that single use: a stored intermediate (a blob a later run or the user may read),
or one a gradient op reads, keeps its op. The fused op runs where the chain's last op
ran, so a residual computed between the Conv and the join is available; the chain's
ops are pure, so moving the convolution down past other ops changes no effect.

    %c = Conv(%x, %w, %b) {kernel = 3, pad = 1} : f32[1,4,5,5]
    %n = SpatialBN(%c, %s, %t, %m, %v) {is_test = 1} : f32[1,4,5,5]
    %u = Sum(%n, %x) : f32[1,4,5,5]                                       ->
    %y = Relu(%u) : f32[1,4,5,5]
        %y = ConvFused(%x, %w, %b, %s, %t, %m, %v, %x) {bias = 1, bn = 1, kernel = 3, pad = 1,
                                                        relu = 1, residual = 1} : f32[1,4,5,5]

Every backend runs the fused op as one kernel: the convolution's output is made once and
the rest is done to it in place (no intermediate arrays, one pass each).
"""
from __future__ import annotations

from ..builder import make_op, set_ops
from ..core import Module, Region
from ..ops.conv import CONV
from ..types import TensorType
from .manager import Pass, register


def _only_user(v, r: Region):
    """The op that is v's one use, in block r, or None."""
    if len(v.uses) != 1:
        return None
    (user, _), = v.uses
    return user if user.parent is r else None


def _same_array(a, b) -> bool:
    return (isinstance(a, TensorType) and a == b and a.shape is not None and None not in a.shape)


@register
class FuseConv(Pass):
    name = "fuse-conv"

    def run(self, module: Module) -> None:
        for op in module.walk():  # (a list made before any rewrite)
            for r in op.regions:
                if any(o.name == "Conv" for o in r.ops):
                    self.block(r)

    def block(self, r: Region) -> None:
        replace, taken = {}, set()
        for op in r.ops:
            if op.name != "Conv" or op.attrs.get("order", "NCHW") != "NCHW":
                continue
            chain, operands, attrs = self.chain(op, r, taken)
            if len(chain) < 2:
                continue
            fused = make_op("ConvFused", operands, attrs=attrs, loc=chain[-1].loc)
            fused.result.hint = chain[-1].result.hint
            chain[-1].result.replace_all_uses_with(fused.result)
            taken.update(chain)
            replace.update(dict.fromkeys(chain))
            replace[chain[-1]] = fused
        if replace:
            set_ops(r, [replace.get(o, o) for o in r.ops if replace.get(o, o) is not None])
            for o in replace:
                o.erase()

    def chain(self, conv, r: Region, taken):
        """(the ops fused, the fused op's operands, its attributes), from ``conv`` down;
        an op another chain took stays out."""
        attrs = {k: v for k, v in conv.attrs.items() if k in CONV}
        operands = list(conv.operands)
        attrs["bias"] = int(len(operands) == 3)
        chain, v = [conv], conv.result

        def next_user(v):
            user = _only_user(v, r)
            return None if user in taken else user

        user = next_user(v)
        if user is not None and user.name == "SpatialBN" and user.attrs.get("is_test") and len(user.operands) == 5 \
                and user.operands[0] is v and user.attrs.get("order", "NCHW") == "NCHW":
            operands += user.operands[1:]
            attrs.update(bn=1, epsilon=user.attrs.get("epsilon", 1e-5))
            chain.append(user)
            v = user.result
            user = next_user(v)
        if user is not None and user.name in ("Sum", "Add") and len(user.operands) == 2 and not user.attrs.get(
                "broadcast") and all(_same_array(o.type, v.type) for o in user.operands) \
                and _same_array(user.result.type, v.type) and user.operands[0] is not user.operands[1]:
            operands.append(user.operands[1] if user.operands[0] is v else user.operands[0])
            attrs["residual"] = 1
            chain.append(user)
            v = user.result
            user = next_user(v)
        if user is not None and user.name == "Relu" and user.operands[0] is v:
            attrs["relu"] = 1
            chain.append(user)
        return chain, operands, attrs
