"""Lowering Caffe2's control-flow operators (If, While, Do; ir/ops/control_nets.py) into
dslc's structured ``if`` and ``loop``: their nets' ops become the regions' ops.

    If(c) {then_net = [A], else_net = [B]}  -> if(%c) { A } else { B }
    While(c) {cond_net = [C], loop_net = [L]} -> loop { C; break_if(not %c); L }
    Do {net = [X], inner_blobs = [a], outer_blobs_idx = [0]} (inputs: [p, ws])
                                            -> X with a read and written as p, its other blobs
                                               renamed apart (name@doK) and never stored

An If's or While's nets run in the workspace of the If or While itself (each holds a Do
that makes the child workspace), so inside a Do their ops are renamed as the Do's own
are: a While whose condition blob is local to an enclosing branch reads that local.
A Do's locals are SSA values only, except those a nested If writes or a nested While
reads or writes: what a region writes reaches the ops after it, and a loop's body sees
what was written before it (or by its last iteration), through the workspace only.
"""
from __future__ import annotations

import numpy as np

from dslc.ir import Region
from dslc.ir.diagnostics import VerifyError
from dslc.trace.oprecord import OpRecord

from .blocks import Block
from dslc.trace.netargs import net_records

CONTROL_OPS = frozenset({"If", "While", "Do", "CreateScope", "HasScope"})


def lower_control(blk: Block, rec: OpRecord, lower_op) -> None:
    loc = rec.loc
    if rec.type == "If":
        from .steps import _if
        op, then, other = _if(blk, blk.read(rec.inputs[0], loc), loc)
        for region, arg in ((then, "then_net"), (other, "else_net")):
            if rec.args.get(arg) is not None:
                for r in net_records(rec.args[arg], rec, arg):
                    lower_op(region, r)
            region.flush()
        blk.forget(op)
    elif rec.type == "While":
        if rec.args.get("loop_net") is None:
            raise VerifyError("While needs loop_net", loc, "pass loop_net=<net>.Proto()")
        blk.flush()
        op = blk.create("loop", [], loc=loc, result_types=[], regions=[Region()])
        body = blk.child(op.regions[0], inherit=False)
        if rec.args.get("cond_net") is not None:
            for r in net_records(rec.args["cond_net"], rec, "cond_net"):
                lower_op(body, r)
        cond = body.read(rec.inputs[0], loc)
        body.flush()
        body.create("break_if", [body.b.value("Not", [cond], loc=loc)], loc=loc)
        for r in net_records(rec.args["loop_net"], rec, "loop_net"):
            lower_op(body, r)
        body.flush()
        body.create("yield", [], loc=loc)
        blk.forget(op)
    elif rec.type == "Do":
        _do(blk, rec, lower_op)
    elif rec.type == "CreateScope":  # (a workspace pointer: dslc's Do needs none)
        blk.write(rec.outputs[0], blk.const(np.zeros(0, np.int64), loc), loc)
    else:  # HasScope
        blk.write(rec.outputs[0], blk.const(np.bool_(False), loc), loc)


def _do(blk: Block, rec: OpRecord, lower_op) -> None:
    """The net's ops, its inner blobs bound to the op's, its other blobs fresh each run."""
    inner = [str(b) for b in rec.args.get("inner_blobs", ())]
    idx = [int(k) for k in rec.args.get("outer_blobs_idx", ())]
    if len(inner) != len(idx):
        raise VerifyError(f"Do has {len(inner)} inner_blobs but {len(idx)} outer_blobs_idx", rec.loc,
                          "give the index of the op's blob each inner blob stands for")
    # the op's blobs: its inputs then its outputs, each list without its last (the workspace pointer)
    outer = list(rec.inputs[:-1]) + list(rec.outputs[:-1])
    if any(not 0 <= k < len(outer) for k in idx):
        raise VerifyError(f"Do: outer_blobs_idx {idx} points past the op's {len(outer)} blobs", rec.loc,
                          "index the op's inputs, then outputs, without the workspace blob")
    bound = {i: outer[k] for i, k in zip(inner, idx)}
    tag = blk.ctx.fresh_tag("do")
    records = net_records(rec.args.get("net"), rec, "net")
    stored = _reached_in_regions(records)

    def name(b: str) -> str:
        if b in bound:
            return bound[b]
        local = f"{b}@{tag}"
        blk.ctx.branch_locals.setdefault(b, rec.loc)  # (a read of b after the block: say why it fails)
        if b not in stored:
            blk.ctx.ephemeral.add(local)
        return local

    def lower_inner(b: Block, r: OpRecord) -> None:
        r = OpRecord(r.type, tuple(map(name, r.inputs)), tuple(map(name, r.outputs)), r.args, r.loc, r.extra)
        if r.type in ("If", "While"):  # (their nets are in this Do's namespace too)
            lower_control(b, r, lower_inner)
        else:
            lower_op(b, r)

    for r in records:
        lower_inner(blk, r)


_NETS = ("then_net", "else_net", "cond_net", "loop_net")


def _reached_in_regions(records, in_if: bool = False, in_loop: bool = False) -> set:
    """The blob names of a Do's namespace that an If in ``records`` writes or a While
    reads or writes (with the If and While nets they hold: the same namespace)."""
    names = set()
    for r in records:
        if in_loop or r.type == "While":
            names.update(r.inputs, r.outputs)
        elif in_if or r.type == "If":
            names.update(r.outputs)
        if r.type in ("If", "While"):
            for arg in _NETS:
                if r.args.get(arg) is not None:
                    names |= _reached_in_regions(net_records(r.args[arg], r, arg), in_if or r.type == "If",
                                                 in_loop or r.type == "While")
    return names
