"""Caffe2's ``memonger``: fewer blobs for a net, by giving blobs whose lives do not overlap
one name.

A blob lives from the first op that writes it to the last op that reads or writes it
(its *range*, in op order). Two blobs whose ranges do not overlap can share a name: the
second is written only after the last read of the first. ``share_grad_blobs`` shares
the gradients passed between layers of a training net (and, if asked, activations);
``optimize_inference_for_dag`` the activations of a forward-only net. Both return a
new NetDef whose ops compute exactly what the original's do (checked by
``verify_graph_equality`` and ``verify_inplace_blobs`` before returning), and in dslc
the saving is real: fewer blobs stay in the workspace after a run.

    before:  fc2_grad = FCGradient(...); fc1_grad = FCGradient(fc2_grad ...); ...
    after:   __m0_shared = FCGradient(...); __m1_shared = FCGradient(__m0_shared ...); ...

Blobs never shared: external inputs and outputs, the losses or inputs named, blobs
read before any op writes them, and ``dont_share_blobs``.
"""
from __future__ import annotations

import collections
import copy
import enum
import logging

import networkx as nx
import numpy as np

from dslc.proto import caffe2_pb2
from dslc import workspace

log = logging.getLogger("memonger")

LiveRange = collections.namedtuple("LiveRange", ["defined", "used", "size"])


class AssignmentAlgorithm(enum.Enum):
    GREEDY = 0
    DYNAMIC_PROGRAMMING = 1


# ----------------------------------------------------------------------------- ranges and assignments

def compute_ranges(linearized_ops, blob_sizes=None) -> dict:
    """{blob: LiveRange(first op writing it, last op reading it, its size or None)}."""
    ranges: dict = collections.defaultdict(lambda: LiveRange(None, None, None))
    for i, op in enumerate(linearized_ops):
        for b in op.input:
            r = ranges[b]
            ranges[b] = r._replace(used=i if r.used is None else max(r.used, i),
                                   size=blob_sizes.get(b) if blob_sizes else None)
        for b in op.output:
            r = ranges[b]
            ranges[b] = r._replace(defined=i if r.defined is None else min(r.defined, i),
                                   size=blob_sizes.get(b) if blob_sizes else None)
    return ranges


def is_compatible(candidate_range, assignment, static_blobs) -> bool:
    """Whether a blob of ``candidate_range`` can take the name of ``assignment`` (a list of
    (name, range) sharing one name): it is written after the last of them is read."""
    name, last = assignment[-1]
    if name in static_blobs or None in (candidate_range.defined, last.defined, last.used):
        return False
    return candidate_range.defined > last.used


def _size(assignment) -> int:
    return max([r.size or 0 for _, r in assignment], default=0)


def get_memory_usage(assignments) -> int:
    """The memory the assignments need: per shared name, its largest blob."""
    return sum(_size(a) for a in assignments)


def compute_assignments_greedy(ranges_sorted, init_assignments=None) -> list:
    """Blobs in order of definition, each joined to the compatible assignment closest to
    its size (a new one when none is compatible)."""
    assignments = init_assignments or []
    seen = {name for a in assignments for name, _ in a}
    for name, r in ranges_sorted:
        if name in seen:
            continue
        fits = [k for k, a in enumerate(assignments) if is_compatible(r, a, ())]
        if fits:
            best = min(fits, key=lambda k: abs(_size(assignments[k]) - (r.size or 0)))
            assignments[best].append((name, r))
        else:
            assignments.append([(name, r)])
    return assignments


def compute_assignments_dp(ranges_sorted, init_assignment, counter=None) -> list:
    """An assignment of least memory: tries every compatible placement of every blob
    (exponential; for the few blobs tests and small nets have), the greedy one first."""
    best = [compute_assignments_greedy(copy.deepcopy(ranges_sorted), copy.deepcopy(init_assignment))]

    def place(k, assignments):
        if k == len(ranges_sorted):
            if get_memory_usage(assignments) < get_memory_usage(best[0]):
                best[0] = copy.deepcopy(assignments)
            return
        name, r = ranges_sorted[k]
        if get_memory_usage(assignments) >= get_memory_usage(best[0]):
            return
        for a in assignments:
            if is_compatible(r, a, ()):
                a.append((name, r))
                place(k + 1, assignments)
                a.pop()
        assignments.append([(name, r)])
        place(k + 1, assignments)
        assignments.pop()

    if len(ranges_sorted) <= 12:
        place(0, copy.deepcopy(init_assignment or []))
    return best[0]


def compute_blob_assignments(assignments) -> dict:
    """{blob: the name it takes}: every blob of an assignment of two or more takes its last one's."""
    out = {}
    for a in assignments:
        if len(a) > 1:
            last = a[-1][0]
            out.update((name, last) for name, _ in a)
    return out


def compute_assignments(ranges, static_blobs, algo) -> list:
    """Assignments of the blobs of ``ranges`` (a dict) not in ``static_blobs``."""
    ranges = sorted(((b, r) for b, r in ranges.items() if b not in static_blobs and r.defined is not None
                     and r.used is not None), key=lambda x: (x[1].defined, x[1].used))
    if algo == AssignmentAlgorithm.DYNAMIC_PROGRAMMING:
        return compute_assignments_dp(ranges, [])
    return compute_assignments_greedy(ranges, None)


def verify_assignments(assignments) -> None:
    for a in assignments:
        for (_, earlier), (_, later) in zip(a, a[1:]):
            assert earlier.used < later.defined, f"overlapping ranges share a name: {a}"


def apply_assignments(net, blob_assignments) -> None:
    """Rename the blobs of every op of the NetDef ``net`` in place."""
    for op in net.op:
        for field in (op.input, op.output):
            for k, b in enumerate(field):
                if b in blob_assignments:
                    field[k] = blob_assignments[b]


def compute_interference_graph(ops) -> nx.DiGraph:
    """Op indices, with an edge from each op to every later op reading what it wrote."""
    g = nx.DiGraph()
    writers: dict = collections.defaultdict(list)
    for j, op in enumerate(ops):
        g.add_node(j)
        for b in op.input:
            for i in writers[b]:
                g.add_edge(i, j)
        for b in op.output:
            writers[b].append(j)
    return g


def topological_sort_traversal(g) -> list:
    """The ops of an interference graph in an order that respects its edges."""
    return list(nx.topological_sort(g))


def topological_sort_traversal_longest_path(g) -> list:
    """A topological order starting the longest chains first: sources by the length of
    their longest path to a sink, then each source's descendants, so values live shorter."""
    depth: dict = {}
    for n in reversed(list(nx.topological_sort(g))):
        depth[n] = 1 + max((depth[s] for s in g.successors(n)), default=0)
    rank: dict = {}
    for src in sorted((n for n in g if g.in_degree(n) == 0), key=lambda n: (-depth[n], n)):
        for n in [src] + sorted(nx.descendants(g, src)):
            rank.setdefault(n, len(rank))
    return list(nx.lexicographical_topological_sort(g, key=lambda n: rank[n]))


def release_blobs_when_used(netproto, dont_free_blobs, selector_fun=None):
    """A copy of ``netproto`` with a ``Free`` op after the last read of each blob the net
    makes and reads, but for its external outputs, ``dont_free_blobs``, blobs an Alias reads,
    and those ``selector_fun`` refuses. (dslc frees a value once nothing reads it anyway;
    the Free ops make that visible in the net, as Caffe2's memory managers need it.)"""
    netproto = copy.deepcopy(netproto)
    read, made, aliased = set(), set(), set()
    for op in netproto.op:
        if op.type == "Alias":
            aliased.add(op.input[0])
            continue
        read.update(op.input)
        made.update(o for o in op.output if o not in read and (selector_fun is None or selector_fun(o)))
    free = (made & read) - set(netproto.external_output) - set(dont_free_blobs) - aliased
    ops = list(netproto.op)
    out = []
    for op in reversed(ops):  # (walking back: the first read met is the last one)
        after = [b for b in op.input if b in free]
        for b in after:
            free.discard(b)
        out.extend(caffe2_pb2.OperatorDef(type="Free", input=[b], output=[b]) for b in reversed(after))
        out.append(op)
    del netproto.op[:]
    netproto.op.extend(reversed(out))
    return netproto


# ----------------------------------------------------------------------------- the optimizers

# Caffe2's operator schemas that require an output to be the same blob as an input (its
# EnforceInplace), read off the real Caffe2 (OpSchema.get(name).inplace_enforced(i, o) over every
# registered operator): (input, output) pairs, or every input i as output i (SAME) or input i + 1
# as output i (AFTER_FIRST). Caffe2's memonger checks a net against them before sharing names.
_INPLACE = {
    "Append": ((0, 0),), "AtomicIter": ((1, 0),), "CopyRowsToTensor": ((0, 0),), "DestroyCommonWorld": ((0, 0),),
    "Float16SparseNormalize": ((0, 0),), "IndexFreeze": ((0, 0),), "IndexLoad": ((0, 0),), "Iter": ((0, 0),),
    "LastNWindowCollector": ((0, 0), (1, 1), (4, 2)), "ReceiveTensor": ((1, 0),),
    "ReservoirSampling": ((0, 0), (1, 1), (5, 2), (6, 3)), "RowWiseCounter": ((0, 0), (1, 1)),
    "RowWiseSparseAdagrad": ((0, 0), (1, 1)), "RowWiseSparseAdam": ((0, 0), (1, 1), (2, 2)),
    "ScatterAssign": ((0, 0),), "ScatterWeightedSum": ((0, 0),), "SmartDecaySparseAdam": ((0, 0), (1, 1), (2, 2), (3, 3)),
    "SparseAdadelta": ((0, 0), (1, 1), (2, 2)), "SparseAdagrad": ((0, 0), (1, 1)), "SparseAdam": ((0, 0), (1, 1), (2, 2)),
    "SparseFtrl": ((0, 0), (1, 1)), "SparseLpRegularizer": ((0, 0),), "SparseMomentumSGDUpdate": ((1, 1), (3, 2)),
    "SparseNormalize": ((0, 0),), "SparseStorm": ((0, 0), (1, 1), (2, 2)), "SparseWngrad": ((0, 0), (1, 1)),
    "SpatialBN": ((3, 1), (4, 2)), "rnn_internal_accumulate_gradient_input": ((2, 0),),
    "rnn_internal_apply_link": ((1, 1),),
}
_SAME = {"CollectTensor", "DataCouple", "Free", "NCCLBroadcast", "TrimDataset"}
_AFTER_FIRST = {"Allreduce", "Broadcast", "EnqueueBlobs", "ReduceScatter", "SafeEnqueueBlobs"}


def _inplace_pairs(op):
    if op.type in _SAME:
        return [(i, i) for i in range(min(len(op.input), len(op.output)))]
    if op.type in _AFTER_FIRST:
        return [(i + 1, i) for i in range(min(len(op.input) - 1, len(op.output)))]
    if op.type.startswith(("RowWiseSparseAdagradFused", "SparseAdagradFused")):
        return [(0, 0), (1, 1)]
    return _INPLACE.get(op.type, ())


def check_inplace(netproto) -> None:
    """Raise RuntimeError (Caffe2's schema check) if an op names apart an output its schema
    requires to be one of its inputs (IndexFreeze's index, a sparse optimizer's parameter)."""
    for k, op in enumerate(netproto.op):
        for i, o in _inplace_pairs(op):
            if i < len(op.input) and o < len(op.output) and op.input[i] != op.output[o]:
                raise RuntimeError(f"op #{k} {op.type}: input {i} ({op.input[i]}) and output {o} ({op.output[o]}) "
                                   f"must be the same blob (Caffe2's schema makes {op.type} work in place); "
                                   f"name output {o} {op.input[i]!r}")


def _share(netproto, shareable, fixed, namescope: str):
    """A copy of ``netproto`` with the ``shareable`` blobs (minus ``fixed``) renamed to shared
    names where their ranges allow (after Caffe2's in-place check, ``check_inplace``)."""
    check_inplace(netproto)
    optim = copy.deepcopy(netproto)
    ranges = compute_ranges(optim.op)
    read_first = _read_before_written(optim.op)
    static = set(fixed) | read_first | set(optim.external_input) | set(optim.external_output)
    candidates = {b: r for b, r in ranges.items() if b in shareable}
    assignments = compute_assignments(candidates, static, AssignmentAlgorithm.GREEDY)
    verify_assignments(assignments)
    names = {}
    shared = 0
    for a in assignments:
        if len(a) < 2:
            continue
        new = f"{namescope}__m{shared}_shared"
        shared += 1
        names.update((b, new) for b, _ in a)
    apply_assignments(optim, names)
    assert verify_graph_equality(netproto, optim), "memonger changed what the net computes"
    assert verify_inplace_blobs(netproto, optim), "memonger changed the net's in-place ops"
    return optim


def _read_before_written(ops) -> set:
    made, first = set(), set()
    for op in ops:
        first.update(b for b in op.input if b not in made)
        made.update(op.output)
    return first


def share_grad_blobs(net, losses, param_grads, namescope, dont_share_blobs=None, share_activations=False,
                     blob_shapes=None):
    """A NetDef like ``net``'s where the gradient blobs passed between layers (``*_grad``
    under ``namescope``, not the parameters' gradients ``param_grads``) share names, and
    with ``share_activations`` the layers' activations too (all but the last two)."""
    if namescope and not namescope.endswith("/"):
        namescope += "/"
    proto = net.Proto() if hasattr(net, "Proto") else net
    param_grads = {str(g) for g in param_grads}

    def is_grad(b):
        return b.endswith("_grad") and (b.startswith(namescope) or b.startswith("_" + namescope)) \
            and b not in param_grads

    outputs = set(proto.external_output)
    activations = [b for op in proto.op for b in op.output if b + "_w" in op.input and b not in outputs]
    activations = set(activations[:-2])  # (the last ones are usually read from outside)
    shareable = {b for op in proto.op for b in list(op.input) + list(op.output)
                 if is_grad(b) or (share_activations and b in activations)}
    fixed = {str(b) for b in losses} | set(dont_share_blobs or ())
    return _share(proto, shareable, fixed, namescope)


def optimize_inference_for_dag(net, input_blobs, namescope=""):
    """A NetDef like ``net``'s (forward ops only) where the activations share names."""
    proto = net.Proto() if hasattr(net, "Proto") else net
    inputs, outputs = set(proto.external_input), set(proto.external_output)
    made = set()
    activations = set()
    for op in proto.op:
        if op.is_gradient_op:
            raise AssertionError("optimize_inference_for_dag takes forward-only nets")
        for b in op.input:
            if b not in inputs and b not in outputs:
                if b not in made:
                    raise AssertionError(f"{b} not in external input")
                activations.add(b)
        activations.update(b for b in op.output if b not in inputs and b not in outputs)
        made.update(op.output)
    return _share(proto, activations, {str(b) for b in input_blobs}, namescope)


def optimize_interference(net, static_blobs, ordering_function=None, blob_sizes=None,
                          algo=AssignmentAlgorithm.GREEDY):
    """(NetDef with shared names, assignments, {blob: name}) for every blob of the net that
    is not static (and not an external input or output)."""
    proto = copy.deepcopy(net.Proto() if hasattr(net, "Proto") else net)
    static = set(map(str, static_blobs)) | set(proto.external_input) | set(proto.external_output) \
        | _read_before_written(proto.op)
    ranges = compute_ranges(proto.op, blob_sizes)
    assignments = compute_assignments(ranges, static, algo)
    names = compute_blob_assignments(assignments)
    optim = copy.deepcopy(proto)
    apply_assignments(optim, names)
    return collections.namedtuple("Optimization", ["net", "assignments", "blob_assignments"])(
        optim, assignments, names)


def optimize_inference_fast(net, static_blobs):
    return optimize_interference(net, static_blobs).net


# ----------------------------------------------------------------------------- checks

def verify_graph_equality(net_a, net_b) -> bool:
    """Whether two NetDefs run the same ops (types, arguments) on the same data: each input
    comes from the same output of the same earlier op in both, or from outside in both
    (blob names aside)."""
    def sources(net):
        last, out = {}, []
        for i, op in enumerate(net.op):
            out.append((op.type, tuple(sorted(a.SerializeToString() for a in op.arg)),
                        tuple(last.get(b, "outside") for b in op.input), len(op.output)))
            for k, b in enumerate(op.output):
                last[b] = (i, k)
        return out

    a, b = (net_a.Proto() if hasattr(net_a, "Proto") else net_a), (net_b.Proto() if hasattr(net_b, "Proto") else net_b)
    return len(a.op) == len(b.op) and sources(a) == sources(b)


def verify_inplace_blobs(net_a, net_b) -> bool:
    """Whether the same ops write in place (an output named as one of their inputs) in both."""
    def inplace(net):
        return [[(i, o) for i, x in enumerate(op.input) for o, y in enumerate(op.output) if x == y] for op in net.op]
    a, b = (net_a.Proto() if hasattr(net_a, "Proto") else net_a), (net_b.Proto() if hasattr(net_b, "Proto") else net_b)
    return inplace(a) == inplace(b)


def blob_nbytes(blob) -> int:
    """The bytes of a blob's value in the current workspace (0 if it has none)."""
    try:
        return int(np.asarray(workspace.FetchBlob(blob)).nbytes)
    except Exception:
        return 0


def collect_blob_sizes(net) -> dict:
    proto = net.Proto() if hasattr(net, "Proto") else net
    return {b: blob_nbytes(b) for op in proto.op for b in list(op.input) + list(op.output)}


def compute_statistics(assignments):
    """(bytes of the assignments' blobs, bytes with each shared name holding its largest),
    from the blobs' values in the current workspace."""
    Statistics = collections.namedtuple("Statistics", ["baseline_nbytes", "optimized_nbytes"])
    nbytes = {b: blob_nbytes(b) for a in assignments for b, _ in a}
    return Statistics(sum(nbytes.values()), sum(max(nbytes[b] for b, _ in a) for a in assignments if a))


__all__ = ["AssignmentAlgorithm", "LiveRange", "apply_assignments", "blob_nbytes", "collect_blob_sizes",
           "compute_assignments", "compute_assignments_dp", "compute_assignments_greedy",
           "compute_blob_assignments", "compute_interference_graph", "compute_ranges", "compute_statistics",
           "get_memory_usage", "is_compatible", "optimize_inference_fast", "optimize_inference_for_dag",
           "optimize_interference", "share_grad_blobs", "verify_assignments", "verify_graph_equality",
           "verify_inplace_blobs", "caffe2_pb2"]
