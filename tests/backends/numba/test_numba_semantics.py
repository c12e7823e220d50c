"""Compiled kernels compute what the interpreter computes, class by class (issue 14).

Each program runs on both backends, with the default pipeline (which lets numba
compile its loops: the test checks that a compiled function really ran) and with
no passes, and must give values computed here independently: plain numpy with
explicit dtypes, or Python ints wrapped by hand. The classes: loops whose carried
values change before a stop_if (numba hung), float division by zero (IEEE, not an
exception), every integer width wrapping in its own width, int64 overflow wrapping
(not undefined), negative loop counts (a located error), and numpy's NaN and
signed-zero rules for Max, Min and Relu; Cast and integer Div beside them.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from dslc import workspace
from dslc.backends.numba import calls
from dslc.ir.diagnostics import ExecutionError
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, final_output

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning",
                                        "ignore:divide by zero encountered:RuntimeWarning")
I64 = np.int64
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16]
DEADLINE = 120  # seconds: a hung kernel fails the test instead of hanging the suite


@pytest.fixture
def compiled_calls(monkeypatch):
    """How many times a compiled island or fused kernel ran."""
    count = [0]
    for cls in (calls.IslandCall, calls.FusedCall):
        original = cls.__call__

        def counted(self, *args, _original=original):
            count[0] += 1
            return _original(self, *args)
        monkeypatch.setattr(cls, "__call__", counted)
    return count


def line_of(marker: str) -> int:
    return next(i for i, t in enumerate(open(__file__), 1) if t.rstrip().endswith(marker))


def run(build, feeds: dict, backend: str, passes: str) -> list[dict]:
    """Feed the inputs, trace ``build()`` (it returns {name: blob}) in a Task, run it twice.

    Twice: the first run writes the blobs a loop writes, and only a loop whose inputs are
    all set runs compiled (an unset one runs the interpreter's code for its error).
    """
    workspace.ResetWorkspace()
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    with Task() as task:
        outs = {k: final_output(v) for k, v in build().items()}
    result: dict = {}

    def go():
        try:
            with LocalSession(backend=backend, passes=passes) as s:
                result["values"] = []
                for _ in range(2):
                    s.run(task)
                    result["values"].append({k: o.fetch() for k, o in outs.items()})
        except BaseException as e:  # noqa: BLE001  (re-raised in the test's thread)
            result["error"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(DEADLINE)
    assert not t.is_alive(), f"{backend} ({passes}) did not finish in {DEADLINE} s"
    if "error" in result:
        raise result["error"]
    return result["values"]


def check(build, feeds, want: dict, backend, compiled_calls) -> None:
    """Both pipelines give ``want`` exactly (dtype, value, NaN, the sign of zero)."""
    for passes in ("default", "none"):
        before = compiled_calls[0]
        for n, got in enumerate(run(build, feeds, backend, passes), 1):
            check_values(got, want, f"{backend} ({passes}, run {n})")
        if backend == "numba" and passes == "default":
            assert compiled_calls[0] > before, "the numba backend compiled none of this program"


def check_values(got: dict, want: dict, how: str) -> None:
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        what = f"{how}: {name} = {g!r}, expected {w!r}"
        assert g.dtype == w.dtype and g.shape == w.shape, what
        assert np.array_equal(g, w, equal_nan=w.dtype.kind == "f"), what
        assert np.array_equal(np.signbit(g) & (g == g), np.signbit(w) & (w == w)), what  # 0.0, -0.0


def copies(*names):
    """Each input read once before the loops (so the loops compile as pure dataflow)."""
    return [ops.Copy(n) for n in names]


# --- loops whose carried values change before a stop_if ------------------------------

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_carried_values_change_before_stop_if(backend, compiled_calls):
    def build():
        x, y, one, five = copies("x0", "y0", "one", "five")
        with ops.loop():
            ops.Add([x, one], [x])
            ops.Mul([y, ops.Const(3)], [y])
            ops.stop_if(ops.GE([x, five]))
            ops.Sub([y, one], [y])  # after the stop_if: not on the last trip
        return {"x": x, "y": y}
    # by hand: x 1..5; y: 3*1-1=2, 3*2-1=5, 14, 41, then 3*41=123 and the loop stops
    check(build, dict(x0=I64(0), y0=I64(1), one=I64(1), five=I64(5)),
          {"x": I64(5), "y": I64(123)}, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_several_stop_ifs_and_a_counted_loop_with_stop_if(backend, compiled_calls):
    def build():
        x, s, one = copies("x0", "s0", "one")
        with ops.loop():
            ops.Add([x, one], [x])
            ops.stop_if(ops.GE([x, ops.Const(100)]))
            ops.Add([s, x], [s])
            ops.stop_if(ops.GE([s, ops.Const(20)]))
            ops.Add([x, one], [x])
        t = ops.Copy(s)
        with ops.loop(10):
            ops.Mul([t, ops.Const(2)], [t])
            ops.stop_if(ops.GT([t, ops.Const(1000)]))
        return {"x": x, "s": s, "t": t}
    # by hand: x 1,(2) 3,(4) 5,(6) 7,(8) 9 -> s 1, 4, 9, 16, 25; t doubles 25 -> 1600 (6 trips)
    check(build, dict(x0=I64(0), s0=I64(0), one=I64(1)),
          {"x": I64(9), "s": I64(25), "t": I64(1600)}, backend, compiled_calls)


# --- float division by zero is IEEE; integer division by zero is the located error ----

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_division_by_zero_gives_inf_and_nan(backend, compiled_calls, dtype):
    def build():
        a, b, z = copies("a", "b", "z")
        acc, q = ops.Copy(z), ops.Copy(z)
        with ops.loop(3):
            ops.Add([acc, ops.Div([a, z])], [acc])
            ops.Div([z, z], [q])
        return {"acc": acc, "q": q, "neg": ops.Div([b, z])}
    check(build, dict(a=dtype(1), b=dtype(-2), z=dtype(0)),
          {"acc": dtype(np.inf), "q": dtype(np.nan), "neg": dtype(-np.inf)}, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_integer_division_by_zero_is_the_interpreters_located_error(backend, compiled_calls):
    workspace.FeedBlob("a", I64(7))
    workspace.FeedBlob("z", I64(1))
    with Task() as task:
        a, z = copies("a", "z")
        acc = ops.Copy(a)
        with ops.loop(3):
            ops.Add([acc, a], [acc])
            ops.Add([acc, ops.Div([a, z])], [acc])  # @div0
        final_output(acc)
    for passes in ("default", "none"):
        with LocalSession(backend=backend, passes=passes) as s:
            s.run(task)  # writes every blob the loop reads, so that the next run is compiled
            workspace.FeedBlob("z", I64(0))
            with pytest.raises(ExecutionError, match="integer division by zero") as err:
                s.run(task)
            workspace.FeedBlob("z", I64(1))
        assert err.value.loc.line == line_of("# @div0")
        assert "Cast both operands to FLOAT" in err.value.hint
    assert backend == "interp" or compiled_calls[0] > 0


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_division_truncates_and_wraps(backend, compiled_calls, dtype):
    info = np.iinfo(dtype)

    def build():
        lo, m1, a, b = copies("lo", "m1", "a", "b")
        q1, q2, q3 = ops.Copy(a), ops.Copy(a), ops.Copy(a)
        with ops.loop(2):
            ops.Div([lo, m1], [q1])
            ops.Div([a, b], [q2])
            ops.Div([lo, b], [q3])
        return {"q1": q1, "q2": q2, "q3": q3}
    signed = info.min < 0
    m1 = dtype(-1) if signed else dtype(1)
    a, b = (dtype(-7), dtype(2)) if signed else (dtype(7), dtype(2))
    # C++ truncation by hand: MIN / -1 wraps to MIN; -7 / 2 = -3; MIN / 2 = MIN / 2 exactly
    want = {"q1": dtype(info.min) if signed else dtype(0), "q2": dtype(-3) if signed else dtype(3),
            "q3": dtype(info.min // 2)}
    check(build, dict(lo=dtype(info.min), m1=m1, a=a, b=b), want, backend, compiled_calls)


# --- every integer width wraps in its own width ---------------------------------------

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_arithmetic_wraps_in_its_own_width(backend, compiled_calls, dtype):
    bits = np.iinfo(dtype).bits

    def build():
        m, k, d, one = copies("m", "k", "d", "one")
        acc, total, neg = ops.Copy(one), ops.Copy(one), ops.Copy(one)
        with ops.loop(5):
            ops.Mul([acc, k], [acc])
            ops.Add([total, ops.Mul([acc, m])], [total])
            ops.Sub([neg, ops.Sqr(total)], [neg])
        return {"acc": acc, "total": total, "neg": neg,
                "q": ops.Div([ops.Mul([acc, k]), d]), "wide": ops.Cast(total, to=10)}
    k, m, d = 1 << (bits // 2), 3, 7
    signed = np.iinfo(dtype).min < 0

    def wrap(v):  # a Python int wrapped to the width
        v %= 1 << bits
        return dtype(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    acc = total = neg = 1
    for _ in range(5):  # Python ints, wrapped by hand to the width
        acc = int(wrap(acc * k))
        total = int(wrap(total + int(wrap(acc * m))))
        neg = int(wrap(neg - int(wrap(total * total))))
    prod = int(wrap(acc * k))
    q = abs(prod) // d * (1 if prod >= 0 else -1)
    want = {"acc": wrap(acc), "total": wrap(total), "neg": wrap(neg), "q": wrap(q), "wide": I64(total)}
    check(build, dict(m=dtype(m), k=dtype(k), d=dtype(d), one=dtype(1)), want, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_int32_scalar_meets_int32_array_in_a_loop(backend, compiled_calls):
    def build():
        arr, s = copies("arr", "s")
        with ops.loop(3):
            t = ops.Mul([s, s])       # an int32 scalar, not int64
            ops.Add([ops.Mul([arr, t]), s], [arr])
        return {"arr": arr}
    s = np.int32(46341)  # s * s = 2147488281 wraps to -2147479015
    want = np.array([1, -2, 65536], np.int32)
    with np.errstate(over="ignore"):
        for _ in range(3):
            want = want * (s * s) + s
    check(build, dict(arr=np.array([1, -2, 65536], np.int32), s=s), {"arr": want}, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_the_65536_square_divided_is_zero_in_int32(backend, compiled_calls):
    def build():
        a, = copies("a")
        acc = ops.Copy(a)
        with ops.loop(1):
            ops.Div([ops.Mul([acc, a]), a], [acc])
        return {"acc": acc}
    # 65536 * 65536 = 2**32 wraps to 0 in int32; 0 / 65536 = 0
    check(build, dict(a=np.int32(65536)), {"acc": np.int32(0)}, backend, compiled_calls)


# --- int64 overflow wraps (it is not undefined behaviour) -----------------------------

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("constants", [False, True])
def test_a_loop_stopped_by_an_overflowing_product(backend, compiled_calls, constants):
    """With signed overflow undefined, LLVM folded this loop's test: 8 or 100 trips for 7."""
    def build():
        if constants:
            n, big, zero, one = ops.Const(3), ops.Const(1000), ops.Const(0), ops.Const(1)
        else:
            n, big, zero, one = copies("n", "big", "zero", "one")
        n, trips = ops.Copy(n), ops.Copy(zero)
        with ops.loop(100):
            ops.Add([trips, one], [trips])
            ops.Mul([n, big], [n])
            ops.stop_if(ops.LE([n, zero]))
        return {"trips": trips, "n": n}
    n, trips = 3, 0  # by hand: multiply by 1000 until the wrapped int64 is <= 0
    while trips < 100:
        trips += 1
        n = (n * 1000 + (1 << 63)) % (1 << 64) - (1 << 63)
        if n <= 0:
            break
    assert trips == 7  # 3e18 fits; 3e21 wraps negative
    check(build, dict(n=I64(3), big=I64(1000), zero=I64(0), one=I64(1)),
          {"trips": I64(trips), "n": I64(n)}, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_int64_extremes_wrap(backend, compiled_calls):
    def build():
        hi, lo, one = copies("hi", "lo", "one")
        a, b, c = ops.Copy(hi), ops.Copy(lo), ops.Copy(lo)
        with ops.loop(1):
            ops.Add([hi, one], [a])
            ops.Sub([lo, one], [b])
            ops.Negative(lo, [c])
        return {"a": a, "b": b, "c": c, "abs": ops.Abs(lo)}
    mx, mn = (1 << 63) - 1, -(1 << 63)
    check(build, dict(hi=I64(mx), lo=I64(mn), one=I64(1)),
          {"a": I64(mn), "b": I64(mx), "c": I64(mn), "abs": I64(mn)}, backend, compiled_calls)


# --- a loop count that folds to a negative constant -----------------------------------

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_a_negative_constant_count_is_the_located_error(backend, compiled_calls):
    with Task() as task:
        acc, one = ops.Const(0), ops.Const(1)
        n = ops.Sub([ops.Const(2), ops.Const(5)])  # the default pipeline folds it to -3
        with ops.loop(4):  # (compiled with the next loop)
            ops.Add([acc, one], [acc])
        with ops.loop(n):  # @negative
            ops.Add([acc, one], [acc])
        final_output(acc)
    for passes in ("default", "none"):
        with LocalSession(backend=backend, passes=passes) as s, \
                pytest.raises(ExecutionError, match=r"the loop count is negative \(-3\)") as err:
            s.run(task)
        assert err.value.loc.line == line_of("# @negative")
        assert "cannot run a negative number of times" in err.value.hint
    assert backend == "interp" or compiled_calls[0] > 0  # the compiled loop checked its count


# --- Max, Min, Relu: NaN propagates, signed zeros as numpy picks them ------------------

PAIRS = [(1.0, np.nan), (np.nan, 1.0), (0.0, -0.0), (-0.0, 0.0), (-np.inf, np.nan), (2.0, -3.0)]


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_relu_scalars_follow_numpy(backend, compiled_calls, dtype):
    feeds = {}
    for i, (x, y) in enumerate(PAIRS):
        feeds[f"x{i}"], feeds[f"y{i}"] = dtype(x), dtype(y)

    def build():
        out = {}
        values = copies(*feeds)
        for i in range(len(PAIRS)):
            x, y = values[2 * i], values[2 * i + 1]
            mx, mn, r = ops.Copy(x), ops.Copy(x), ops.Copy(x)
            with ops.loop(1):
                ops.Max([x, y], [mx])
                ops.Min([x, y], [mn])
                ops.Relu(x, [r])
            out.update({f"max{i}": mx, f"min{i}": mn, f"relu{i}": r})
        return out
    want = {}
    for i, (x, y) in enumerate(PAIRS):
        x, y = dtype(x), dtype(y)
        want.update({f"max{i}": np.maximum(x, y), f"min{i}": np.minimum(x, y), f"relu{i}": np.maximum(x, dtype(0))})
    check(build, feeds, want, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_max_min_relu_arrays_and_fused_kernels_follow_numpy(backend, compiled_calls):
    x = np.array([p[0] for p in PAIRS] * 3, np.float32)
    y = np.array([p[1] for p in PAIRS] * 3, np.float32)

    def build():
        a, b = copies("x", "y")
        mx, mn = ops.Copy(a), ops.Copy(a)
        with ops.loop(1):  # arrays in a compiled loop
            ops.Max([a, b, a], [mx])
            ops.Min([a, b], [mn])
        fused = ops.Relu(ops.Sub([ops.Max([a, b]), ops.Min([b, a])]))  # one fused kernel
        return {"max": mx, "min": mn, "fused": fused, "relu": ops.Relu(a)}
    want = {"max": np.maximum(np.maximum(x, y), x), "min": np.minimum(x, y),
            "fused": np.maximum(np.maximum(x, y) - np.minimum(y, x), np.float32(0)),
            "relu": np.maximum(x, np.float32(0))}
    check(build, dict(x=x, y=y), want, backend, compiled_calls)


# --- Cast: what numpy gives, including NaN and out-of-range floats --------------------

@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
@pytest.mark.parametrize("to", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16])
def test_float_to_int_cast_follows_numpy(backend, compiled_calls, to):
    values = [300.7, -300.7, 3e9, -3e9, np.nan, np.inf, 1e19, -0.5, 70000.5]
    code = {np.int8: 7, np.int16: 9, np.int32: 2, np.int64: 10, np.uint8: 6, np.uint16: 8}[to]
    feeds = {f"f{i}": np.float32(v) for i, v in enumerate(values)}
    feeds.update({f"d{i}": np.float64(v) for i, v in enumerate(values)})

    def build():
        out = {}
        for name, v in zip(feeds, copies(*feeds)):
            c = ops.Cast(v, to=code)
            r = ops.Copy(c)
            with ops.loop(1):
                ops.Cast(v, [r], to=code)
            out[name] = r
        return out
    with np.errstate(invalid="ignore"):
        want = {name: np.asarray(v).astype(to)[()] for name, v in feeds.items()}
    check(build, feeds, want, backend, compiled_calls)


@pytest.mark.own_pipeline  # both pipelines, by check() or its own loop
def test_float32_quotients_stay_float32_in_a_loop(backend, compiled_calls):
    def build():
        acc, a, b = copies("acc", "a", "b")
        with ops.loop(50):
            ops.Add([acc, ops.Div([a, b])], [acc])
        return {"acc": acc}
    acc, a, b = np.float32(0.1), np.float32(1), np.float32(3)
    for _ in range(50):
        acc = np.float32(acc + np.float32(a / b))
    check(build, dict(acc=np.float32(0.1), a=a, b=b), {"acc": acc}, backend, compiled_calls)


def test_a_0d_array_where_the_island_wants_a_scalar(backend, compiled_calls):
    """A scalar-typed value the interpreter holds as a 0-d array (a fed np.float64 array of
    shape (), a reduction over every axis) goes into a compiled island as a scalar: numba
    failed to type ``dY if y > 0 else 0.0`` with dY a 0-d array (found by the random
    gradient programs)."""
    from dslc import core
    net = core.Net("relu_of_a_sum")
    net.ReduceSum(["x"], ["s"], axes=[0, 1], keepdims=0)
    net.Relu(["s"], ["y"])
    net.Mul(["y", "r"], ["projected"])
    net.SumElements(["projected"], ["loss"])
    grads = net.AddGradientOperators(["loss"])
    workspace.FeedBlob("x", np.array([[0.69]], np.float64))
    workspace.FeedBlob("r", np.array(0.27, np.float64))  # (shape (): a 0-d array)
    with LocalSession(backend=backend) as s:
        s.run(net)
    # loss = relu(sum(x)) * r: d loss / d x = r where sum(x) > 0
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["x"])), [[0.27]], rtol=1e-12)
    if backend == "numba":
        assert compiled_calls[0] > 0
