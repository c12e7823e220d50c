"""Packed records (PackRecords / UnPackRecords): a dataset's rows as one value.

Each entry is one top-level row: the slices of every field that belong to it (a
row's nested lists come along). Unpacking concatenates the entries field by field,
which gives back the dataset; with no entries, prototype arrays give the dtypes and
the shapes after the first dim.
"""
from __future__ import annotations

import numpy as np

from .datasets import FieldTree


class PackedRecords:
    """The rows of a dataset, each a tuple of arrays (one per field)."""

    handle_kind = "records"

    def __init__(self, rows: list):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __repr__(self):
        return f"PackedRecords({len(self.rows)} rows)"


class ObjectMap(dict):
    """A map blob (CreateMap): ReservoirSampling's object id -> reservoir slot."""

    handle_kind = "map"


def pack(fields, data, single: bool) -> PackedRecords:
    """The rows of the dataset ``data`` (one array per field); ``single``: one entry for all."""
    data = [np.asarray(d) for d in data]
    tree = FieldTree(fields)
    tree.check(data)
    if single:
        return PackedRecords([tuple(np.array(d) for d in data)])
    offsets = [0] * tree.num_domains
    rows = []
    for _ in range(tree.rows(data)):
        rng = tree.ranges(data, offsets, 1)
        rows.append(tuple(tree.take(data, rng)))
        offsets = [e for _, e in rng]
    return PackedRecords(rows)


def unpack(packed: PackedRecords, n_fields: int, protos) -> list:
    """The fields of ``packed`` (each its entries concatenated along dim 0)."""
    if not packed.rows:
        if not protos:
            raise ValueError("there are no rows to unpack, and no prototype blobs to give the "
                             "fields' types")
        return [np.asarray(p)[:0].copy() for p in protos]
    if any(len(r) != n_fields for r in packed.rows):
        raise ValueError(f"the packed rows have {len(packed.rows[0])} fields, unpacked into {n_fields}")
    out = []
    for j in range(n_fields):
        parts = [r[j] for r in packed.rows]
        first = parts[0]
        for p in parts[1:]:
            if p.dtype != first.dtype or p.shape[1:] != first.shape[1:]:
                raise ValueError(f"field {j} has rows of {first.dtype}{list(first.shape[1:])} and "
                                 f"{p.dtype}{list(p.shape[1:])}")
        out.append(np.concatenate(parts))
    return out
