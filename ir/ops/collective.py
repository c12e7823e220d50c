"""Collective operators of data-parallel training: the replicas' gradients combined.

    Allreduce(g_0, g_1, ..., g_k) {reduce = "sum"} -> (s, s, ..., s),  s = g_0 + g_1 + ... + g_k

Every output is the same combination of all inputs, added in input order (so the result
does not depend on which replica finished first); "mean" divides by the count. A
data-parallel net (dslc/data_parallel_model.py) writes the outputs over the inputs, one
per replica, so each replica's optimizer reads the combined gradient. ``group`` names the
replicas taking part, for the plan to show.
"""
from __future__ import annotations


from ..gradients import no_gradient
from ..opdef import PURE, declare, type_error
from .infer import tensors


def _allreduce(types, attrs, n):
    ts = tensors("Allreduce", types)
    if n != len(ts):
        type_error(f"Allreduce writes one output per input: {len(ts)} inputs, {n} outputs",
                   "name one output per replica (usually the inputs themselves)")
    if attrs["reduce"] not in ("sum", "mean"):
        type_error(f"Allreduce reduce={attrs['reduce']!r} is not supported", "use 'sum' or 'mean'")
    first = ts[0]
    for t in ts[1:]:
        if t.dtype is not None and first.dtype is not None and t.dtype != first.dtype:
            type_error(f"Allreduce of {first.dtype} and {t.dtype}", "every replica's blob has one dtype")
        if t.shape is not None and first.shape is not None and len(t.shape) == len(first.shape) and any(
                a is not None and b is not None and a != b for a, b in zip(t.shape, first.shape)):
            type_error(f"Allreduce of shapes {list(first.shape)} and {list(t.shape)}",
                       "every replica's blob has one shape")
    return [first] * n


declare("Allreduce", (1, None), _allreduce, results=(1, None), attrs={"reduce": "sum", "group": ""},
        traits={PURE}, doc="every output = the sum (or mean) of all inputs, added in input order: the "
                           "replicas' gradients combined")
no_gradient("Allreduce")


def allreduce(*xs, reduce="sum", group=""):
    total = xs[0].copy()
    for x in xs[1:]:
        total += x
    if reduce == "mean":
        total = (total / len(xs)).astype(xs[0].dtype, copy=False)
    out = [total] + [total.copy() for _ in xs[1:]]  # (each replica's blob its own array)
    return out[0] if len(out) == 1 else tuple(out)


FUNCTIONS = {"Allreduce": allreduce}
