"""Op creation: the Builder's unchecked shortcuts agree with make_op, and remembered
type inference never answers for different attributes or counts."""
from __future__ import annotations

import numpy as np
import pytest

from dslc.ir import Builder, Region, Symbol, make_op
from dslc.ir.diagnostics import Location, VerifyError
from dslc.ir.types import TensorType

LOC = Location("job.py", 3)


def _const(b: Builder, value):
    arr = np.asarray(value)
    arr.setflags(write=False)
    return b.const(arr, LOC)


def _same(op, want) -> None:
    """``op`` is what make_op builds: declaration, operands, attributes (in order), types."""
    assert op.opdef is want.opdef
    assert op.operands == want.operands
    assert list(op.attrs.items()) == list(want.attrs.items())
    assert [r.type for r in op.results] == [r.type for r in want.results]
    assert [r.hint for r in op.results] == [r.hint for r in want.results]
    assert op.loc == want.loc


def test_builder_shortcuts_make_what_make_op_makes():
    region = Region()
    b = Builder(region)
    x = _const(b, np.arange(3, dtype=np.float32))
    _same(x.owner, make_op("Const", attrs={"value": x.owner.attrs["value"]}, loc=LOC))
    store = b.store(x, "w", LOC)
    _same(store, make_op("store", [x], {"blob": "w"}, loc=LOC))
    t = TensorType("f32", (3,))
    y = b.load("w", t, LOC, "w")
    _same(y.owner, make_op("load", attrs={"blob": "w"}, result_types=[t], loc=LOC, hints=["w"]))
    assert [op.parent for op in region.ops] == [region] * 3
    assert next(iter(x.uses)) == (store, 0)  # (make_op's store above is its second use)
    assert type(store.attrs["blob"]) is Symbol and type(y.owner.attrs["blob"]) is Symbol


def test_remembered_inference_tells_default_attributes_from_given_ones():
    # ConstantFill's dtype decides its type: the defaults give f32, dtype=10 (INT64) i64
    f32, i64 = TensorType("f32", ()), TensorType("i64", ())
    for _ in range(2):  # the second round answers from the table
        assert make_op("ConstantFill").result.type == f32
        assert make_op("ConstantFill", attrs={"dtype": 10}).result.type == i64
        assert make_op("ConstantFill", attrs={}).result.type == f32


def test_remembered_inference_still_checks_the_counts():
    b = Builder(Region())
    x = _const(b, 1.0)
    assert make_op("Add", [x, x]).result.type == x.type  # remembered for two operands, one result
    for _ in range(2):
        with pytest.raises(VerifyError, match="Add takes 2 inputs, got 1"):
            make_op("Add", [x])
        with pytest.raises(VerifyError, match="Add produces 1 output, got 2"):
            make_op("Add", [x, x], n_results=2)


def test_make_op_checks_the_arity_of_ops_without_inference():
    # (verify trusts built ops for it: lowering's module is verified with built=True)
    b = Builder(Region())
    x = _const(b, 1.0)
    with pytest.raises(VerifyError, match="load takes 0 inputs, got 1") as e:
        make_op("load", [x], {"blob": "w"}, result_types=[x.type], loc=LOC)
    assert e.value.loc == LOC
