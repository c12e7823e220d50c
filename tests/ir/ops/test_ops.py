"""Every declared operator, run through LocalSession and compared with numpy.

Expected values are computed here, by hand or with numpy, never read back from
dslc. Integers, bools and strings compare exactly, floats to rounding; dtypes and
shapes are checked too. Error tests find the offending line by its ``# @tag``
marker in this file's text.
"""
from __future__ import annotations

import io
import threading
import warnings

import numpy as np
import pytest

from dslc import core, workspace
from dslc.backends.interp.kernels import KERNELS
from dslc.ir import OPS
from dslc.ir.diagnostics import (DSLTypeError, ExecutionError, UnknownOperatorError,
                                 VerifyError)
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, final_output
from markers import Markers

DT = core.DataType

# ----------------------------------------------------------------------------- helpers

MARKERS = Markers(__file__)
line_of, assert_error_at = MARKERS.line_of, MARKERS.assert_error_at


@pytest.fixture(params=["none", "default"])
def session(backend, request):
    """Each test runs unoptimised (the kernels compute) and optimised (constants fold)."""
    with LocalSession(backend=backend, passes=request.param) as s:
        yield s


def run(session, build):
    """Run ``build()`` in a Task; return the fetched value of each blob it returns."""
    with Task() as task:
        blobs = build()
        single = not isinstance(blobs, (list, tuple))
        outs = [final_output(b) for b in ([blobs] if single else blobs)]
    session.run(task)
    values = [o.fetch() for o in outs]
    return values[0] if single else values


def const(x):
    """A constant of exactly ``x``'s dtype (Const turns float64 into float32, as Caffe2 does)."""
    if x.dtype == np.float64:
        return ops.GivenTensorDoubleFill([], 1, shape=list(x.shape), values=x.reshape(-1).tolist())
    return ops.Const(x)


def check(got, want) -> None:
    """``got`` has ``want``'s shape and dtype, and its values (floats up to rounding)."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype == object:  # (strings fetch as bytes, as Caffe2 gives them)
        want = np.array([w.encode() if isinstance(w, str) else w for w in want.reshape(-1)],
                        dtype=object).reshape(want.shape)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


class Calls:
    """A Python-op function that counts its calls (to show that nothing ran)."""

    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self, inputs, outputs):
        with self.lock:
            self.n += 1


def test_every_pure_tensor_op_has_a_fold():
    pure = [d for d in OPS if d.module.endswith(".tensor") and d.is_pure and d.name != "Const"]
    assert len(pure) > 25
    assert [d.name for d in pure if d.fold is None] == []


def test_folding_happens_in_the_default_pipeline(backend):
    ir = io.StringIO()
    with Task() as task:
        out = final_output(ops.Div([ops.Const([7, -7]), ops.Const(2)]))
    with LocalSession(backend=backend, passes="default", print_after={"fold-constants"}, ir_out=ir) as s:
        s.run(task)
    check(out.fetch(), np.array([3, -3], np.int64))
    assert "dense<i64[2]: 3, -3>" in ir.getvalue() and "Div(" not in ir.getvalue()


def test_every_tensor_and_effect_op_has_an_interp_kernel():
    declared = {d.name for d in OPS if d.module.endswith((".tensor", ".effects"))}
    assert len(declared) > 40
    assert declared <= set(KERNELS), sorted(declared - set(KERNELS))


# ----------------------------------------------------------------------------- Const


@pytest.mark.parametrize("value, want", [
    (5, np.array(5, np.int64)),                             # a Python int is int64
    (-3, np.array(-3, np.int64)),
    (0.5, np.array(0.5, np.float32)),                       # a Python float becomes float32
    (True, np.array(True)),                                 # ConstantFill BOOL
    (False, np.array(False)),
    ([100], np.array([100], np.int64)),
    ([1.5, 2.5], np.array([1.5, 2.5], np.float32)),
    ([[1, 2], [3, 4]], np.array([[1, 2], [3, 4]], np.int64)),
    (np.array([1, 2], np.int32), np.array([1, 2], np.int32)),      # GivenTensorIntFill
    (np.array([1, 2], np.int16), np.array([1, 2], np.float32)),    # other ints: GivenTensorFill
    (np.array([1.25, 2.0], np.float64), np.array([1.25, 2.0], np.float32)),  # GivenTensorFill
    (np.array([True, False]), np.array([True, False])),            # GivenTensorBoolFill
    (np.int64(7), np.array(7, np.int64)),
    (["a", "bc"], np.array(["a", "bc"], dtype=object)),            # GivenTensorStringFill
])
def test_const_values_and_dtypes(session, value, want):
    check(run(session, lambda: ops.Const(value)), want)


def test_const_string_scalar(session):
    assert run(session, lambda: ops.Const("hello")) == b"hello"  # (bytes, as Caffe2 fetches strings)


def test_const_with_dtype(session):
    got = run(session, lambda: [ops.Const([1, 2], dtype=np.int32), ops.Const([1, 2], dtype=np.float64)])
    check(got[0], np.array([1, 2], np.int32))
    check(got[1], np.array([1.0, 2.0], np.float32))  # float64 still goes through GivenTensorFill


def test_given_tensor_fills_spelled_directly(session):
    got = run(session, lambda: [
        ops.GivenTensorDoubleFill([], 1, shape=[2], values=[0.1, 0.2]),
        ops.GivenTensorFill([], 1, shape=[3], values=[1.0, 2.0, 3.0], dtype=DT.DOUBLE),
        ops.GivenTensorIntFill([], 1, shape=[2, 1], values=[4, 5]),
        ops.GivenTensorBoolFill([], 1, shape=[2], values=[True, False]),
    ])
    check(got[0], np.array([0.1, 0.2], np.float64))
    check(got[1], np.array([1.0, 2.0, 3.0], np.float64))
    check(got[2], np.array([[4], [5]], np.int32))
    check(got[3], np.array([True, False]))


@pytest.mark.parametrize("tag, make", [
    ("const-none", lambda: ops.Const(None)),  # @const-none
    ("const-huge", lambda: ops.Const(2 ** 70)),  # @const-huge
])
def test_const_of_something_that_is_no_tensor(session, tag, make):
    with Task() as task:
        make()
    with pytest.raises(VerifyError) as info:
        session.run(task)
    assert_error_at(info.value, tag, "must be strings")


def test_given_tensor_fill_values_must_fill_the_shape(session):
    with Task() as task:
        ops.GivenTensorInt64Fill([], 1, shape=[2, 2], values=[1, 2, 3])  # @short-fill
    with pytest.raises(VerifyError) as info:
        session.run(task)
    assert_error_at(info.value, "short-fill", "3 values", "[2, 2]")


# ----------------------------------------------------------------------------- ConstantFill


@pytest.mark.parametrize("kwargs, want", [
    ({}, np.array(0.0, np.float32)),                                   # FLOAT, scalar, 0
    ({"shape": [2, 3], "value": 2.5}, np.full((2, 3), 2.5, np.float32)),
    ({"shape": [2], "value": 3}, np.array([3, 3], np.int64)),          # int value -> INT64
    ({"shape": [2], "value": True}, np.array([1, 1], np.int64)),       # a bool arg is an int
    ({"shape": [2], "value": True, "dtype": DT.BOOL}, np.array([True, True])),
    ({"shape": [2], "value": 3, "dtype": DT.INT32}, np.array([3, 3], np.int32)),
    ({"shape": [2], "value": 1, "dtype": DT.DOUBLE}, np.array([1.0, 1.0], np.float64)),
    ({"shape": [1], "value": 7, "dtype": DT.INT16}, np.array([7], np.int16)),
    ({"shape": [1], "value": 7, "dtype": DT.UINT8}, np.array([7], np.uint8)),
    ({"shape": [2], "value": "x", "dtype": DT.STRING}, np.array(["x", "x"], dtype=object)),
    ({"shape": [0]}, np.zeros((0,), np.float32)),
])
def test_constant_fill_without_input(session, kwargs, want):
    check(run(session, lambda: ops.ConstantFill([], 1, **kwargs)), want)


def test_constant_fill_shape_from_input(session):
    def build():
        like = ops.Const([[1, 2, 3], [4, 5, 6]])
        return [ops.ConstantFill([like], 1, value=7),
                ops.ConstantFill([like], 1, value=0.5, extra_shape=[2]),
                ops.ConstantFill([like], 1, value=1, dtype=DT.INT32),
                ops.ConstantFill([ops.Const([2, 3])], 1, value=1.0, input_as_shape=1)]
    got = run(session, build)
    check(got[0], np.full((2, 3), 7, np.int64))
    check(got[1], np.full((2, 3, 2), 0.5, np.float32))
    check(got[2], np.ones((2, 3), np.int32))
    check(got[3], np.ones((2, 3), np.float32))


def test_constant_fill_string_value_needs_a_dtype(session):
    with Task() as task:
        ops.ConstantFill([], 1, shape=[2], value="x")  # @fill-str
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "fill-str", "ConstantFill", "'x'")
    assert "STRING" in info.value.hint


def test_constant_fill_shape_and_input_together(session):
    with Task() as task:
        ops.ConstantFill([ops.Const([1, 2])], 1, shape=[3])  # @fill-both
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "fill-both", "not both")


def test_constant_fill_fraction_into_an_int_tensor(session):
    with Task() as task:
        ops.ConstantFill([], 1, shape=[2], value=2.5, dtype=DT.INT32)  # @fill-frac
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "fill-frac", "2.5")


@pytest.mark.parametrize("tag, make", [
    ("fill-extra", lambda: ops.ConstantFill([], 1, shape=[2], extra_shape=[3])),  # @fill-extra
    ("given-extra", lambda: ops.GivenTensorFill([], 1, shape=[1], values=[1.0],  # @given-extra
                                                extra_shape=[3])),
])
def test_extra_shape_needs_an_input(session, tag, make):
    with Task() as task:
        make()
    with pytest.raises(VerifyError) as info:
        session.run(task)
    assert_error_at(info.value, tag, "extra_shape", "input")


def test_constant_fill_negative_dims_are_refused(session):
    with Task() as task:
        ops.ConstantFill([ops.Const([1, 2])], 1, extra_shape=[-1])  # @fill-neg
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "fill-neg", "extra_shape", "[-1]")


def test_constant_fill_negative_dim_from_an_input_fails_when_run(session):
    with Task() as task:
        dims = ops.Sub([ops.Const([2, 3]), ops.Const([0, 4])])
        ops.ConstantFill([dims], 1, input_as_shape=1)  # @fill-neg-input
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "fill-neg-input", "negative", "[2, -1]")


# ----------------------------------------------------------------------------- Copy


def test_copy_is_deep(session):
    def make(inputs, outputs):
        outputs[0].feed(np.array([1.0, 2.0, 3.0], np.float32))

    def clobber(inputs, outputs):
        inputs[0].data[...] = 0  # writes into the blob's own array

    def build():
        x = ops.Python(make)([], 1)
        y = ops.Copy([x])
        ops.Python(clobber)([x], [])
        return [x, y]
    x, y = run(session, build)
    check(x, np.zeros(3, np.float32))
    check(y, np.array([1.0, 2.0, 3.0], np.float32))


def test_copy_keeps_dtype_and_shape(session):
    got = run(session, lambda: [ops.Copy([ops.Const(np.arange(6, dtype=np.int32).reshape(2, 3))]),
                                ops.Copy([ops.Const("s")]), ops.Copy([ops.Const(True)])])
    check(got[0], np.arange(6, dtype=np.int32).reshape(2, 3))
    assert got[1] == b"s"  # (bytes, as Caffe2 fetches strings)
    check(got[2], np.array(True))


def test_copy_of_a_counter_is_a_type_error(session):
    with Task() as task:
        ops.Copy([ops.CreateCounter([], 1)])  # @copy-counter
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "copy-counter", "Copy", "counter")


# ----------------------------------------------------------------------------- arithmetic

A23 = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
NUMPY_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


@pytest.mark.parametrize("name", sorted(NUMPY_BINARY))
@pytest.mark.parametrize("a, b", [
    (np.int64(7), np.int64(-3)),                                       # scalars
    (A23, np.array([10, 20, 30], np.int64)),                           # (2,3) with (3,)
    (np.array([[1], [2]], np.int32), np.array([[10, 20, 30]], np.int32)),  # (2,1) with (1,3)
    (np.array([1.5, -2.25], np.float32), np.float32(0.5)),             # vector with scalar
])
def test_add_sub_mul_broadcast_like_numpy(session, name, a, b):
    got = run(session, lambda: getattr(ops, name)([ops.Const(a), ops.Const(b)]))
    check(got, NUMPY_BINARY[name](a, b))


@pytest.mark.parametrize("a_shape, b_shape, axis, aligned", [
    # ``aligned``: b reshaped by hand so that numpy lines it up where Caffe2 does
    ((2, 3, 4), (3,), 1, (3, 1)),          # b starts at a's dim 1
    ((2, 3), (2,), 0, (2, 1)),             # ... at a's dim 0
    ((2, 3, 4), (3, 4), -1, (3, 4)),       # axis -1: b matches a's last dims
    ((2, 3, 4), (4,), -1, (4,)),
    ((2, 3, 4), (1, 3), 0, (3, 1)),        # b's outer 1s are dropped: its 3 meets a's dim 1
    ((2, 3, 4), (3, 1), 1, (3, 1)),
])
def test_legacy_broadcast_with_axis(session, a_shape, b_shape, axis, aligned):
    a = np.arange(np.prod(a_shape), dtype=np.int64).reshape(a_shape)
    b = (np.arange(np.prod(b_shape), dtype=np.int64) + 1).reshape(b_shape) * 100
    b_al = b.reshape(aligned)
    got = run(session, lambda: [ops.Add([ops.Const(a), ops.Const(b)], broadcast=1, axis=axis),
                                ops.Mul([ops.Const(a), ops.Const(b)], broadcast=1, axis=axis),
                                ops.GT([ops.Const(a), ops.Const(b)], broadcast=1, axis=axis)])
    check(got[0], a + b_al)
    check(got[1], a * b_al)
    check(got[2], a > b_al)
    assert got[0].shape == a_shape  # the result always has the first operand's shape


def test_legacy_broadcast_without_axis_matches_the_suffix(session):
    got = run(session, lambda: ops.Sub([ops.Const(A23), ops.Const([1, 1, 2])], broadcast=1))
    check(got, np.array([[0, 1, 1], [3, 4, 4]], np.int64))


def test_legacy_broadcast_mismatch_is_a_type_error(session):
    with Task() as task:
        ops.Add([ops.Const(A23), ops.Const([1, 2])], broadcast=1)  # @legacy-mismatch
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "legacy-mismatch", "broadcast=1", "[2]", "[2, 3]")


def test_legacy_broadcast_second_operand_bigger(session):
    with Task() as task:
        ops.Add([ops.Const([1, 2]), ops.Const(A23)], broadcast=1, axis=0)  # @legacy-rank
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "legacy-rank", "rank")


def test_numpy_broadcast_mismatch_is_a_type_error(session):
    with Task() as task:
        ops.Mul([ops.Const(A23), ops.Const([1, 2])])  # @np-mismatch
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "np-mismatch", "broadcast", "[2, 3]", "[2]")


def test_integer_div_truncates_toward_zero(session):
    a = [7, -7, 7, -7, 6, -1, 0]
    b = [2, 2, -2, -2, 3, 5, -4]
    c_style = [int(x / y) for x, y in zip(a, b)]  # int() of the quotient drops the fraction
    got = run(session, lambda: [ops.Div([ops.Const(a), ops.Const(b)]),
                                ops.Div([ops.Const(np.array(a, np.int32)), ops.Const(np.array(b, np.int32))]),
                                ops.Div([ops.Const(-9), ops.Const(4)])])
    check(got[0], np.array(c_style, np.int64))
    check(got[1], np.array(c_style, np.int32))
    check(got[2], np.array(-2, np.int64))


def test_integer_div_broadcasts_and_legacy_broadcasts(session):
    got = run(session, lambda: [ops.Div([ops.Const(A23 * 10), ops.Const([3, -4, 7])]),
                                ops.Div([ops.Const(A23 * 10), ops.Const([3, -4])], broadcast=1, axis=0)])
    check(got[0], np.array([[3, -5, 4], [13, -12, 8]], np.int64))
    check(got[1], np.array([[3, 6, 10], [-10, -12, -15]], np.int64))


def test_float_div(session):
    a, b = np.array([7.0, -1.0, 1.0], np.float32), np.array([2.0, 3.0, -8.0], np.float32)
    check(run(session, lambda: ops.Div([ops.Const(a), ops.Const(b)])), a / b)


def test_integer_division_by_zero_is_a_clear_error(session):
    with Task() as task:
        ops.Div([ops.Const([4, 5]), ops.Const([1, 0])])  # @div-zero
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "div-zero", "division by zero")


def test_overflow_wraps_and_float_limits_are_ieee_without_warnings(session):
    """As in Caffe2's C++ kernels: int64 wraps around, float overflow and x/0 give inf/nan."""
    big = np.array([2**62, -2**62, 5], np.int64)
    # the wrapped answers, by hand: 2**62 + 2**62 = 2**63 -> -2**63; (-2**63) * 3 -> -2**63 (mod 2**64)
    wrapped_sum = np.array([-2**63, -2**63, 10], np.int64)
    wrapped_mul = np.array([-2**63, -2**63, 30], np.int64)
    x = np.array([1.0, -1.0, 0.0], np.float32)
    zero = np.zeros(3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any RuntimeWarning from numpy fails the test
        got = run(session, lambda: [
            ops.Add([ops.Const(big), ops.Const(big)]),
            ops.Mul([ops.Add([ops.Const(big), ops.Const(big)]), ops.Const(np.int64(3))]),
            ops.Div([ops.Const(x), ops.Const(zero)]),
            ops.Exp([ops.Const(np.array([1000.0], np.float32))])])
    check(got[0], wrapped_sum)
    check(got[1], wrapped_mul)
    assert got[2][0] == np.inf and got[2][1] == -np.inf and np.isnan(got[2][2])
    assert got[3].dtype == np.float32 and got[3][0] == np.inf


def test_python_op_functions_keep_numpy_warnings(session):
    """The user's own numpy code inside a Python op warns as it would in plain Python."""
    def inverse(inputs, outputs):
        outputs[0].feed(np.float32(1.0) / inputs[0].data)

    with pytest.warns(RuntimeWarning, match="divide by zero"):
        got = run(session, lambda: ops.Python(inverse)([ops.Const(np.float32(0.0))], 1))
    assert got == np.inf


@pytest.mark.parametrize("name, fn, x", [
    ("Negative", np.negative, np.array([1, -2, 0], np.int64)),
    ("Negative", np.negative, np.array([1.5, -2.0], np.float32)),
    ("Abs", np.abs, np.array([3, -4], np.int32)),
    ("Abs", np.abs, np.array([-1.25, 2.0], np.float32)),
    ("Sqr", np.square, np.array([3, -4], np.int64)),
    ("Sqr", np.square, np.array([1.5, -0.5], np.float32)),
    ("Sqrt", np.sqrt, np.array([4.0, 2.0, 0.0], np.float32)),
    ("Sqrt", np.sqrt, np.array([9.0, 0.25], np.float64)),
    ("Exp", np.exp, np.array([0.0, 1.0, -2.0], np.float32)),
    ("Log", np.log, np.array([1.0, np.e, 10.0], np.float32)),
    ("Relu", lambda v: np.where(v > 0, v, 0).astype(v.dtype), np.array([-1.5, 0.0, 2.0], np.float32)),
    ("Relu", lambda v: np.where(v > 0, v, 0).astype(v.dtype), np.array([-3, 4], np.int64)),
])
def test_unary_math(session, name, fn, x):
    check(run(session, lambda: getattr(ops, name)([const(x)])), fn(x))


def test_unary_math_on_scalars(session):
    got = run(session, lambda: [ops.Negative([ops.Const(5)]), ops.Exp([ops.Const(1.0)]),
                                ops.Sqr([ops.Const(1.5)])])
    check(got[0], np.array(-5, np.int64))
    check(got[1], np.array(np.e, np.float32))
    check(got[2], np.array(2.25, np.float32))


def test_scale(session):
    x = np.array([1.0, -2.0, 4.0], np.float32)
    got = run(session, lambda: [ops.Scale([ops.Const(x)], scale=0.5), ops.Scale([ops.Const(x)]),
                                ops.Scale([ops.GivenTensorDoubleFill([], 1, shape=[1], values=[3.0])],
                                          scale=2.0)])
    check(got[0], np.array([0.5, -1.0, 2.0], np.float32))
    check(got[1], x)  # scale defaults to 1
    check(got[2], np.array([6.0], np.float64))


def test_sqrt_of_an_integer_is_a_type_error(session):
    with Task() as task:
        ops.Sqrt([ops.Const(4)])  # @sqrt-int
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "sqrt-int", "Sqrt", "float", "i64")
    assert "Cast" in info.value.hint and "FLOAT" in info.value.hint


@pytest.mark.parametrize("name, fn", [("Sum", np.add), ("Max", np.maximum), ("Min", np.minimum)])
def test_sum_max_min(session, name, fn):
    xs = [np.array([1, 5, -2], np.int64), np.array([3, 4, -7], np.int64), np.array([2, 9, 0], np.int64)]
    fs = [np.array([0.5, -1.0], np.float32), np.array([-0.25, 2.0], np.float32)]
    got = run(session, lambda: [getattr(ops, name)([ops.Const(x) for x in xs]),
                                getattr(ops, name)([ops.Const(x) for x in fs]),
                                getattr(ops, name)([ops.Const(xs[0])])])
    check(got[0], fn(fn(xs[0], xs[1]), xs[2]))
    check(got[1], fn(fs[0], fs[1]))
    check(got[2], xs[0])


def test_sum_does_not_broadcast(session):
    with Task() as task:
        ops.Sum([ops.Const([1, 2]), ops.Const([1, 2, 3])])  # @sum-shapes
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "sum-shapes", "one shape")


# ----------------------------------------------------------------------------- comparisons, logic

COMPARE = {"GE": np.greater_equal, "GT": np.greater, "LE": np.less_equal, "LT": np.less,
           "EQ": np.equal, "NE": np.not_equal}


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons(session, name):
    a = np.array([[1, 5, 3], [0, 2, 9]], np.int64)
    b = np.array([3, 5, 1], np.int64)
    f = np.array([0.5, -1.0], np.float32)
    got = run(session, lambda: [getattr(ops, name)([ops.Const(a), ops.Const(b)]),
                                getattr(ops, name)([ops.Const(f), ops.Const(np.float32(0.5))]),
                                getattr(ops, name)([ops.Const(2), ops.Const(2)]),
                                getattr(ops, name)([ops.Const("ab"), ops.Const("b")])])
    check(got[0], COMPARE[name](a, b))
    check(got[1], COMPARE[name](f, np.float32(0.5)))
    check(got[2], np.array(COMPARE[name](2, 2)))
    check(got[3], np.array(COMPARE[name]("ab", "b")))  # strings compare in dictionary order


def test_logic_ops(session):
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    got = run(session, lambda: [ops.And([ops.Const(p), ops.Const(q)]), ops.Or([ops.Const(p), ops.Const(q)]),
                                ops.Xor([ops.Const(p), ops.Const(q)]), ops.Not([ops.Const(p)]),
                                ops.Not([ops.Const(False)]),
                                ops.And([ops.Const(np.array([[True], [False]])), ops.Const(q)])])
    check(got[0], np.array([True, False, False, False]))
    check(got[1], np.array([True, True, True, False]))
    check(got[2], np.array([False, True, True, False]))
    check(got[3], np.array([False, False, True, True]))
    check(got[4], np.array(True))
    check(got[5], np.array([[True, False, True, False], [False] * 4]))


@pytest.mark.parametrize("p", [True, False])
@pytest.mark.parametrize("q", [True, False])
def test_logic_truth_tables_on_scalars(session, p, q):
    got = run(session, lambda: [ops.And([ops.Const(p), ops.Const(q)]), ops.Or([ops.Const(p), ops.Const(q)]),
                                ops.Xor([ops.Const(p), ops.Const(q)]), ops.Not([ops.Const(p)])])
    for g, want in zip(got, [p and q, p or q, p != q, not p]):
        assert isinstance(g, np.ndarray)  # a numpy bool in the workspace, not a Python bool
        check(g, np.array(want))


def test_string_comparisons_give_numpy_bools(session):
    got = run(session, lambda: [ops.EQ([ops.Const("a"), ops.Const("a")]),
                                ops.LT([ops.Const("b"), ops.Const("a")])])
    assert all(isinstance(g, np.ndarray) for g in got)
    check(got[0], np.array(True))
    check(got[1], np.array(False))


def test_logic_on_integers_is_a_type_error(session):
    with Task() as task:
        ops.And([ops.Const(1), ops.Const(0)])  # @and-int
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "and-int", "And", "bool", "i64")


# ----------------------------------------------------------------------------- Cast, IsEmpty


def test_cast(session):
    f = np.array([1.7, -1.7, 2.5, 0.0], np.float32)
    got = run(session, lambda: [
        ops.Cast([ops.Const(f)], to=DT.INT32),          # C++ static_cast truncates
        ops.Cast([ops.Const(f)], to=DT.BOOL),
        ops.Cast([ops.Const([1, -2])], to=DT.FLOAT),
        ops.Cast([ops.Const(np.array([True, False]))], to=DT.INT64),
        ops.Cast([ops.Const(3)], to=DT.DOUBLE),
        ops.Cast([ops.Const([300, 7])], to=DT.INT16),
        ops.Cast([ops.Const([1, 2])], to="float"),     # Caffe2 also takes the type's name
    ])
    check(got[0], np.array([1, -1, 2, 0], np.int32))
    check(got[1], np.array([True, True, True, False]))
    check(got[2], np.array([1.0, -2.0], np.float32))
    check(got[3], np.array([1, 0], np.int64))
    check(got[4], np.array(3.0, np.float64))
    check(got[5], np.array([300, 7], np.int16))
    check(got[6], np.array([1.0, 2.0], np.float32))


def test_cast_unknown_type_code(session):
    with Task() as task:
        ops.Cast([ops.Const(1)], to=99)  # @cast-99
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "cast-99", "99")


def test_cast_from_strings_is_refused(session):
    with Task() as task:
        ops.Cast([ops.Const(["1"])], to=DT.INT32)  # @cast-str
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "cast-str", "str")
    assert "Python op" in info.value.hint


def test_is_empty(session):
    got = run(session, lambda: [ops.IsEmpty([ops.Const(np.zeros((0,), np.int64))]),
                                ops.IsEmpty([ops.ConstantFill([], 1, shape=[2, 0])]),
                                ops.IsEmpty([ops.Const([1])]), ops.IsEmpty([ops.Const(0)])])
    for g, want in zip(got, [True, True, False, False]):
        check(g, np.array(want))


# ----------------------------------------------------------------------------- Print


def test_print_writes_to_the_session_log(backend):
    log = io.StringIO()
    with Task() as task:
        ops.Print(ops.Const([1, 2, 3], blob_out="x"), [])
        ops.Print(ops.Const("hi", blob_out="greeting"), [])
        with ops.loop(5):
            ops.Print(ops.Const(7, blob_out="seven"), [], every_n=2)
        ops.Print(ops.Const(list(range(10)), blob_out="ten"), [], limit=3)
    with LocalSession(log=log, backend=backend) as s:
        s.run(task)
    assert log.getvalue().splitlines() == [
        "x: [1 2 3]", "greeting: hi",
        "seven: 7", "seven: 7", "seven: 7",  # runs 1, 3 and 5 of 5
        "ten: [0 1 2 ...]",
    ]


def test_print_counts_every_n_per_instance(backend):
    log = io.StringIO()
    with Task(num_instances=4) as task:
        with ops.loop(3):
            ops.Print(ops.Const(5, blob_out="five"), [], every_n=2)
    with LocalSession(log=log, backend=backend) as s:
        s.run(task)
    assert log.getvalue().splitlines() == ["five: 5"] * 8  # runs 1 and 3 of each instance's 3


def test_print_to_file_writes_the_blobs_file(session, tmp_path, monkeypatch):
    # (issue 37: refused before; Caffe2's file format is in tests/runtime/test_log_files.py)
    monkeypatch.chdir(tmp_path)  # (the session's root folder is ".")
    with Task() as task:
        ops.Print(ops.Const(1, blob_out="one"), [], to_file=1)
    session.run(task)
    assert (tmp_path / "one.log").read_text() == "Tensor one of type long int. Dims: (): 1\n"


# ----------------------------------------------------------------------------- counters


def test_count_down_decrements_even_at_zero(session):
    def build():
        c = ops.CreateCounter([], init_count=2)
        downs = [ops.CountDown([c]) for _ in range(4)]
        return downs + [ops.RetrieveCount([c]), ops.CheckCounterDone([c])]
    *downs, count, done = run(session, build)
    for d, want in zip(downs, [False, False, True, True]):
        check(d, np.array(want))
    check(count, np.array(-2, np.int64))  # 2 - 4: it went negative
    check(done, np.array(True))


def test_count_up_gives_the_value_before(session):
    def build():
        c = ops.CreateCounter([], init_count=5)
        ups = [ops.CountUp([c]) for _ in range(3)]
        return ups + [ops.RetrieveCount([c]), ops.CheckCounterDone([c])]
    *ups, count, done = run(session, build)
    for u, want in zip(ups, [5, 6, 7]):
        check(u, np.array(want, np.int64))
    check(count, np.array(8, np.int64))
    check(done, np.array(False))


def test_reset_counter(session):
    def build():
        c = ops.CreateCounter([], init_count=3)
        ops.CountUp([c])
        prev = ops.ResetCounter([c], 1, init_count=10)
        after_reset = ops.RetrieveCount([c])
        ops.ResetCounter([c], [])  # no output; init_count defaults to 0
        return [prev, after_reset, ops.RetrieveCount([c]), ops.CheckCounterDone([c])]
    prev, after, zero, done = run(session, build)
    check(prev, np.array(4, np.int64))
    check(after, np.array(10, np.int64))
    check(zero, np.array(0, np.int64))
    check(done, np.array(True))


def test_counter_in_a_loop(session):
    def build():
        c = ops.CreateCounter([], init_count=3)
        trues = ops.Const(0)
        with ops.loop(5):
            with ops.If(ops.CountDown([c])):
                ops.Add([trues, ops.Const(1)], [trues])
        return [trues, ops.RetrieveCount([c])]
    trues, count = run(session, build)
    check(trues, np.array(2, np.int64))   # calls 4 and 5 find the count at <= 0
    check(count, np.array(-2, np.int64))


def test_negative_init_count_is_refused(session):
    with Task() as task:
        ops.CreateCounter([], init_count=-1)  # @neg-init
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "neg-init", "init_count", "-1")


def test_reset_to_a_negative_count_is_refused(session):
    with Task() as task:
        c = ops.CreateCounter([])
        ops.ResetCounter([c], [], init_count=-2)  # @neg-reset
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "neg-reset", "init_count", "-2")


def test_counter_op_on_a_tensor_is_a_type_error(session):
    with Task() as task:
        ops.CountUp([ops.Const(1)])  # @count-tensor
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "count-tensor", "CountUp", "counter")
    assert "CreateCounter" in info.value.hint


# ----------------------------------------------------------------------------- timers


def test_timer_get_and_end(session):
    def build():
        t = ops.TimerBegin([], ["tm"])
        first = ops.TimerGet([t])
        second = ops.TimerGetAndEnd([t])
        t2 = ops.TimerBegin([], ["tm2"])
        ops.TimerEnd([t2], [])
        return [first, second]
    first, second = run(session, build)
    assert np.asarray(first).dtype == np.int64 and np.shape(first) == ()
    assert np.asarray(second).dtype == np.int64 and np.shape(second) == (1,)
    assert 0 <= int(first) <= int(second[0]) < 10 ** 10  # nanoseconds, monotonic


def test_timer_restarts_in_a_loop_when_ended(session):
    def build():
        total = ops.Const(0)
        with ops.loop(3):
            t = ops.TimerBegin([], ["tm"])
            ops.Add([total, ops.TimerGetAndEnd([t])], [total])
        return total
    total = run(session, build)
    assert np.shape(total) == (1,) and total[0] >= 0


def test_timer_end_when_not_running(session):
    with Task() as task:
        t = ops.TimerBegin([], ["tm"])
        ops.TimerEnd([t], [])
        ops.TimerEnd([t], [])  # @end-twice
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "end-twice", "TimerEnd", "'tm'", "not running")


def test_timer_get_when_not_running(session):
    with Task() as task:
        t = ops.TimerBegin([], ["tm"])
        ops.TimerGetAndEnd([t])
        ops.TimerGet([t])  # @get-stopped
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "get-stopped", "TimerGet", "not running")


def test_timer_begin_when_already_running(session):
    with Task() as task:
        with ops.loop(2):
            ops.TimerBegin([], ["tm"])  # @begin-twice
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "begin-twice", "TimerBegin", "already running")


# ----------------------------------------------------------------------------- Python ops


def test_python_op_reads_data_and_feeds_outputs(session):
    def f(inputs, outputs):
        outputs[0].feed(inputs[0].data * 2 + inputs[1].data)
        outputs[1].feed(np.array(inputs[0].shape, np.int32))

    x = np.array([[1.5, 2.0], [0.0, -1.0]], np.float32)
    doubled, shape = run(session, lambda: list(ops.Python(f)([ops.Const(x), ops.Const(np.float32(1))], 2)))
    check(doubled, x * 2 + 1)
    check(shape, np.array([2, 2], np.int32))


def test_python_op_reshape_then_write_data(session):
    def f(inputs, outputs):
        outputs[0].reshape([2, 3])
        outputs[0].data[...] = np.arange(6).reshape(2, 3)
        outputs[1].init([2], DT.INT32)  # Caffe2's init takes a DataType code
        outputs[1].data[:] = [4, 5]

    a, b = run(session, lambda: list(ops.Python(f)([], 2)))
    check(a, np.arange(6, dtype=np.float32).reshape(2, 3))  # reshape allocates float32
    check(b, np.array([4, 5], np.int32))


def test_python_op_outputs_feed_later_ops(session):
    def f(inputs, outputs):
        outputs[0].feed(np.array([3, 4], np.int32))

    def build():
        y = ops.Python(f)([], 1)
        return ops.Mul([y, y])
    check(run(session, build), np.array([9, 16], np.int32))


def test_python_op_string_outputs(session):
    def f(inputs, outputs):
        outputs[0].feed([s.upper() for s in inputs[0].data])

    def build():
        up = ops.Python(f)([ops.Const(["ab", "c"])], 1)
        return [up, ops.EQ([up, ops.Const(["AB", "x"])])]
    up, same = run(session, build)
    check(up, np.array(["AB", "C"], dtype=object))
    check(same, np.array([True, False]))


def test_python_op_builder_tuple(session):
    built = []

    def builder(offset, scale=1):
        built.append((offset, scale))

        def fn(inputs, outputs):
            outputs[0].feed(inputs[0].data * scale + offset)
        return fn

    def build():
        x = ops.Const(2)
        with ops.loop(3):
            ops.Python((builder, [10], {"scale": 3}))([x], [x])
        return x
    check(run(session, build), np.array(((2 * 3 + 10) * 3 + 10) * 3 + 10, np.int64))
    assert built == [(10, 3)]  # built once for the one instance, called three times


def test_python_op_builder_runs_once_per_instance(session):
    built = []
    lock = threading.Lock()

    def builder():
        with lock:
            built.append(1)
        return lambda inputs, outputs: None

    with Task(num_instances=3) as task:
        with ops.loop(2):
            ops.Python((builder, [], {}))([], [])
    session.run(task)
    assert len(built) == 3


def test_python_op_with_the_workspace(session):
    seen = {}

    def f(inputs, outputs, ws):
        seen["has"] = (ws.has_blob("foo"), ws.has_blob("no_such_blob"))
        outputs[0].feed(ws.fetch_blob("foo") + 1)
        ws.feed_blob("fed", np.array(41))

    def build():
        ops.Const(5, blob_out="foo")
        got = ops.Python(f, pass_workspace=True)([], 1)
        return [got, ops.Add(["fed", ops.Const(1)])]
    got, fed = run(session, build)
    assert seen["has"] == (True, False)
    check(got, np.array(6, np.int64))
    check(fed, np.array(42, np.int64))


def test_python_op_reads_and_writes_blobs_through_ws_blobs(session):
    """Caffe2's ``ws.blobs`` is a mapping of blobs with fetch() and feed()."""
    seen = {}

    def f(inputs, outputs, ws):
        seen["in"] = ("foo" in ws.blobs, "no_such_blob" in ws.blobs, "foo" in list(ws.blobs))
        outputs[0].feed(ws.blobs["foo"].fetch() * 2)
        ws.blobs["foo"].feed(np.array(7))

    def build():
        ops.Const(5, blob_out="foo")
        got = ops.Python(f, pass_workspace=True)([], 1)
        return [got, ops.Add(["foo", ops.Const(1)])]
    got, foo = run(session, build)
    assert seen["in"] == (True, False, True)
    check(got, np.array(10, np.int64))
    check(foo, np.array(8, np.int64))


def test_python_op_exception_fails_the_op(session):
    def boom(inputs, outputs):
        raise ValueError("no good")

    with Task() as task:
        ops.Python(boom)([], [])  # @py-raise
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "py-raise", "ValueError", "no good")


def test_python_op_output_of_the_wrong_dtype_fails_where_used(session):
    def f(inputs, outputs):
        outputs[0].feed(np.array([1, 2], np.int32))

    with Task() as task:
        y = ops.Python(f)([], 1)
        ops.Add([y, ops.Const([0.5, 0.5])])  # @dyn-types
    with pytest.raises(ExecutionError) as info:
        session.run(task)
    assert_error_at(info.value, "dyn-types", "Add", "i32", "f32")


# ----------------------------------------------------------------------------- GetAllBlobNames


def test_get_all_blob_names_with_and_without_shared(session):
    workspace.FeedBlob("shared_blob", np.array(1))
    with TaskGroup() as tg:  # a group runs its tasks in a child workspace of the session's
        with Task():
            ops.Const(1, blob_out="local_a")
            every = final_output(ops.GetAllBlobNames([], ["all_names"]))
            mine = final_output(ops.GetAllBlobNames([], ["my_names"], include_shared=False))
    session.run(tg)
    # task outputs are created in the session's workspace first, so they are shared ones
    check(mine.fetch(), np.array(["local_a"], dtype=object))
    check(every.fetch(), np.array(["local_a", "all_names", "my_names", "shared_blob"], dtype=object))


def test_get_all_blob_names_in_the_root(session):
    workspace.FeedBlob("b_blob", np.array(1))
    workspace.FeedBlob("a_blob", np.array(2))
    names = run(session, lambda: ops.GetAllBlobNames([], ["names"], include_shared=False))
    assert list(names) == sorted([b"a_blob", b"b_blob", b"names"])  # (bytes, as Caffe2 fetches strings)


# ----------------------------------------------------------------------------- verifier errors


def test_incompatible_dtypes_are_caught_before_running(session):
    ran = Calls()
    with Task() as task:
        ops.Python(ran)([], [])
        ops.Add([ops.Const(1), ops.Const(0.5)])  # @add-i64-f32
    with pytest.raises(DSLTypeError) as info:
        session.run(task)
    assert_error_at(info.value, "add-i64-f32", "Add", "i64", "f32")
    assert "Cast" in info.value.hint
    assert ran.n == 0


def test_wrong_number_of_inputs_before_running(session):
    ran = Calls()
    with Task() as task:
        ops.Python(ran)([], [])
        ops.Sub([ops.Const(1), ops.Const(2), ops.Const(3)])  # @sub-3
    with pytest.raises(VerifyError) as info:
        session.run(task)
    assert_error_at(info.value, "sub-3", "Sub takes 2 inputs, got 3")
    assert "2 blobs" in info.value.hint
    assert ran.n == 0


def test_unknown_argument_names_suggest_the_right_one(session, monkeypatch):
    from dslc.ir import diagnostics
    monkeypatch.setattr(diagnostics, "_warned", set())
    ran = Calls()
    with Task() as task:
        ops.Python(ran)([], [])
        ops.Add([ops.Const(1), ops.Const(2)], brodcast=1)  # @bad-arg
    # (Caffe2 runs it, ignoring the argument: so does dslc, warning at its line, issue 37)
    with pytest.warns(UserWarning, match="did you mean 'broadcast'"):
        session.run(task)
    assert ran.n == 1


@pytest.mark.parametrize("tag, make, words", [
    # the error names the line of the call itself, which here is in the lambda
    ("kind-scale", lambda: ops.Scale([ops.Const([1.0])], scale="half"),  # @kind-scale
     ["Scale", "'scale'", "a number"]),
    ("kind-init", lambda: ops.CreateCounter([], init_count=1.5),  # @kind-init
     ["'init_count'", "an int"]),
    ("kind-name", lambda: ops.TimerBegin([], counter_name=5),  # @kind-name
     ["'counter_name'", "a string"]),
    ("kind-axis", lambda: ops.Add([ops.Const(1), ops.Const(2)], axis="last"),  # @kind-axis
     ["'axis'", "an int"]),
])
def test_argument_values_of_the_wrong_kind(session, tag, make, words):
    with Task() as task:
        make()
    with pytest.raises(VerifyError) as info:
        session.run(task)
    assert_error_at(info.value, tag, *words)


def test_unknown_argument_of_an_op_without_arguments_is_ignored_with_a_warning(session, monkeypatch):
    # Caffe2 ignores an argument an op does not read; dslc too, warning at the line
    from dslc.ir import diagnostics
    monkeypatch.setattr(diagnostics, "_warned", set())  # (each line warns once per process)
    with Task() as task:
        out = ops.Copy([ops.Const(1)], colour="red")  # @arg-none
        task.add_output(out)
    with pytest.warns(UserWarning, match="Copy does not read the argument 'colour'") as caught:
        session.run(task)
    assert task.outputs()[0].fetch() == 1
    assert any(w.filename.endswith("test_ops.py") and w.lineno == line_of("arg-none") for w in caught)


@pytest.mark.parametrize("name, close", [("Substract", "Sub"), ("Multiply", "Mul"),
                                         ("constantfill", "ConstantFill"), ("CountDwn", "CountDown"),
                                         ("Maximum", "Max")])
def test_unknown_operator_names_suggest_close_ones(name, close):
    with Task():
        with pytest.raises(UnknownOperatorError) as info:
            getattr(ops, name)  # @unknown-op
    assert_error_at(info.value, "unknown-op", name)
    assert f"'{close}'" in info.value.hint


def test_python_op_builder_of_a_created_net_runs_once_for_its_runs():
    """As Caffe2 builds it when CreateNet makes the op: the function it returns keeps its
    state across RunNet calls (here a count of the calls, 0, 1, 2)."""
    from dslc import core, workspace
    built, seen = [], []

    def builder():
        calls = [0]
        built.append(1)

        def fn(inputs, outputs):
            seen.append(calls[0])
            calls[0] += 1
        return fn

    net = core.Net("counted")
    net.Python((builder, [], {}))([], [])
    workspace.CreateNet(net)
    for _ in range(3):
        workspace.RunNet(net)
    assert built == [1] and seen == [0, 1, 2]


def test_a_python_op_output_left_unset_holds_nothing():
    """Caffe2 leaves such an output an uninitialized tensor; fetching it is an error here too."""
    from dslc import core, workspace
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.array([1.0], np.float32))
    workspace.RunOperatorOnce(core.CreatePythonOperator(lambda inputs, outputs: None, ["x"], ["y"]))
    assert workspace.HasBlob("y")
    with pytest.raises(RuntimeError, match="holds nothing|no value"):
        workspace.FetchBlob("y")
