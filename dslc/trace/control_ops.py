"""Caffe2's ``control_ops_util``: add an If or While op whose branches are nets.

A branch reads and writes the outer blobs named in ``lexical_scope``; its other blobs
are local to it (each branch runs in a Do op, Caffe2's child workspace; the lowering
renames them apart: dslc/lower/control.py).
"""
from __future__ import annotations

from dslc.trace.blobref import BlobReference
from dslc.ir.diagnostics import DSLError
from dslc.trace.net import Net
from dslc.trace.net_ssa import get_ssa, get_undefined_blobs
from dslc.trace.oprecord import DataType
from dslc.trace.tracing import user_location


class ControlOpError(DSLError, ValueError):
    """A branch net that reads a blob outside the If/While's lexical scope."""


def get_external_blob_names(net, lexical_scope, loc=None):
    """(the outer blobs ``net`` reads before writing, the outer blobs it writes); ``loc``:
    where an error is reported (default: the caller's line)."""
    scope = {str(b) for b in lexical_scope}
    ssa, _ = get_ssa(net)
    inputs = get_undefined_blobs(ssa)
    for name in inputs:
        if name not in scope:
            raise ControlOpError(f"blob {name!r} is read in net {net.Name()!r} but is not in the lexical scope "
                                 f"of its If/While", loc or user_location(), "add it to the external blobs")
    outputs = {b for op in net.Proto().op for b in op.output if b in scope}
    return inputs, outputs


_POINTERS = {"do_then_net": "workspace_if_then", "do_else_net": "workspace_if_else",
             "do_loop_body_net": "workspace_loop_body", "do_loop_condition_net": "workspace_loop_cond"}


def _do_net(name, parent, body, inputs, outputs, loc, **extra):
    """A net of one Do op (at ``loc``) running ``body`` with the outer blobs bound by name, and
    the workspace pointer blob it takes (made by a CreateScope in ``parent``; Caffe2's names)."""
    ins = [BlobReference(b) for b in sorted(inputs)]
    outs = [BlobReference(b) for b in sorted(outputs)]
    ordered = [str(b) for b in ins + outs]
    outer = sorted(set(inputs) | set(outputs))
    pointer = parent.NextScopedBlob(parent.Name() + "/" + _POINTERS[name])
    do = Net(name)
    do.Do(ins + [pointer], outs + [pointer], net=body.Proto(), inner_blobs=outer,
          outer_blobs_idx=[ordered.index(b) for b in outer], **extra)
    _locate(do, 0, loc)
    do.AddExternalOutput(*(outs + [pointer]))
    return do, pointer


def _locate(net, start: int, loc) -> None:
    """The ops ``net`` got since its ``start``-th are at ``loc``: the IfNet/WhileNet block
    a NetBuilder turned into them, not the line that asked the builder for its net."""
    for op in net._ops[start:]:
        op.loc = loc


def add_if_op(if_net, cond_blob, lexical_scope, then_net, else_net=None, loc=None):
    """``if_net.If``: ``then_net`` when ``cond_blob`` holds, else ``else_net``. ``loc`` (dslc's):
    the location of the ops it adds and of its errors (default: the caller's line)."""
    loc, start = loc or user_location(), len(if_net._ops)
    branches = [("do_then_net", then_net)] + ([("do_else_net", else_net)] if else_net else [])
    ins, outs, args, pointers = set(), set(), {}, []
    for name, net in branches:
        i, o = get_external_blob_names(net, lexical_scope, loc)
        do, pointer = _do_net(name, if_net, net, i, o, loc)
        ins |= i
        outs |= o
        pointers.append(pointer)
        args["then_net" if name == "do_then_net" else "else_net"] = do.Proto()
    for pointer in pointers:
        if_net.CreateScope([], [pointer])
    outputs = [BlobReference(b) for b in sorted(outs)] + pointers
    if_net.If([cond_blob] + [BlobReference(b) for b in sorted(ins)] + pointers, outputs, **args)
    _locate(if_net, start, loc)
    if_net.AddExternalOutput(*outputs)


def add_while_op(while_net, cond_blob, lexical_scope, loop_body_net, condition_body_net=None, loc=None):
    """``while_net.While``: ``loop_body_net`` while ``cond_blob`` holds; ``condition_body_net``
    (if given) computes ``cond_blob`` before the first iteration and after each.

    The condition net writes ``cond_blob`` in the net the While is in (an output of the
    While); a ``cond_blob`` new there is first made False, as Caffe2 does, so that the
    While's read of it is defined: in an enclosing If or While branch it is then that
    branch's own blob, not an outer one it may not read. ``loc`` as in ``add_if_op``."""
    loc, start = loc or user_location(), len(while_net._ops)
    ins, outs = get_external_blob_names(loop_body_net, lexical_scope, loc)
    ins |= outs  # (the loop may not run at all: what it writes must exist before)
    body, pointer = _do_net("do_loop_body_net", while_net, loop_body_net, ins, outs, loc, copy_external_blobs=1)
    args, pointers = {"loop_net": body.Proto()}, [pointer]
    if condition_body_net is not None:
        c_in, c_out = get_external_blob_names(condition_body_net, lexical_scope, loc)
        if not any(str(cond_blob) in op.output for op in condition_body_net.Proto().op):
            raise ControlOpError(f"the condition net does not write the condition blob {str(cond_blob)!r}",
                                 loc, "end the condition net with an op writing it")
        c_out |= {str(cond_blob)}
        cond, c_pointer = _do_net("do_loop_condition_net", while_net, condition_body_net, c_in,
                                  c_out, loc, copy_external_blobs=1)
        args["cond_net"] = cond.Proto()
        pointers.append(c_pointer)
        ins |= c_in
        outs |= c_out
        if str(cond_blob) not in {str(b) for b in lexical_scope}:
            while_net.ConstantFill([], [str(cond_blob)], dtype=DataType.BOOL, value=False)
    for p in pointers:
        while_net.CreateScope([], [p])
    outputs = [BlobReference(b) for b in sorted(outs)] + pointers
    while_net.While([cond_blob] + [BlobReference(b) for b in sorted(ins)] + pointers, outputs, **args)
    _locate(while_net, start, loc)
    while_net.AddExternalOutput(*outputs)
