"""The xla backend's kernels for joining, cutting and padding tensors, clipping and reducing
them: the ops deploy conv nets put between their convolutions (GoogLeNet's, SqueezeNet's and
DenseNet's Concat, ShuffleNet's Split and ReduceMean, MobileNetV2's Clip as ReLU6, DenseNet's
PadImage), so that such a net is one XLA call rather than a run per branch.

Each computes what the interpreter's kernel computes (backends/interp/kernels_records.py's
Concat and Split, ir/ops/nn_math.py's clip and reduce_mean, ir/ops/spatial.py's pad_image),
sizes and axes from the IR's types; tests/backends/xla/test_xla_shape.py compares them.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dslc.ir.ops.shape import given_axis
from dslc.ir.ops.spatial import _pads, _spatial_axes

from .kernels import Refused, dtype, kernel, shape


@kernel("Concat")
def _concat(op):
    add = bool(op.attrs["add_axis"])
    rank = len(shape(op.operands[0]))
    axis = given_axis("Concat", op.attrs, rank + add)
    sizes = np.array([1 if add else shape(v)[axis] for v in op.operands], np.int32)
    dt, two = dtype(op.results[0]), len(op.results) == 2

    def concat(*xs):
        xs = [jnp.asarray(x).astype(dt) for x in xs]
        y = jnp.stack(xs, axis) if add else jnp.concatenate(xs, axis)
        return (y, jnp.asarray(sizes)) if two else y
    return concat


@kernel("Split")
def _split(op):
    if len(op.operands) > 1:
        raise Refused("Split with its sizes as an input: the parts' sizes are values, not types")
    add = bool(op.attrs["add_axis"])
    axis = given_axis("Split", op.attrs, len(shape(op.operands[0])))
    ends = np.cumsum([1 if add else shape(r)[axis] for r in op.results])[:-1]
    n = len(op.results)

    def split(x):
        parts = jnp.split(jnp.asarray(x), ends, axis)
        parts = [jnp.squeeze(p, axis) if add else p for p in parts]
        return parts[0] if n == 1 else tuple(parts)
    return split


@kernel("Clip")
def _clip(op):
    dt = dtype(op.result)
    lo, hi = op.attrs.get("min"), op.attrs.get("max")
    lo = dt.type(-np.inf if lo is None else lo)  # (the interpreter's: the bound in x's dtype)
    hi = dt.type(np.inf if hi is None else hi)
    return lambda x: jnp.clip(jnp.asarray(x), lo, hi).astype(dt)


def _reduce(fn):
    def factory(op):
        rank, dt = len(shape(op.operands[0])), dtype(op.result)
        if fn is jnp.mean and dt.kind != "f":
            raise Refused(f"{op.name} of integers (numpy's mean goes through float64)")
        axes = op.attrs.get("axes")
        axes = tuple(range(rank)) if not axes else tuple(int(a) % rank for a in axes)
        keep = bool(op.attrs.get("keepdims", 1))
        return lambda x: fn(jnp.asarray(x), axis=axes, keepdims=keep).astype(dt)
    return factory


kernel("ReduceSum")(_reduce(jnp.sum))
kernel("ReduceMean")(_reduce(jnp.mean))


@kernel("PadImage")
def _pad_image(op):
    mode = op.attrs["mode"]
    if mode not in ("constant", "reflect", "edge"):
        raise Refused(f"PadImage mode {mode!r}")
    t, left, b, r = _pads(op.attrs)
    ha, wa = _spatial_axes(op.attrs["order"])
    widths = [(0, 0)] * 4
    widths[ha], widths[wa] = (t, b), (left, r)
    dt = dtype(op.result)
    value = dt.type(op.attrs["value"])
    if mode == "constant":
        return lambda x: jnp.pad(jnp.asarray(x), widths, constant_values=value).astype(dt)
    if min(shape(op.operands[0])[k] for k in (ha, wa)) <= max(t, left, b, r) and mode == "reflect":
        raise Refused("PadImage reflect with pads as large as the image")
    return lambda x: jnp.pad(jnp.asarray(x), widths, mode=mode).astype(dt)
