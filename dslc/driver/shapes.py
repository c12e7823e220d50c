"""Blob shapes and types of nets, worked out without running them (Caffe2's
``workspace.InferShapesAndTypes``).

The nets are lowered as the session would lower them (``lower_group``): every op's
result type is what the op table's inference gives, the same types the verifier
checks. A blob's shape is the type of the last value stored to it; what the blob
held before (the workspace's value, or a given map of dims and types) types the loads.

As in Caffe2, a blob whose shape is not fully known is left out of both dicts. Where
an op declares a bound for a dim its type leaves open (``OpDef.bounds``: a
LastNWindowCollector window has at most ``num_to_collect`` rows), the bound is
reported, as Caffe2's shape functions report it.
"""
from __future__ import annotations

from dslc.ir.diagnostics import TraceError
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import CAFFE2_DTYPE_CODES, TensorType
from dslc.lower import lower_group
from dslc.trace.net import Net
from dslc.trace.steps import execution_step
from dslc.trace.task import BareTask, WorkspaceType, wrap_runnable
from dslc.trace.tracing import user_location

# our dtype -> Caffe2's TensorProto code (u8: UINT8, the code numpy's uint8 blobs get)
CODE_OF_DTYPE = {d: c for c, d in sorted(CAFFE2_DTYPE_CODES.items())}  # (6 after 3)
FLOAT = 1  # Caffe2's TensorProto.FLOAT: the type of a blob given dims but no type


def types_from_map(blob_dimensions: dict, blob_types: dict | None) -> dict:
    """The types of ``blob_dimensions``' blobs: their dims, of ``blob_types``' codes (else float)."""
    blob_types = blob_types or {}
    return {str(n): TensorType(dtype_from_code("InferShapesAndTypes", blob_types.get(n, FLOAT)),
                               tuple(int(d) for d in dims))
            for n, dims in blob_dimensions.items()}


def infer_shapes_and_types(nets, known: dict, created=frozenset()) -> tuple[dict, dict]:
    """``(shapes, types)``: blob name -> list of dims, and -> Caffe2 dtype code, for the
    blobs of ``known`` (name -> type before the nets run) and those the nets write."""
    final = dict(known)
    for op in _module(nets, known, created).walk():
        if op.name == "store":
            final[str(op.attrs["blob"])] = _bounded(op.operands[0])
    shapes, types = {}, {}
    for name, t in final.items():
        if isinstance(t, TensorType) and t.dtype in CODE_OF_DTYPE and t.shape is not None \
                and None not in t.shape:
            shapes[name], types[name] = list(t.shape), CODE_OF_DTYPE[t.dtype]
    return shapes, types


def _module(nets, known: dict, created):
    """The unoptimized module of ``nets`` run once in order, as the workspace runs them."""
    nets = list(nets)
    for n in nets:
        if not isinstance(n, Net):
            raise TraceError(f"InferShapesAndTypes takes core.Net objects, got {type(n).__name__}",
                             user_location(2), "pass the nets themselves (dslc has no NetDef protos to read)")
    group = wrap_runnable(execution_step("infer_shapes", nets), WorkspaceType.GLOBAL, BareTask)
    return lower_group(group, existing=known, check_reads=False, created=created)


def _bounded(value):
    """The type of ``value``, with the dims its op's type leaves open filled from the op's bounds."""
    t = value.type
    owner = getattr(value, "owner", None)
    if not isinstance(t, TensorType) or t.shape is None or None not in t.shape or owner is None \
            or owner.opdef.bounds is None:
        return t
    bound = owner.opdef.bounds([v.type for v in owner.operands], owner.attrs, len(owner.results))
    b = bound[value.index]
    if b is None or len(b) != len(t.shape):
        return t
    return TensorType(t.dtype, tuple(s if s is not None else d for s, d in zip(t.shape, b)))


def operator_cost(net, outputs, known: dict) -> tuple[int, int, int]:
    """``(flops, bytes_written, bytes_read)`` of the one operator of ``net`` (which writes
    ``outputs``) on operands of the types ``known`` gives, by its declaration's cost rule."""
    module = _module([net], known, frozenset())
    owner = next((op.operands[0].owner for op in module.walk()
                  if op.name == "store" and str(op.attrs["blob"]) in outputs
                  and getattr(op.operands[0], "owner", None) is not None), None)
    if owner is None:
        raise TraceError("GetOperatorCost: the operator writes none of its outputs", user_location(2))
    if owner.opdef.cost is None:
        raise TraceError(f"GetOperatorCost: dslc has no cost model for {owner.opdef.name}", user_location(2),
                         "Conv, FC, Concat and Split have one")
    try:
        return tuple(int(v) for v in owner.opdef.cost([v.type for v in owner.operands], owner.attrs,
                                                      [r.type for r in owner.results]))
    except ValueError as e:
        raise TraceError(f"GetOperatorCost of {owner.opdef.name}: {e}", user_location(2),
                         "feed every input blob first, and name them in blobs") from None
