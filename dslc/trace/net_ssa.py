"""Caffe2's SSA view of a net: every op's inputs and outputs as (blob, version) pairs,
a blob's version counting the ops that wrote it so far. Control-op helpers use it to
tell the blobs a net reads from outside (read at version 0) from those it makes."""
from __future__ import annotations


def _ops(net):
    if getattr(type(net), "_is_net", False):  # a recorded Net (net.py builds on this module)
        return net.Proto().op
    if hasattr(net, "op"):  # a NetDef
        return net.op
    return list(net)  # OperatorDefs


def get_ssa(net, blob_versions=None):
    """``([(inputs, outputs) per op], {blob: its last version})`` for a Net, NetDef or list
    of ops; ``blob_versions`` (updated) carries versions over from an earlier net."""
    versions = {} if blob_versions is None else blob_versions
    proto = net.Proto() if hasattr(net, "Proto") else net
    for b in getattr(proto, "external_input", ()):
        versions.setdefault(str(b), 0)
    ssa = []
    for op in _ops(net):
        inputs = [(str(b), versions.get(str(b), 0)) for b in op.input]
        for b in op.output:
            versions[str(b)] = versions.get(str(b), 0) + 1
        ssa.append((inputs, [(str(b), versions[str(b)]) for b in op.output]))
    return ssa, versions


def get_undefined_blobs(ssa) -> set:
    """The blobs some op reads before any op of the net wrote them."""
    return {b for inputs, _ in ssa for b, version in inputs if version == 0}


def get_output_producers(ssa) -> dict:
    """{(blob, version): the index of the op that wrote that version}."""
    return {out: i for i, (_, outputs) in enumerate(ssa) for out in outputs}
