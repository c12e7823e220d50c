"""Collective operators of data-parallel training: the replicas' gradients combined.

    Allreduce(g_0, g_1, ..., g_k) {reduce = "sum"} -> (s, s, ..., s),  s = g_0 + g_1 + ... + g_k
    Allreduce(a_0, b_0, a_1, b_1) {tensors = 2} -> (a, b, a, b),  a = a_0 + a_1, b = b_0 + b_1
    Broadcast(p_0, ..., p_k) {root = 0} -> (r, ..., r),  r = the root shard's p_0
    Allgather(x) -> the shards' x, concatenated along the first axis in shard order

The inputs are one shard's replicas (one per device); an Allreduce of ``tensors = k``
combines k blobs at once (the inputs are replica 0's k blobs, then replica 1's...): a
step's gradients in one call across shards, not one call each. With ``shards = n > 1`` the op is
also one step of a collective across the n shards of a job (Nodes, Ray processes,
machines), ``shard`` being this one's rank: Allreduce adds every shard's sum, Broadcast
gives the root shard's value, Allgather joins every shard's rows. Results are combined in
input order, then in shard order, so they never depend on which replica finished first.
"mean" divides by the count of all replicas. A data-parallel net
(dslc/data_parallel_model.py) writes the outputs over the inputs, one per replica, so
each replica's optimizer reads the combined gradient. ``group`` names the shards taking
part: the k-th collective of a group on one shard meets the k-th on every other.

They are effects (``collective`` write), not pure: the other shards wait for each call,
so none may be removed, merged or moved past another. The kernels live in
runtime/collectives.py.
"""
from __future__ import annotations

from ..gradients import no_gradient
from ..opdef import Effect, declare, type_error
from ..types import TensorType
from .infer import tensors


def _allreduce(types, attrs, n):
    _shards("Allreduce", attrs)
    ts = tensors("Allreduce", types)
    if n != len(ts):
        type_error(f"Allreduce writes one output per input: {len(ts)} inputs, {n} outputs",
                   "name one output per replica (usually the inputs themselves)")
    if attrs["reduce"] not in ("sum", "mean"):
        type_error(f"Allreduce reduce={attrs['reduce']!r} is not supported", "use 'sum' or 'mean'")
    k = attrs["tensors"]
    if not (isinstance(k, int) and k >= 1 and len(ts) % k == 0):
        type_error(f"Allreduce of {len(ts)} inputs with tensors={k!r}",
                   "tensors counts the blobs of one replica: the inputs are replicas x tensors, replica by replica")
    for j in range(k):
        first = ts[j]
        for t in ts[j + k::k]:
            if t.dtype is not None and first.dtype is not None and t.dtype != first.dtype:
                type_error(f"Allreduce of {first.dtype} and {t.dtype}", "every replica's blob has one dtype")
            if t.shape is not None and first.shape is not None and len(t.shape) == len(first.shape) and any(
                    a is not None and b is not None and a != b for a, b in zip(t.shape, first.shape)):
                type_error(f"Allreduce of shapes {list(first.shape)} and {list(t.shape)}",
                           "every replica's blob has one shape")
    return [ts[i % k] for i in range(n)]


_SHARDS = {"group": "", "shards": 1, "shard": 0}
_COLLECTIVE = (Effect("collective", "write"),)


def _shards(name, attrs):
    if not (isinstance(attrs["shards"], int) and attrs["shards"] >= 1 and 0 <= attrs["shard"] < attrs["shards"]):
        type_error(f"{name} shard={attrs['shard']} of shards={attrs['shards']}",
                   "shards is the number of shards (>= 1), shard this one's rank in 0 .. shards - 1")


def _broadcast(types, attrs, n):
    _shards("Broadcast", attrs)
    if not 0 <= attrs["root"] < attrs["shards"]:
        type_error(f"Broadcast root={attrs['root']} of shards={attrs['shards']}", "root is a shard: 0 .. shards - 1")
    ts = tensors("Broadcast", types)
    if n != len(ts):
        type_error(f"Broadcast writes one output per input: {len(ts)} inputs, {n} outputs",
                   "name one output per replica (usually the inputs themselves)")
    return [ts[0]] * n


def _allgather(types, attrs, n):
    _shards("Allgather", attrs)
    (t,) = tensors("Allgather", types)
    if attrs["shards"] == 1 or t.shape is None or not t.shape:
        return [t]
    return [TensorType(t.dtype, (None,) + tuple(t.shape[1:]))]


declare("Allreduce", (1, None), _allreduce, results=(1, None), attrs={"reduce": "sum", "tensors": 1, **_SHARDS},
        effects=_COLLECTIVE, doc="every output = the sum (or mean) of all inputs, and of every shard's, added "
                                 "in input then shard order: the replicas' gradients combined")
declare("Broadcast", (1, None), _broadcast, results=(1, None), attrs={"root": 0, **_SHARDS},
        effects=_COLLECTIVE, doc="every output = the root shard's first input: one initial value everywhere")
declare("Allgather", 1, _allgather, attrs=dict(_SHARDS), effects=_COLLECTIVE,
        doc="every shard's rows, concatenated along the first axis in shard order")
for _name in ("Allreduce", "Broadcast", "Allgather"):
    no_gradient(_name)
