"""Making and filling records (re-exported by ``dslc.schema``, Caffe2's names).

``from_column_list`` / ``from_blob_list`` / ``as_record`` build records from flat
lists; ``NewRecord`` / ``ConstRecord`` / ``InitEmptyRecord`` record the ops making
their blobs in a net (``FeedRecord`` / ``FetchRecord``, which move arrays in and out of a
workspace, are ``dslc.schema``'s own); ``data_type_for_dtype`` / ``dtype_for_core_type`` map numpy types to
``core.DataType`` codes and back.
"""
from __future__ import annotations

import numpy as np

from dslc.trace.blobref import BlobReference
from dslc.trace.oprecord import DataType
from dslc.trace.schema import (FIELD_SEPARATOR, Field, List, ListWithEvicted, Scalar, SchemaTypeError, Struct,
                         Tuple, _fail, _normalize)


def from_column_list(col_names, col_types=None, col_blobs=None, col_metadata=None):
    """A record from flat column names (``a``, ``b:lengths``, ``b:values``...)."""
    n = len(col_names)
    types, blobs, metas = (x if x is not None else [None] * n for x in (col_types, col_blobs, col_metadata))
    if not len(types) == len(blobs) == len(metas) == n:
        _fail("from_column_list needs one type, blob and metadata per column name")
    root: dict = {}
    for name, t, b, m in zip(col_names, types, blobs, metas):
        node = root
        parts = name.split(FIELD_SEPARATOR)
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = Scalar(t, b, m)
    return _from_tree(root)


def _from_tree(node) -> Field:
    if isinstance(node, Field):
        return node
    if set(node) == {"lengths", "values"}:
        return List(_from_tree(node["values"]), _from_tree(node["lengths"]))
    if set(node) == {"lengths", "values", "_evicted_values"}:
        return ListWithEvicted(*[_from_tree(node[k]) for k in ("values", "lengths", "_evicted_values")])
    return Struct(*[(k, _from_tree(v)) for k, v in node.items()])


def from_blob_list(schema, values, throw_on_type_mismatch=False):
    """A copy of ``schema`` whose leaves hold ``values``, in order."""
    if not isinstance(schema, Field):
        _fail(f"from_blob_list needs a record schema, got {type(schema).__name__}")
    if isinstance(values, BlobReference):
        values = [values]
    record = schema.clone_schema()
    leaves = record.all_scalars()
    if len(leaves) != len(values):
        _fail(f"the record has {len(leaves)} fields, got {len(values)} values",
              "give one blob per field, in field_names() order")
    for leaf, v in zip(leaves, values):
        leaf.set_value(v, throw_on_type_mismatch, unsafe=True)
    return record


def as_record(value):
    """A Field for ``value``: a Field as is; (name, value) pairs or a dict become a Struct,
    another list or tuple a Tuple; anything else a Scalar."""
    if isinstance(value, Field):
        return value
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in value):
            return Struct(*[(k, as_record(v)) for k, v in value])
        return Tuple(*[as_record(f) for f in value])
    if isinstance(value, dict):
        return Struct(*[(k, as_record(v)) for k, v in value.items()])
    return _normalize(value)


def NewRecord(net, schema):
    """A record like ``schema`` with a fresh blob per field (``net.NextScopedBlob(field name)``)."""
    if isinstance(schema, Scalar):
        out = schema.clone()
        out.set_value(net.NextScopedBlob("unnamed_scalar"), unsafe=True)
        return out
    if not isinstance(schema, Field):
        _fail(f"NewRecord needs a record schema, got {type(schema).__name__}")
    return from_blob_list(schema, [net.NextScopedBlob(prefix=name) for name in schema.field_names()])


def ConstRecord(net, array_record):
    """A record of constant blobs holding ``array_record``'s arrays (recorded in ``net``)."""
    blob_record = NewRecord(net, array_record)
    for blob, array in zip(blob_record.field_blobs(), array_record.field_blobs()):
        net.Const(array, blob)
    return blob_record


_DATA_TYPES = [(np.float16, DataType.FLOAT16), (np.float32, DataType.FLOAT), (np.float64, DataType.DOUBLE),
               (np.bool_, DataType.BOOL), (np.int8, DataType.INT8), (np.int16, DataType.INT16),
               (np.int32, DataType.INT32), (np.int64, DataType.INT64), (np.uint8, DataType.UINT8),
               (np.uint16, DataType.UINT16)]


def data_type_for_dtype(dtype) -> int:
    """The core.DataType code of a numpy dtype (TypeError for untyped or unknown ones)."""
    base = np.dtype(dtype).base
    if base.kind in "US":
        return DataType.STRING
    for np_type, code in _DATA_TYPES:
        if base == np_type:
            return code
    _fail(f"no core.DataType for {base}", "give the field a numeric, bool or string dtype",
          SchemaTypeError)


def dtype_for_core_type(core_type):
    """The numpy type of a core.DataType code (TypeError for codes without one)."""
    for np_type, code in _DATA_TYPES:
        if code == core_type:
            return np_type
    _fail(f"no numpy type for core.DataType {core_type!r}",
          "pass a core.DataType constant such as core.DataType.FLOAT", SchemaTypeError)


def InitEmptyRecord(net, schema_or_record, enforce_types=False):
    """Fill each field with an empty tensor of its type (untyped fields: empty float)."""
    record = schema_or_record if schema_or_record.has_blobs() else NewRecord(net, schema_or_record)
    for dtype, blob in zip(record.field_types(), record.field_blobs()):
        try:
            code = data_type_for_dtype(dtype)
        except SchemaTypeError:
            if enforce_types:
                _fail(f"field {blob} has no tensor type ({dtype})", "give the schema's fields dtypes")
            net.ConstantFill([], blob, shape=[0])
            continue
        net.ConstantFill([], blob, shape=[0] + list(dtype.shape), dtype=code)
    return record
