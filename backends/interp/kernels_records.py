"""Interpreter kernels of the record and shape ops (``ir/ops/records.py``, ``ir/ops/shape.py``).

Text-file readers and packed records are runtime objects (``runtime/``) held
in blobs; Concat and Split are numpy's concatenate / stack / split.
"""
from __future__ import annotations

import os

import numpy as np

from dslc.runtime.packed import PackedRecords, pack, unpack
from dslc.runtime.textfile import TextFileError, TextFileReader
from dslc.ir.diagnostics import DSLError
from dslc.ir.ops.records import text_dtypes
from dslc.ir.ops.shape import given_axis

from .kernels import kernel


def _pack_results(values):
    return values[0] if len(values) == 1 else tuple(values)


def _need(value, cls, op: str, what: str, maker: str) -> None:
    """A handle operand must hold the runtime object its maker makes."""
    if not isinstance(value, cls):
        raise DSLError(f"{op} needs {what}, got {type(value).__name__}", hint=f"pass the blob {maker} wrote")


# ----------------------------------------------------------------------------- text files
@kernel("CreateTextFileReader")
def _create_text_reader(op, cfg):
    a = op.attrs
    dtypes = text_dtypes(a)

    def create():
        if not os.path.isfile(a["filename"]):
            raise DSLError(f"CreateTextFileReader: no file {a['filename']!r}",
                           hint="check the path (a relative one is read from the working directory)")
        return TextFileReader(a["filename"], int(a["num_passes"]), dtypes)
    return create


@kernel("TextFileReaderRead")
def _read_text(op, cfg):
    size, n = int(op.attrs["batch_size"]), len(op.results)

    def read(reader):
        _need(reader, TextFileReader, "TextFileReaderRead", "a text file reader", "CreateTextFileReader")
        if len(reader.dtypes) != n:
            raise DSLError(f"the file has {len(reader.dtypes)} columns, TextFileReaderRead {n} outputs",
                           hint="name one output per entry of the reader's field_types")
        try:
            return _pack_results(reader.read(size))
        except TextFileError as e:
            raise DSLError(str(e), hint="rows are lines of tab-separated fields, one per column, "
                           "each readable as its column's type") from None
    return read


# ----------------------------------------------------------------------------- packed records
@kernel("PackRecords")
def _pack(op, cfg):
    fields, single = list(op.attrs["fields"]), bool(op.attrs["pack_to_single_shared_ptr"])

    def run(*data):
        try:
            return pack(fields, data, single)
        except ValueError as e:
            raise DSLError(f"PackRecords: {e}", hint="the blobs must form a dataset of these fields: "
                           "one row per entry of the field's domain, lengths adding up") from None
    return run


@kernel("UnPackRecords")
def _unpack(op, cfg):
    n = len(op.results)

    def run(packed, *protos):
        _need(packed, PackedRecords, "UnPackRecords", "packed records", "PackRecords")
        try:
            return _pack_results(unpack(packed, n, protos))
        except ValueError as e:
            raise DSLError(f"UnPackRecords: {e}", hint="pass one prototype blob per field after the "
                           "packed records to unpack an empty record") from None
    return run


# ----------------------------------------------------------------------------- shapes
@kernel("Concat")
def _concat(op, cfg):
    a, two = op.attrs, len(op.results) == 2
    add = bool(a["add_axis"])

    def concat(*xs):
        xs = [np.asarray(x) for x in xs]
        axis = given_axis("Concat", a, xs[0].ndim + add)
        try:
            y = np.stack(xs, axis) if add else np.concatenate(xs, axis)
        except ValueError as e:
            raise DSLError(f"Concat: {e}", hint=f"all dims but axis {axis} must match") from None
        if not two:
            return y
        sizes = [1] * len(xs) if add else [x.shape[axis] for x in xs]
        return y, np.array(sizes, dtype=np.int32)
    return concat


@kernel("SplitByLengths")
def _split_by_lengths(op, cfg):
    axis_attr, n, scaled = int(op.attrs["axis"]), len(op.results), bool(op.attrs["use_scaling_lengths"])

    def split(x, lengths):
        x = np.asarray(x)
        axis = axis_attr % x.ndim
        lengths = np.ravel(lengths).astype(np.int64)
        dim = x.shape[axis]
        if lengths.size % n or (lengths < 0).any():
            raise DSLError(f"SplitByLengths: {lengths.size} lengths do not make {n} equal groups "
                           "(or one is negative)", hint="give a multiple of the outputs' count of lengths >= 0")
        total = int(lengths.sum())
        if scaled and total and dim % total == 0:
            lengths = lengths * (dim // total)
            total = dim
        if total != dim:
            raise DSLError(f"SplitByLengths: the lengths add up to {total}, the axis has {dim}",
                           hint="make them add up to the axis length (or to a divisor of it, with "
                                "use_scaling_lengths=1)")
        group = lengths.size // n
        ends = np.cumsum(lengths)[group - 1::group] if lengths.size else np.zeros(n, np.int64)
        parts = np.split(x, ends[:-1], axis)
        return _pack_results([np.ascontiguousarray(p) for p in parts])
    return split


@kernel("Split")
def _split(op, cfg):
    a, n = op.attrs, len(op.results)
    add = bool(a["add_axis"])

    def split(x, sizes=None):
        x = np.asarray(x)
        axis = given_axis("Split", a, x.ndim)
        sizes = [int(s) for s in (a["split"] or ([] if sizes is None else np.ravel(sizes)))]
        dim = x.shape[axis]
        if not sizes:
            if dim % n:
                raise DSLError(f"Split cannot cut an axis of {dim} into {n} equal parts",
                               hint="pass split=[...] with the size of each part")
            sizes = [dim // n] * n
        if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
            raise DSLError(f"Split sizes {sizes} do not cut an axis of {dim} into {n} parts",
                           hint="give one size >= 0 per output, adding up to the axis length")
        if add and any(s != 1 for s in sizes):
            raise DSLError("Split with add_axis=1 needs parts of size 1", hint="drop add_axis")
        parts = np.split(x, np.cumsum(sizes)[:-1], axis)
        return _pack_results([np.squeeze(p, axis) if add else p for p in parts])
    return split
