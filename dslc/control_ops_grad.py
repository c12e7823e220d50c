"""Caffe2's ``control_ops_grad``: editing the gradient ops of control-flow ops.

``disambiguate_grad_if_op_output`` renames one output of an If gradient op, in the op and
in the branch nets that write it (the reverse pass renames a gradient that several
readers' gradients add up to). dslc itself does not yet make gradients through If or
Do: a loss that depends on an If's output is a located "has no gradient" error.
"""
from __future__ import annotations


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
