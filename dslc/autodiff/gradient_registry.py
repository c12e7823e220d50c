"""Caffe2's gradient API (``core.GradientRegistry``, ``core.GradientSlice``) over dslc's own
gradient declarations.

There is one gradient table: ``dslc.ir.gradients.GRADIENTS``, where each op module
declares its op's gradient beside the op. ``GetGradientForOp`` asks that table for
one operator; ``GetBackwardPass`` runs the same reverse pass ``AddGradientOperators``
runs (dslc/autodiff/gradients.py) over a list of operators. ``RegisterGradient`` adds a Python
gradient maker to the same table, for an op that has none declared (as in Caffe2,
where a Python maker is used only when the op has no C++ gradient), so
``AddGradientOperators`` uses it too.

Operators come and go as ``caffe2_pb2.OperatorDef`` messages.
"""
from __future__ import annotations

from dslc.trace import netdef
from dslc.autodiff.gradients import add_gradient_ops, check_own_overwrite
from dslc.trace.blobref import BlobReference, GradientSlice
from dslc.trace.net import Net
from dslc.trace.net_record import CreateOperator
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.ir.diagnostics import DSLError
from dslc.ir.gradients import (GRADIENTS, IS_AUTO_GEN_SUM_OPS_TAG, NO_GRADIENT, ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG,
                                GradContext, GradOp, SparseGrad)
from dslc.ir.opdef import OPS
from dslc.trace.tracing import user_location



class GradientRegistry:
    """Where an operator's gradient comes from (Caffe2's ``core.GradientRegistry``)."""

    gradient_registry_: dict = {}  # op type -> the Python maker registered for it

    @classmethod
    def RegisterGradient(cls, op_type: str):
        """Decorate ``maker(op, g_output) -> (gradient ops, g_input)`` as ``op_type``'s gradient."""
        def register(maker):
            cls.gradient_registry_[op_type] = maker
            if op_type not in GRADIENTS or getattr(GRADIENTS[op_type], "python_maker", False):
                GRADIENTS[op_type] = _declared(op_type, maker)
            return maker
        return register

    @classmethod
    def GetGradientForOp(cls, op, g_output):
        """``(gradient ops, g_input)`` of one OperatorDef, given its outputs' gradient names
        (None for an output without one); ``g_input[i]``: the gradient of ``op.input[i]``
        (``<input>_grad``), or None."""
        loc = user_location()
        kind = OPS.canonical(op.type)
        maker = GRADIENTS.get(kind)
        if kind in NO_GRADIENT:
            return [], [None] * len(op.input)
        if maker is None:
            raise DSLError(f"{op.type} has no gradient", loc,
                           "register one with @core.GradientRegistry.RegisterGradient(op_type)")
        record = netdef.op_record(op, loc)
        names = [f"{b}_grad" for b in op.input]
        g_output = [None if g is None else str(g) for g in g_output]
        python = cls.gradient_registry_.get(op.type)
        if python is not None and getattr(maker, "python_maker", False):
            grad_ops, g_input = python(op, g_output)  # (the user's ops, as the user made them)
            return _as_list(grad_ops), list(g_input)
        ctx = GradContext(list(op.input), list(op.output), g_output, names, dict(record.args))
        check_own_overwrite(op.type, maker, ctx, loc)  # (as Caffe2 refuses Softsign's in place)
        made = maker(ctx)
        sparse = {g.input: GradientSlice(g.indices, g.values) for g in made if isinstance(g, SparseGrad)}
        made = [g for g in made if not isinstance(g, SparseGrad)]
        written = {b for g in made for b in g.outputs}
        # (as in Caffe2, a gradient op runs where its forward op runs)
        extra = dict(is_gradient_op=True, **({"device_option": op.device_option}
                                             if op.HasField("device_option") else {}))
        ops = []
        for g in made:
            msg = netdef.op_message(netdef.OpRecord(g.type, tuple(g.inputs), tuple(g.outputs), dict(g.args),
                                                    loc, extra))
            msg.name = ""  # (Caffe2's gradient ops carry an empty name)
            ops.append(msg)
        return ops, [sparse.get(k, n if n in written else None) for k, n in enumerate(names)]

    @classmethod
    def GetBackwardPass(cls, operators, ys, ys_generate_gradient=False):
        """``(gradient ops, {blob: its gradient})`` for the forward ``operators`` and the
        losses ``ys`` (a list: gradients filled with 1; a dict: given gradient blobs, None
        for 1), as ``net.AddGradientOperators`` records them."""
        msg = caffe2_pb2.NetDef(name="backward")
        msg.op.extend(operators)
        net = Net(msg)
        count = len(net.ops())
        grad_map = add_gradient_ops(net, ys, user_location(), strict=False)
        ops = [netdef.op_message(rec) for rec in net.ops()[count:]]

        def ref(g):
            if isinstance(g, GradientSlice):
                return GradientSlice(BlobReference(g.indices), BlobReference(g.values))
            return BlobReference(g)
        return ops, {k: ref(v) for k, v in grad_map.items()}


def _as_list(grad_ops) -> list:
    """A maker may return one OperatorDef or a list of them."""
    return [grad_ops] if isinstance(grad_ops, caffe2_pb2.OperatorDef) else list(grad_ops or ())


def _declared(op_type: str, maker):
    """The table entry for a Python maker: it sees the forward op as an OperatorDef and
    Caffe2's gradient names; its gradients are renamed to the names the reverse pass asks for."""
    def make(g: GradContext) -> list:
        op = CreateOperator(op_type, list(g.I), list(g.O), **g.args)
        grad_ops, g_input = maker(op, list(g.GO))
        grad_ops = _as_list(grad_ops)
        rename, sparse = {}, []
        for k, (given, wanted) in enumerate(zip(g_input or (), g.GI)):
            if isinstance(given, GradientSlice):
                sparse.append(SparseGrad(k, str(given.indices), str(given.values)))
            elif given is not None:
                rename[str(given)] = wanted
        out = []
        for o in grad_ops:
            rec = netdef.op_record(o, None)
            out.append(GradOp(rec.type, [rename.get(b, b) for b in rec.inputs],
                              [rename.get(b, b) for b in rec.outputs], dict(rec.args)))
        return out + sparse
    make.python_maker = True
    return make




class IR:
    """Caffe2's ``core.IR``: a list of forward operators to derive a backward pass from."""

    IS_AUTO_GEN_SUM_OPS_TAG = IS_AUTO_GEN_SUM_OPS_TAG
    ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG = ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG

    def __init__(self, operators):
        self.ops = list(operators)

    def GetBackwardPass(self, ys):
        return GradientRegistry.GetBackwardPass(self.ops, ys)


__all__ = ["GradientRegistry", "GradientSlice", "IR"]
