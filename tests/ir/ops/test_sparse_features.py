"""Sparse-feature operators (ir/ops/features.py): SparseToDenseMask and its gradient,
IndexHash (Caffe2's hash, bit for bit), Mod; and the layers over them (dslc/layers/features.py):
FeatureSparseToDense, SparseFeatureHash.

Every figure was read off the real Caffe2 (torch 1.10.2's caffe2.python, through
shared/tools/caffe2-ref/run.sh) running the same ops on the same inputs; the gradients in
``loss = SumElements(SparseToDenseMask(...) * w)`` after ``AddGradientOperators([loss])``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, layer_model_instantiator as lmi, schema, workspace
from dslc.ir.diagnostics import DSLError
from dslc.layer_model_helper import LayerModelHelper

f32 = np.float32
IDS = np.array([2, 4, 6, 1, 2, 999999999, 2, -1, 6], np.int64)  # (rows of 3, 0 and 6 ids; -1 is skipped)
VALS = np.arange(18, dtype=f32).reshape(9, 2)
MASK = [999999999, 2, 6, 5]



def _op(backend, op_type, ins, outs, **args):
    names = [f"in{i}" for i in range(len(ins))]
    for n, v in zip(names, ins):
        workspace.FeedBlob(n, v)
    net = core.Net("one")
    net.Proto().op.extend([core.CreateOperator(op_type, names, outs, **args)])
    workspace.current().run(net, backend=backend)
    return [workspace.FetchBlob(o) for o in outs]


def test_sparse_to_dense_mask_with_lengths_is_caffe2s(backend):
    out, present = _op(backend, "SparseToDenseMask", [IDS, VALS, np.array([-1, -2], f32), np.array([3, 0, 6], np.int32)],
                       ["o", "p"], mask=MASK, return_presence_mask=True)
    # row 2 holds id 2 twice (rows 4 and 6 of VALS): the last wins, as in Caffe2
    want = [[[-1, -2], [0, 1], [4, 5], [-1, -2]], [[-1, -2]] * 4, [[10, 11], [12, 13], [16, 17], [-1, -2]]]
    assert out.dtype == f32 and out.tolist() == want
    assert present.tolist() == [[False, True, True, False], [False] * 4, [True, True, True, False]]


def test_sparse_to_dense_mask_without_lengths_and_of_strings(backend):
    (out,) = _op(backend, "SparseToDenseMask", [np.array([2, 4, 6], np.int32), np.array([0, 2, 4], f32),
                                                 np.array(7, f32)], ["o"], mask=[6, 1, 2])
    assert out.tolist() == [4.0, 7.0, 0.0]
    (out,) = _op("interp", "SparseToDenseMask", [np.array([5, 3, 5], np.int32), np.array([b"a", b"b", b"c"], object),
                                                 np.array(b"z", object), np.array([1, 2], np.int32)], ["o"], mask=[5, 3])
    assert out.tolist() == [[b"a", b"z"], [b"c", b"b"]]


def test_sparse_to_dense_mask_gradient_is_caffe2s(backend):
    for name, v in (("ids", IDS), ("vals", VALS), ("d", np.array([-1, -2], f32)), ("len", np.array([3, 0, 6], np.int32)),
                    ("w", np.arange(24, dtype=f32).reshape(3, 4, 2))):
        workspace.FeedBlob(name, v)
    net = core.Net("g")
    y = net.SparseToDenseMask(["ids", "vals", "d", "len"], ["Y"], mask=MASK)
    net.AddGradientOperators([net.SumElements([net.Mul([y, "w"], "yw")], "loss")])
    workspace.current().run(net, backend=backend)
    # each value gets w at its (row, column); ids outside the mask, shadowed repeats and -1 get 0
    assert workspace.FetchBlob("vals_grad").tolist() == [[2, 3], [0, 0], [4, 5], [0, 0], [0, 0], [16, 17], [18, 19],
                                                         [0, 0], [20, 21]]


def test_too_many_negative_ids_is_an_error():
    with pytest.raises(DSLError, match="3 negative ids, not fewer than max_skipped_indices=3"):
        _op("interp", "SparseToDenseMask", [np.array([-1, -2, -3, 1], np.int32), np.ones(4, f32), np.array(0, f32)],
            ["o"], mask=[1], max_skipped_indices=3)
    with pytest.raises(DSLError, match="mask repeats an id"):
        _op("interp", "SparseToDenseMask", [np.array([1], np.int32), np.ones(1, f32), np.array(0, f32)], ["o"], mask=[1, 1])


_RS = np.random.RandomState(5)  # (one stream: X64's draws, then X32's)
X64 = np.concatenate([_RS.randint(-2**62, 2**62, size=6, dtype=np.int64),
                      np.array([0, 1, -1, 255, 256, 2**63 - 1, -2**63], np.int64)])
X32 = np.concatenate([_RS.randint(-2**31, 2**31 - 1, size=6).astype(np.int32),
                      np.array([0, 1, -1, 128, -129, 2**31 - 1], np.int32)])
HASHES = [  # (ids, seed, modulo, Caffe2's IndexHash)
    (X64, 0, 100, [94, 20, 24, 41, 99, 82, 0, 29, 88, 71, 77, 16, 72]),
    (X64, 7, 1000003, [215191, 544108, 80320, 995337, 857801, 270422, 869150, 459604, 408975, 278693, 343714, 409103,
                       869022]),
    (X64, -3, 2**31 - 1, [1144437386, 577151422, 1684392474, 1250735805, 581804487, 293443446, 1102034368, 1107080683,
                          1091024200, 1096988053, 1105049055, 1091024328, 1102034240]),
    (X32, 0, 100, [38, 72, 51, 62, 15, 3, 0, 9, 80, 48, 32, 8]),
    (X32, 7, 1000003, [463953, 914258, 998233, 447793, 720013, 297619, 739313, 935922, 346093, 573436, 511970, 346221]),
]


@pytest.mark.parametrize("case", range(len(HASHES)))
def test_index_hash_is_caffe2s_bit_for_bit(backend, case):
    ids, seed, modulo, want = HASHES[case]
    (got,) = _op(backend, "IndexHash", [ids], ["h"], seed=seed, modulo=modulo)
    assert got.dtype == ids.dtype and got.tolist() == want


def test_mod_follows_the_dividend_or_the_divisor(backend):
    x = np.array([-7, -5, 0, 3, 12, -12], np.int32)
    assert _op(backend, "Mod", [x], ["y"], divisor=5)[0].tolist() == [-2, 0, 0, 3, 2, -2]
    assert _op(backend, "Mod", [x], ["y"], divisor=5, sign_follow_divisor=1)[0].tolist() == [3, 0, 0, 3, 2, 3]


def _spec(kind, ids):
    return schema.FeatureSpec(feature_type=kind, feature_ids=ids, feature_names=[str(i) for i in ids])


def test_feature_layers_give_caffe2s_records(backend):
    """FeatureSparseToDense over float / id-list / id-score-list feature maps, SparseFeatureHash
    hashing and divide-mod of an IdList: the op list and every output read off Caffe2."""
    limit = schema.Metadata(categorical_limit=1000)
    m = LayerModelHelper("m", schema.Struct(
        ("floats", schema.Map(np.int32, np.float32)),
        ("idl", schema.Map(np.int32, schema.List(np.int64))),
        ("isl", schema.Map(np.int32, schema.Map(np.int64, np.float32))),
        ("ids", schema.List(schema.Scalar(np.int64, metadata=limit)))), schema.Struct())
    f = m.input_feature_schema
    dense = m.FeatureSparseToDense(schema.Struct(("floats", f.floats), ("idl", f.idl), ("isl", f.isl)),
                                   [("floats", _spec("FLOAT", [1, 3, 5])), ("idl", _spec("ID_LIST", [7, 8])),
                                    ("isl", _spec("ID_SCORE_LIST", [9, 4]))])
    hashed = m.SparseFeatureHash(f.ids, modulo=50, seed=3)
    moded = m.SparseFeatureHash(f.ids, modulo=50, use_hashing=False, use_divide_mod=True, divisor=7)
    assert hashed.items.metadata.categorical_limit == 50
    m.output_schema = schema.Struct(("dense", dense), ("hashed", hashed), ("moded", moded))
    init, train = lmi.generate_training_nets_forward_only(m)
    assert [op.type for op in train.Proto().op] == [
        "SparseToDenseMask", "LengthsToRanges", "SparseToDenseMask", "Alias", "LengthsToRanges", "SparseToDenseMask",
        "Alias", "Alias", "Copy", "IndexHash", "Copy", "Div", "Mod"]
    i32, i64 = np.int32, np.int64
    schema.FeedRecord(f, [
        np.array([2, 1], i32), np.array([5, 1, 3], i32), np.array([1.5, 2.5, 3.5], f32),
        np.array([1, 2], i32), np.array([8, 7, 9], i32), np.array([2, 0, 3], i32), np.arange(10, 15, dtype=i64),
        np.array([2, 1], i32), np.array([9, 4, 9], i32), np.array([1, 2, 1], i32), np.arange(20, 24, dtype=i64),
        np.array([0.1, 0.2, 0.3, 0.4], f32),
        np.array([3, 2], i32), np.array([123456789, -5, 77, 1000, 999], i64)])
    workspace.current().run(init, backend=backend)
    workspace.current().run(train, backend=backend)

    def got(record):
        return [workspace.FetchBlob(b).tolist() for b in record.field_blobs()]
    assert got(dense)[:5] == [[[2.5, 0.0, 1.5], [0.0, 3.5, 0.0]], [[[0, 0], [0, 2]], [[2, 0], [0, 0]]],
                              [10, 11, 12, 13, 14], [[[0, 1], [1, 2]], [[3, 1], [0, 0]]], [20, 21, 22, 23]]
    assert got(hashed) == [[3, 2], [31, 15, 26, 28, 49]]
    assert got(moded) == [[3, 2], [34, 0, 11, 42, 42]]  # (-5 // 7 truncates to 0, as C does)
