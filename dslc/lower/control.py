"""Lowering Caffe2's control-flow operators (If, While, Do; ir/ops/control_nets.py) into
dslc's structured ``if`` and ``loop``: their nets' ops become the regions' ops.

    If(c) {then_net = [A], else_net = [B]}  -> if(%c) { A } else { B }
    While(c) {cond_net = [C], loop_net = [L]} -> loop { C; break_if(not %c); L }
    Do {net = [X], inner_blobs = [a], outer_blobs_idx = [0]} (inputs: [p, ws])
                                            -> X with a read and written as p, its other blobs
                                               renamed apart (name@doK) and never stored
"""
from __future__ import annotations

import numpy as np

from dslc.ir import Region
from dslc.ir.diagnostics import VerifyError
from dslc.oprecord import OpRecord

from .blocks import Block
from .netargs import net_records

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

    def name(b: str) -> str:
        if b in bound:
            return bound[b]
        local = f"{b}@{tag}"
        blk.ctx.ephemeral.add(local)
        return local

    for r in net_records(rec.args.get("net"), rec, "net"):
        lower_op(blk, OpRecord(r.type, tuple(map(name, r.inputs)), tuple(map(name, r.outputs)), r.args, r.loc,
                               r.extra))
