"""PackRecords / UnPackRecords (a dataset's rows as one blob) and Concat / Split."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir import parse, print_module
from dslc.ir.diagnostics import DSLError
from dslc.lower import lower_group
from dslc.schema import FeedRecord, List, NewRecord, Struct, from_blob_list
from dslc.task import Task, TaskGroup

# Three rows: (1.5, [10, 11]), (2.5, []), (3.5, [12])
SCHEMA = Struct(("x", np.float32), ("l", List(np.int64)))
CONTENTS = [np.array([1.5, 2.5, 3.5], np.float32), np.array([2, 0, 1], np.int32),
            np.array([10, 11, 12], np.int64)]


def _pack_unpack(single: bool, net_name: str):
    net = core.Net(net_name)
    batch = NewRecord(net, SCHEMA)
    FeedRecord(batch, CONTENTS)
    fields = SCHEMA.field_names()
    packed = net.PackRecords(batch.field_blobs(), 1, fields=fields, pack_to_single_shared_ptr=single)
    unpacked = packed.UnPackRecords([], len(fields), fields=fields)
    return net, batch, packed, unpacked


@pytest.mark.parametrize("single", [False, True])
def test_unpacking_packed_records_gives_the_dataset_back(session, single):
    net, batch, packed, unpacked = _pack_unpack(single, "pack")
    session.run(net)
    for want, blob in zip(CONTENTS, unpacked):
        got = workspace.FetchBlob(blob)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    rows = workspace.FetchBlob(packed).rows
    if single:
        assert len(rows) == 1
    else:  # one entry per top-level row, with that row's nested values
        assert [[a.tolist() for a in r] for r in rows] == [[[1.5], [2], [10, 11]], [[2.5], [0], []],
                                                             [[3.5], [1], [12]]]


def test_unpacking_no_rows_takes_types_from_prototypes(session):
    net = core.Net("empty")
    e0 = net.Const(np.zeros((0,), np.int32))
    e1 = net.Const(np.zeros((0, 2), np.float32))
    packed = net.PackRecords([e0, e1], 1, fields=["a", "b"])
    out = net.UnPackRecords([packed, e0, e1], 2, fields=["a", "b"])
    session.run(net)
    assert [workspace.FetchBlob(b).shape for b in out] == [(0,), (0, 2)]
    assert workspace.FetchBlob(out[1]).dtype == np.float32


def test_unpacking_no_rows_without_prototypes_is_an_error(session):
    net = core.Net("bad")
    e0 = net.Const(np.zeros((0,), np.int32))
    packed = net.PackRecords([e0], 1, fields=["a"])
    net.UnPackRecords([packed], 1, fields=["a"])
    with pytest.raises(DSLError, match="no rows to unpack") as e:
        session.run(net)
    assert "test_record_ops.py" in str(e.value)


def test_pack_needs_one_field_name_per_blob(session):
    net = core.Net("bad")
    x = net.Const(np.zeros((2,), np.int32))
    net.PackRecords([x, x], 1, fields=["a"])
    with pytest.raises(DSLError, match="fields names 1"):
        session.run(net)


def test_pack_of_an_inconsistent_dataset_is_an_error(session):
    net = core.Net("bad")
    lengths = net.Const(np.array([2, 2], np.int32))
    values = net.Const(np.array([1, 2, 3], np.int64))  # the lengths want 4
    net.PackRecords([lengths, values], 1, fields=["l:lengths", "l:values"])
    with pytest.raises(DSLError, match="PackRecords"):
        session.run(net)


# ----------------------------------------------------------------------------- Concat / Split
A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(6, 10, dtype=np.float32).reshape(2, 2)


def test_concat_joins_along_the_axis_and_reports_sizes(session):
    net = core.Net("cat")
    a, b = net.Const(A), net.Const(B)
    y, sizes = net.Concat([a, b], 2, axis=1)
    rows, rsizes = net.Concat([a, net.Const(A[:1])], 2, axis=0)
    stacked, ssizes = net.Concat([a, a], 2, add_axis=1, axis=0)
    default, _ = net.Concat([a, b], 2)  # NCHW order: axis 1
    session.run(net)
    want = [[0, 1, 2, 6, 7], [3, 4, 5, 8, 9]]
    assert workspace.FetchBlob(y).tolist() == want and workspace.FetchBlob(default).tolist() == want
    assert workspace.FetchBlob(sizes).tolist() == [3, 2] and workspace.FetchBlob(sizes).dtype == np.int32
    assert workspace.FetchBlob(rows).tolist() == [[0, 1, 2], [3, 4, 5], [0, 1, 2]]
    assert workspace.FetchBlob(rsizes).tolist() == [2, 1]
    assert workspace.FetchBlob(stacked).shape == (2, 2, 3) and workspace.FetchBlob(ssizes).tolist() == [1, 1]


def test_split_cuts_by_sizes_equally_or_by_a_sizes_blob(session):
    net = core.Net("split")
    x = net.Const(np.arange(9, dtype=np.int64))
    p = net.Split([x], 3, split=[3, 2, 4], axis=0)
    q = net.Split([x], 3, axis=0)
    r = net.Split([x, net.Const(np.array([1, 8], np.int32))], 2, axis=0)
    m = net.Split([net.Const(A)], 3, axis=1, add_axis=1)
    session.run(net)
    assert [workspace.FetchBlob(b).tolist() for b in p] == [[0, 1, 2], [3, 4], [5, 6, 7, 8]]
    assert [workspace.FetchBlob(b).tolist() for b in q] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [len(workspace.FetchBlob(b)) for b in r] == [1, 8]
    assert [workspace.FetchBlob(b).tolist() for b in m] == [[0, 3], [1, 4], [2, 5]]


def test_concat_then_split_is_the_identity(session):
    net = core.Net("roundtrip")
    a, b = net.Const(A), net.Const(B)
    y, sizes = net.Concat([a, b], 2, axis=1)
    a2, b2 = net.Split([y, sizes], 2, axis=1)
    session.run(net)
    assert workspace.FetchBlob(a2).tolist() == A.tolist() and workspace.FetchBlob(b2).tolist() == B.tolist()


@pytest.mark.parametrize("build, message", [
    (lambda n: n.Concat([n.Const(A), n.Const(np.zeros((3, 3), np.float32))], 2, axis=1), "differ in dim 0"),
    (lambda n: n.Concat([n.Const(A), n.Const(np.zeros(3, np.float32))], 2, axis=0), "one rank"),
    (lambda n: n.Concat([n.Const(A), n.Const(A.astype(np.int32))], 2, axis=0), "one type"),
    (lambda n: n.Concat([n.Const(A)], 2, axis=5), "axis 5 is out of range"),
    (lambda n: n.Split([n.Const(np.arange(7))], 2, axis=0), "7 into 2 equal parts"),
    (lambda n: n.Split([n.Const(np.arange(7))], 2, axis=0, split=[3, 3]), "add up to 6"),
])
def test_bad_concat_and_split_are_located_errors_before_running(session, build, message):
    net = core.Net("bad")
    build(net)
    with pytest.raises(DSLError, match=message) as e:
        session.run(net)
    assert "test_record_ops.py" in str(e.value)


def test_concat_split_and_pack_types_in_the_ir():
    with TaskGroup() as tg, Task():
        from dslc.net_builder import ops
        y, _ = ops.Concat([ops.Const(A), ops.Const(B)], 2, axis=1)
        ops.Split([y], 2, axis=1, split=[1, 4])
        rec = from_blob_list(SCHEMA, [ops.Const(c) for c in CONTENTS])
        p = ops.PackRecords(rec.field_blobs(), 1, fields=SCHEMA.field_names())
        ops.UnPackRecords([p], 3, fields=SCHEMA.field_names())
    text = print_module(lower_group(tg, "job.py", {}), with_locs=False)
    # CHECK: shapes are known where the operands' are; packed records are a handle
    assert re.search(r'Concat\(%\w+, %\w+\) \{axis = 1\} : f32\[2,5\], i32\[2\]', text)
    assert re.search(r'Split\(%\w+\) \{axis = 1, split = \[1, 4\]\} : f32\[2,1\], f32\[2,4\]', text)
    assert re.search(r'PackRecords\(%\w+, %\w+, %\w+\) \{fields = \["x", "l:lengths", "l:values"\]\} : '
                     r'!records', text)
    assert re.search(r'UnPackRecords\(%\w+\) \{.*\} : any, any, any', text)
    assert print_module(parse(print_module(lower_group(tg, "job.py", {})), "x")) == \
        print_module(lower_group(tg, "job.py", {}))
