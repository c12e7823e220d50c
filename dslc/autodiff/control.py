"""Gradients through control-flow ops (Caffe2's ``control_ops_grad``, which re-exports this).

The gradient of an If is an If on the same condition whose branches are the gradients of
the forward branches: each recomputes its branch's forward values (in a Do, so they stay
its own), runs their gradient ops seeded with the If's output gradients, and writes the
gradients of the If's inputs (zeros where its branch does not reach an input):

    If(c, x) -> y {then: y = 2x, else: y = 3x}
      => If(c, x, y_grad) -> x_grad {then: Do{y' = 2x; x_grad = 2 y_grad},
                                     else: Do{y' = 3x; x_grad = 3 y_grad}}

The maker differentiates nets, which only the front end can do (dslc/autodiff/gradients.py), so it
lives here and joins the one gradient table (``ir.gradients.GRADIENTS``) on import;
the autodiff package's ``__init__`` imports this module. While has no gradient, as in Caffe2.
"""
from __future__ import annotations

from dslc.autodiff.gradients import add_gradient_ops
from dslc.ir.gradients import GRADIENTS, GradOp
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.net import Net
from dslc.trace.net_record import CreateOperator
from dslc.trace.netargs import net_message
from dslc.trace.oprecord import OpRecord


def disambiguate_grad_if_op_output(grad_op, idx, new_grad_output):
    """Rename output ``idx`` of the If OperatorDef ``grad_op`` to ``new_grad_output``, and the
    same blob where an op of its then/else nets writes it."""
    old = grad_op.output[idx]
    grad_op.output[idx] = new_grad_output
    for arg in grad_op.arg:
        if arg.name in ("then_net", "else_net") and arg.HasField("n"):
            for op in arg.n.op:
                for k, out in enumerate(op.output):
                    if out == old:
                        op.output[k] = new_grad_output


def _branch_ops(value) -> list:
    """A branch's ops as OperatorDefs over the If's blob names: a Do wrapping the branch
    (control_ops_util's form) is opened, its inner names mapped to the outer ones."""
    if value is None:
        return []
    msg = net_message(value, OpRecord("If", (), (), {}, None), "then_net")
    ops = list(msg.op)
    if len(ops) == 1 and ops[0].type == "Do":
        do = ops[0]
        args = {a.name: a for a in do.arg}
        outer = list(do.input[:-1]) + list(do.output[:-1])
        inner = list(args["inner_blobs"].strings) if "inner_blobs" in args else []
        idx = list(args["outer_blobs_idx"].ints) if "outer_blobs_idx" in args else []
        bound = {i.decode() if isinstance(i, bytes) else i: outer[k] for i, k in zip(inner, idx)}
        body = net_message(args["net"].n, OpRecord("Do", (), (), {}, None), "net")
        out = []
        for op in body.op:
            copy = caffe2_pb2.OperatorDef()
            copy.CopyFrom(op)
            copy.input[:] = [bound.get(b, b) for b in op.input]
            copy.output[:] = [bound.get(b, b) for b in op.output]
            out.append(copy)
        return out
    return ops


def _gradient_branch(ops, seeds: dict, wanted: dict, pointer: str):
    """A Do computing ``wanted`` ({input: its gradient's name}) from ``seeds`` ({output: its
    gradient's name}) through ``ops``, their forward values recomputed inside."""
    forward = caffe2_pb2.NetDef(name="if_branch_forward")
    forward.op.extend(ops)
    net = Net(forward)
    made = {b for op in ops for b in op.output}
    grads = add_gradient_ops(net, {y: g for y, g in seeds.items() if y in made}, strict=False) if seeds else {}
    for x, gi in wanted.items():
        g = grads.get(x)
        if g is None:  # (this branch does not reach x: its gradient here is zero)
            net.ConstantFill([x], [gi], value=0.0)
        elif str(g) != gi:
            net.Copy([str(g)], [gi])
    body = net.Proto()
    ins = list(wanted) + list(seeds.values())
    outs = list(wanted.values())
    bound = ins + outs
    do = caffe2_pb2.NetDef(name="do_grad_net")
    do.op.add().CopyFrom(_do_op(ins + [pointer], outs + [pointer], body, bound))
    return do


def _do_op(inputs, outputs, body, bound):
    ordered = [b for b in inputs[:-1]] + [b for b in outputs[:-1]]
    return CreateOperator("Do", inputs, outputs, net=body, inner_blobs=bound,
                               outer_blobs_idx=[ordered.index(b) for b in bound])


def _pointer(name: str) -> bool:
    """A workspace pointer blob control_ops_util adds to an If's inputs and outputs."""
    return "/workspace_if_" in name or name.startswith("workspace_if_")


def _if_gradient(g):
    seeds = {o: go for o, go in zip(g.O, g.GO) if go is not None and not _pointer(o)}
    cond = g.I[0]
    wanted = {x: gi for x, gi in zip(g.I[1:], g.GI[1:]) if not _pointer(x)}
    if not seeds or not wanted:
        return []
    pointer = f"{next(iter(wanted.values()))}_if_grad_workspace"
    args = {"then_net": _gradient_branch(_branch_ops(g.args.get("then_net")), seeds, wanted, pointer),
            "else_net": _gradient_branch(_branch_ops(g.args.get("else_net")), seeds, wanted, pointer)}
    return [GradOp("If", [cond] + list(wanted) + list(seeds.values()), list(wanted.values()), args)]


GRADIENTS.setdefault("If", _if_gradient)
