"""Record algebra (Struct + / -), ListWithEvicted, core type codes, and which errors are TypeErrors."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from dslc import core
from dslc.ir.diagnostics import DSLError
from dslc.schema import (List, ListWithEvicted, Scalar, Struct, from_blob_list, from_column_list,
                         dtype_for_core_type, data_type_for_dtype)


def test_subtraction_removes_common_fields_recursively_and_drops_empty_structs():
    s1 = Struct(("a", np.int32), ("b", Struct(("c", np.int32), ("d", np.float32))), ("e", np.int64))
    assert (s1 - Struct(("a", np.int32))).field_names() == ["b:c", "b:d", "e"]
    assert (s1 - Struct(("b", Struct(("d", np.float32))))).field_names() == ["a", "b:c", "e"]
    assert (s1 - Struct(("b", Struct(("c", np.int32), ("d", np.float32))))).field_names() == ["a", "e"]
    assert (s1 - Struct(("zz", np.int32))).field_names() == ["a", "b:c", "b:d", "e"]
    assert (s1 - s1).field_names() == []


def test_subtracting_a_field_of_another_kind_is_a_located_type_error():
    s1 = Struct(("a", np.int32), ("b", Struct(("c", np.int32))))
    with pytest.raises(TypeError) as e:
        s1 - Struct(("b", np.int32))
    assert isinstance(e.value, DSLError) and "test_schema_algebra.py" in str(e.value)
    with pytest.raises(TypeError):
        s1 - Scalar(np.int32)


def test_merging_a_struct_with_a_scalar_of_one_name_is_a_type_error():
    s1 = Struct(("a", np.int32), ("b", Struct(("c", np.int32))))
    with pytest.raises(TypeError, match="cannot merge"):
        s1 + Struct(("b", np.int32))
    with pytest.raises(TypeError):
        s1 + s1  # 'a' is a Scalar on both sides
    # a nested name landing on an existing leaf merges the same way
    with pytest.raises(TypeError):
        Struct(("b", Struct(("c", np.int32))), ("b:c:d", np.int32))
    # two leaves of one name given to the constructor stay a ValueError, as in Caffe2
    with pytest.raises(ValueError):
        Struct(("a", np.int32), ("a", np.int32))
    assert (s1 + Struct(("b", Struct(("x", np.float32))))).field_names() == ["a", "b:c", "b:x"]


def test_assigning_to_a_built_struct_is_a_located_type_error():
    s = Struct(("a", np.int32))
    with pytest.raises(TypeError) as e:
        s.a = Scalar(np.int64)
    assert isinstance(e.value, DSLError) and "test_schema_algebra.py" in str(e.value)
    assert s.a.dtype == np.int32


def test_untyped_scalar_with_a_shape_is_a_type_error():
    with pytest.raises(TypeError, match="np.void"):
        Scalar((np.void, (2,)))
    assert Scalar((np.float32, (2,))).field_type().shape == (2,)
    assert Scalar(np.void) == Scalar(None)


def test_list_with_evicted_has_a_trailing_int64_leaf():
    lst = ListWithEvicted(Scalar(np.float32))
    assert lst.field_names() == ["lengths", "values", "_evicted_values"]
    assert lst.field_types() == [np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.int64)]
    rec = Struct(("x", np.int32), ("l", lst))
    assert rec.field_names() == ["x", "l:lengths", "l:values", "l:_evicted_values"]
    assert rec["l:_evicted_values"] is rec.l._evicted_values
    assert rec.l._evicted_values.id() == 3 and rec.l.value.id() == 2
    with pytest.raises(KeyError):
        rec["l:nothing"]


def test_list_with_evicted_clones_fills_and_rebuilds_from_columns():
    class Mine(ListWithEvicted):
        pass

    lst = Mine(Scalar(np.float32))
    copy = lst.clone()
    assert type(copy) is Mine and copy == lst and copy is not lst
    filled = from_blob_list(lst, [np.array([2], np.int32), np.array([1.5, 2.5], np.float32),
                                  np.array([7], np.int64)])
    assert filled._evicted_values.get().tolist() == [7]
    assert filled.value.get().tolist() == [1.5, 2.5]
    back = from_column_list(Struct(("l", lst)).field_names())
    assert isinstance(back.l, ListWithEvicted)
    again = pickle.loads(pickle.dumps(Struct(("l", ListWithEvicted(Scalar(np.float32))))))
    assert again.field_names() == ["l:lengths", "l:values", "l:_evicted_values"]


def test_plain_list_has_no_evicted_leaf():
    with pytest.raises(AttributeError):
        List(Scalar(np.float32))._evicted_values


@pytest.mark.parametrize("code, np_type", [(core.DataType.FLOAT, np.float32), (core.DataType.FLOAT16, np.float16),
                                           (core.DataType.INT64, np.int64), (core.DataType.BOOL, np.bool_),
                                           (core.DataType.DOUBLE, np.float64), (core.DataType.UINT8, np.uint8)])
def test_core_type_codes_map_to_numpy_and_back(code, np_type):
    assert dtype_for_core_type(code) == np_type
    assert data_type_for_dtype(np.dtype(np_type)) == code


def test_unknown_core_type_and_dtype_are_located_type_errors():
    with pytest.raises(TypeError) as e:
        dtype_for_core_type(100)
    assert isinstance(e.value, DSLError)
    with pytest.raises(TypeError):
        data_type_for_dtype(np.dtype(np.complex64))
