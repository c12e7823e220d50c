"""Caffe2's control-flow operators, which hold nets in their arguments: If, While, Do, and
the workspace-scope ops their helpers add (``control_ops_util``, ``brew.cond`` / ``loop``,
``NetBuilder(_use_control_ops=True)``).

They never reach the IR: the lowering (dslc/lower/control.py) expands them into the
structured ops the rest of dslc already has:

    If(cond, ...) {then_net, else_net}   -> if(%cond) { then_net's ops } else { else_net's ops }
    While(cond, ...) {loop_net, cond_net} -> loop { cond_net's ops; break_if(not cond); loop_net's ops }
    Do(...) {net, inner_blobs, outer_blobs_idx} -> net's ops, its other blobs local to each run

Caffe2 runs a Do's net in a child workspace, so the blobs it does not map to outer ones
start afresh each time; the lowering renames those apart. The workspace pointer blobs
(CreateScope's) have nothing to point at here: they hold an empty placeholder.
"""
from __future__ import annotations

from ..gradients import no_gradient
from ..opdef import declare
from .infer import lowered_away

_WHERE = "dslc/lower/control.py"

declare("If", (1, None), lowered_away("If", _WHERE), results=(0, None),
        attrs={"then_net": None, "else_net": None},
        doc="runs then_net if the first input (a bool scalar) holds, else else_net (expanded into an if)")
declare("While", (1, None), lowered_away("While", _WHERE), results=(0, None),
        attrs={"loop_net": None, "cond_net": None},
        doc="runs cond_net (if given), then loop_net while the first input holds (expanded into a loop)")
declare("Do", (0, None), lowered_away("Do", _WHERE), results=(0, None),
        attrs={"net": None, "inner_blobs": [], "outer_blobs_idx": [], "saved_fwd_blobs": [],
               "reuse_workspace": 0, "copy_external_blobs": 0},
        doc="runs net with inner_blobs bound to the op's blobs at outer_blobs_idx (inputs, then "
            "outputs, without the last: the workspace pointer), its other blobs local")
declare("CreateScope", 0, lowered_away("CreateScope", _WHERE), results=1,
        doc="a workspace pointer for Do (a placeholder: dslc's Do keeps no workspace)")
declare("HasScope", 1, lowered_away("HasScope", _WHERE),
        doc="whether a workspace pointer holds a scope (always false: dslc's Do keeps none)")
no_gradient("CreateScope")
no_gradient("HasScope")
