"""Records (dslc.schema): flattening, nesting, access, blobs, and recording them into nets."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.net_builder import ops
from dslc.schema import (ConstRecord, FeedRecord, FetchRecord, InitEmptyRecord, List, NewRecord, RawTuple,
                         Scalar, SchemaError, Struct, Tuple, as_record, from_blob_list, from_column_list)
from dslc.task import Task, final_output


def test_flat_names_types_and_blobs_in_order():
    rec = Struct(("a", np.int32), ("b", Struct(("c", np.float64), ("d", np.arange(3)))))
    assert rec.field_names() == ["a", "b:c", "b:d"]
    assert rec.field_types()[:2] == [np.dtype(np.int32), np.dtype(np.float64)]
    assert rec.field_types()[2] == np.dtype(np.void)  # data without a dtype stays untyped
    assert not rec.has_blobs()
    assert [s.id() for s in rec.all_scalars()] == [0, 1, 2]
    assert rec.b.slice() == slice(1, 3)


def test_nested_names_build_and_merge_structs():
    rec = Struct(("a", np.int32), ("b:c", np.int32), ("b:d:e", np.int32), ("b", Struct(("f", np.int32))))
    assert rec.field_names() == ["a", "b:c", "b:d:e", "b:f"]
    assert rec["b:d:e"] is rec.b.d.e
    assert "b:d" in rec and "b:x" not in rec
    assert rec[0] is rec.a and len(rec) == 2
    merged = Struct(("x", np.int32)) + Struct(("y", np.int64))
    assert merged.field_names() == ["x", "y"]


def test_lists_have_lengths_then_values():
    rec = Struct(("ids", List(np.int64)), ("pairs", List(Struct(("k", np.int32), ("v", np.float32)))))
    assert rec.field_names() == ["ids:lengths", "ids:values", "pairs:lengths", "pairs:values:k",
                                 "pairs:values:v"]
    assert rec.ids.lengths.dtype == np.dtype(np.int32)
    assert rec.pairs.k is rec["pairs:values:k"]  # a list of structs shows its fields
    assert from_column_list(rec.field_names()).field_names() == rec.field_names()


def test_scalar_data_and_leaf_access():
    rec = Struct(("val", np.array([1, 2, 3])))
    assert list(rec.val()) == [1, 2, 3]  # rec.val() is the leaf's blob (here, its data)
    assert Scalar(np.int64, 5).get().shape == (1,)  # a Python scalar becomes one row
    assert Scalar((np.float32, 2)).dtype.shape == (2,)


def test_from_blob_list_and_as_record():
    schema = Struct(("a", np.int32), ("b", np.int32))
    rec = from_blob_list(schema, [core.BlobReference("x"), core.BlobReference("y")])
    assert [str(b) for b in rec.field_blobs()] == ["x", "y"]
    assert not schema.has_blobs()  # the schema itself is untouched
    assert as_record([("p", np.int32), ("q", np.int64)]).field_names() == ["p", "q"]
    assert as_record({"p": np.int32}).field_names() == ["p"]
    assert as_record([np.int32, np.int64]).field_names() == ["field_0", "field_1"]
    assert Tuple(np.int32).field_names() == ["field_0"] and len(RawTuple(3)) == 3


def test_records_are_immutable_and_checked():
    rec = Struct(("a", np.int32))
    with pytest.raises(SchemaError, match="cannot change"):
        rec.a = Scalar(np.int64)
    with pytest.raises(SchemaError, match="'lengths'"):
        Struct(("lengths", np.int32))
    with pytest.raises(SchemaError, match="duplicate"):
        Struct(("a", np.int32), ("a", np.int64))
    with pytest.raises(SchemaError, match="ambiguous") as e:
        Scalar(blob="name")
    assert e.value.loc.file.endswith("test_schema.py") and e.value.hint
    with pytest.raises(SchemaError, match="2 fields, got 1"):
        from_blob_list(Struct(("a", np.int32), ("b", np.int32)), [core.BlobReference("x")])


def test_new_record_names_blobs_after_fields_in_the_net():
    net = core.Net("n")
    first = NewRecord(net, Struct(("label", np.int64), ("pair:a", np.int32)))
    again = NewRecord(net, Struct(("label", np.int64)))
    assert [str(b) for b in first.field_blobs()] == ["label", "pair:a"]
    assert [str(b) for b in again.field_blobs()] == ["label_auto_0"]  # unique within the net
    with core.NameScope("src"):
        assert [str(b) for b in NewRecord(net, Struct(("label", np.int64))).field_blobs()] == ["src/label"]


def test_const_record_and_empty_record_run(session):
    with Task() as task:
        rec = ConstRecord(ops, Struct(("val", np.arange(4)), ("w", np.array([0.5, 1.5], dtype=np.float32))))
        empty = InitEmptyRecord(ops, Struct(("i", np.int32), ("u", Scalar())))
        outs = [final_output(b) for b in rec.field_blobs() + empty.field_blobs()]
    session.run(task)
    val, w, i, u = (o.fetch() for o in outs)
    assert [str(b) for b in rec.field_blobs()] == ["val", "w"]
    assert val.dtype == np.int64 and list(val) == [0, 1, 2, 3]
    assert w.dtype == np.float32 and list(w) == [0.5, 1.5]
    assert i.dtype == np.int32 and i.shape == (0,)
    assert u.dtype == np.float32 and u.shape == (0,)  # an untyped field starts as empty floats


def test_feed_and_fetch_record():
    rec = NewRecord(core.Net("feed"), Struct(("a", np.int64), ("b", np.float32)))
    FeedRecord(rec, [np.array([1, 2]), np.array([3.0], dtype=np.float32)])
    got = FetchRecord(rec)
    assert list(got.a()) == [1, 2] and list(got.b()) == [3.0]
    assert workspace.FetchBlob("a").tolist() == [1, 2]


def test_task_output_of_a_record_fetches_a_record(session):
    with Task() as task:
        rec = ConstRecord(ops, Struct(("x", np.array([7, 8])), ("y", np.array([9]))))
        out = final_output(rec)
    session.run(task)
    got = out.fetch()
    assert got.field_names() == ["x", "y"] and list(got.x()) == [7, 8] and list(got.y()) == [9]
