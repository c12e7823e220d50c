"""Caffe2's ``schema``: typed records of blobs (``Struct``, ``List``, ``Scalar`` ...), the
functions building them, and ``FeedRecord`` / ``FetchRecord`` moving a record's arrays in
and out of a workspace. The record types are the tracer's (dslc/trace/schema.py,
dslc/trace/records.py).
"""
# ruff: noqa: F401  (the imports are re-exports)
from __future__ import annotations

from dslc import workspace
from dslc.trace.records import (ConstRecord, InitEmptyRecord, NewRecord, as_record, data_type_for_dtype,
                                dtype_for_core_type, from_blob_list, from_column_list)
from dslc.trace.schema import (FIELD_SEPARATOR, FeatureSpec, Field, List, ListWithEvicted, Map, MapWithEvicted,
                               Metadata, NamedTuple, RawTuple, Scalar, SchemaError, SchemaTypeError, Struct, Tuple,
                               _fail, attach_metadata_to_scalars, equal_schemas, is_schema_subset)


def FetchRecord(blob_record, ws=None, throw_on_type_mismatch=False):
    """The record's current values, fetched from ``ws`` (default: the current workspace)."""
    fetch = workspace.FetchBlob if ws is None else (lambda n: workspace._fetch(ws, n))
    return from_blob_list(blob_record, [fetch(str(b)) for b in blob_record.field_blobs()],
                          throw_on_type_mismatch)


def FeedRecord(blob_record, arrays, ws=None):
    """Feed ``arrays`` (a list, or a record of arrays) into the record's blobs."""
    if isinstance(arrays, Field):
        arrays = arrays.field_blobs()
    blobs = blob_record.field_blobs()
    if len(arrays) != len(blobs):
        _fail(f"the record has {len(blobs)} fields, got {len(arrays)} arrays")
    for b, a in zip(blobs, arrays):
        if ws is None:
            workspace.FeedBlob(str(b), a)
        else:
            ws.feed(str(b), a)


__all__ = ["FIELD_SEPARATOR", "Field", "Scalar", "List", "Struct", "Map", "NamedTuple", "Tuple", "RawTuple",
           "Metadata", "ListWithEvicted", "ConstRecord", "FeedRecord", "FetchRecord", "InitEmptyRecord",
           "NewRecord", "as_record", "data_type_for_dtype", "dtype_for_core_type", "from_blob_list",
           "from_column_list", "FeatureSpec", "MapWithEvicted", "is_schema_subset", "equal_schemas",
           "attach_metadata_to_scalars"]
