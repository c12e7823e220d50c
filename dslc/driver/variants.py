"""Compiled variants of a runnable: which compile a run may reuse, and what to compile next.

A session compiles a runnable for the types of the root blobs it loads. When one of them is
fed again with other dims (a batch of ids of another length, the last partial batch of an
epoch), the session compiles once more with those dims unknown (``i64[?]`` in the IR) and
reuses that compile for every later size, as torch.compile's automatic dynamic shapes do
after the first recompile:

    run 1: ids i64[1024]  -> compile for i64[1024]
    run 2: ids i64[997]   -> compile for i64[?]      (the dim that changed is now unknown)
    run 3: ids i64[1100]  -> reuse the i64[?] compile (a guard check, no lowering)

A variant is keyed by what its compile depends on: each loaded blob's dtype, rank and the
dims that stayed static. A runnable keeps at most ``MAX_VARIANTS`` of them (the least recently
used goes), so a blob whose dtype or rank keeps changing cannot fill memory with compiles.

Deciding that a compile fits is the per-call path of every ``RunNet``: ``Guard`` reads each
loaded blob's class, dtype and shape (its static dims only) into a tuple compared with the one
taken at compile time, a few microseconds for a handful of blobs.
"""
from __future__ import annotations

from dslc.ir.types import TensorType

MAX_VARIANTS = 8  # compiles one runnable keeps (least recently used dropped first)


class Guard:
    """What a compile assumed of the blobs it loads, as a fingerprint cheap to take again.

    ``names`` are the loaded blobs, ``masks`` per blob: None when every dim was static,
    else a tuple of booleans, True for each dim the compile fixed. Two workspaces with equal
    fingerprints give the loads the same types up to the unknown dims.
    """

    __slots__ = ("names", "masks")

    def __init__(self, deps: dict):
        self.names = tuple(deps)
        self.masks = tuple(_mask(t) for t in deps.values())

    def fingerprint(self, ws) -> tuple:
        """Per blob: None when absent, "created" when empty, else (class, dtype, shape) with
        the shape reduced to its rank and static dims where the compile left dims unknown."""
        blobs = ws.blobs
        out = []
        for n, mask in zip(self.names, self.masks):
            c = blobs.get(n)
            if c is None:
                out.append(None)
                continue
            v = c.v
            if v is None:
                out.append("created")
                continue
            shape = getattr(v, "shape", None)
            if mask is not None and shape is not None:
                shape = (len(shape),) + tuple(s for s, keep in zip(shape, mask) if keep)
            out.append((type(v), getattr(v, "dtype", None), shape))
        return tuple(out)


def _mask(t) -> tuple | None:
    if isinstance(t, TensorType) and t.shape is not None and None in t.shape:
        return tuple(d is not None for d in t.shape)
    return None


def generalized(known: dict, before: dict) -> tuple[dict, list]:
    """``known`` (blob -> the type it holds now) with every dim that differs from the type
    ``before`` gave the blob made unknown; and the blobs so widened.

    Only a dim changes: a blob whose dtype or rank changed keeps its new type whole (the
    compile for it is a variant of its own). ``before`` holds the types a previous compile
    loaded (its dims may already be unknown: they stay so).
    """
    out, widened = dict(known), []
    for name, old in before.items():
        new = known.get(name)
        if not (isinstance(new, TensorType) and isinstance(old, TensorType)) or new is old:
            continue
        if new.dtype != old.dtype or new.shape is None or old.shape is None \
                or len(new.shape) != len(old.shape):
            continue
        shape = tuple(None if a != b else a for a, b in zip(new.shape, old.shape))
        if shape != new.shape:
            out[name] = TensorType(new.dtype, shape)
            widened.append(name)
    return out, widened
