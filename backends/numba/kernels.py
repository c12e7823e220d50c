"""The numba backend's kernels: each op as a Python expression numba compiles.

``EXPR["Add"](op, args, site)`` returns the source of ``op``'s value given its operands'
source names (``site(kind)`` numbers a check that can fail, see ``failures``), or None
when this op (with these types) stays on the interpreter.

Every expression has exactly its result's dtype and gives the interpreter's (numpy's)
answer bit for bit where numpy's is exact:

- numba computes a narrow int scalar (int8 ... int32, uint8, uint16) in int64 and a
  float32 quotient in float64; the result is cast back (``np.int32(a * b)`` wraps as
  numpy does, and a float32 rounded from the exact float64 quotient is the float32 one).
- numba marks signed arithmetic "no signed wrap", so LLVM may assume an int64 never
  overflows; int64 (and signed array) arithmetic runs on same-width unsigned views,
  which wrap, reinterpreted as signed: ``np.int64(np.uint64(a) * np.uint64(b))``.
- Max, Min and Relu follow numpy's maximum/minimum: NaN wins, and of two equal operands
  (0.0 and -0.0) the one numpy returns (``TIE_SECOND``).
- float to int casts follow numpy on x86-64 (NaN and out-of-range values give the
  minimum of int32 or int64; narrower ints truncate the int32), not LLVM's poison.
"""
from __future__ import annotations

import numpy as np

from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType

# float16 is missing: numba has no float16 arithmetic on the CPU, so it stays interpreted
NP = {"bool": "np.bool_", "i8": "np.int8", "i16": "np.int16", "i32": "np.int32", "i64": "np.int64",
      "u8": "np.uint8", "u16": "np.uint16", "f32": "np.float32", "f64": "np.float64"}
UNSIGNED = {"i8": "np.uint8", "i16": "np.uint16", "i32": "np.uint32", "i64": "np.uint64"}
EXPR: dict = {}
POINTWISE: set = set()  # ops whose kernel is pointwise (``kernel``)

# numpy's maximum/minimum of two equal operands returns the second on x86-64 (the SIMD
# max/min instructions do); asked once so that the kernels agree with this numpy
TIE_SECOND = {"Max": bool(np.signbit(np.maximum(np.float32(0.0), np.float32(-0.0)))),
              "Min": not np.signbit(np.minimum(np.float32(-0.0), np.float32(0.0)))}

HELPERS = {
    "_idiv": '''
@njit(nogil=True, error_model="numpy")
def _idiv(a, b, site):
    # C++ integer division: truncate toward zero; MIN / -1 wraps to MIN (as numpy)
    if b == 0:
        raise KernelFail(site, 0)
    if b == -1:
        return -a
    q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q += 1
    return q
''',
}


def _cast_helper(bits: int) -> str:
    """``_f2i64``/``_f2i32``: numpy's float to int conversion on x86-64 (cvttsd2si and
    cvttss2si): NaN and values out of range give the minimum; narrower ints truncate the int32."""
    lo = -(1 << (bits - 1))
    return f'''
@njit(nogil=True, error_model="numpy")
def _f2i{bits}(x):
    # as numpy on x86-64: NaN and values out of range give INT{bits}_MIN (LLVM: poison)
    if x >= {float(lo)!r} and x < {float(-lo)!r}:
        return np.int{bits}(x)
    return np.int{bits}({lo})
'''


HELPERS.update({f"_f2i{bits}": _cast_helper(bits) for bits in (32, 64)})


def _pick_helpers() -> dict:
    """``_max(a, b)`` and the like, for floats: NaN wins, ties as ``TIE_SECOND`` says."""
    out = {}
    for name, fn in (("Max", "max"), ("Min", "min")):
        cmp = (">" if name == "Max" else "<") + ("" if TIE_SECOND[name] else "=")
        tie = "the second" if TIE_SECOND[name] else "the first"
        out[f"_{fn}"] = f'''
@njit(nogil=True, error_model="numpy")
def _{fn}(a, b):
    # numpy's {fn}imum: NaN wins; of equal operands (0.0 and -0.0), {tie}
    return a if (a {cmp} b or a != a) else b
'''
        out[f"_a{fn}"] = f'''
@njit(nogil=True, error_model="numpy")
def _a{fn}(a, b):
    # numpy's {fn}imum of arrays: NaN wins; of equal operands (0.0 and -0.0), {tie}
    return np.where((a {cmp} b) | (a != a), a, b)
'''
        # an array against a scalar of its dtype (Relu): one loop, no temporaries (np.where
        # over two masks costs 20 times the loop)
        out[f"_a{fn}s"] = f'''
@njit(nogil=True, error_model="numpy")
def _a{fn}s(a, b):
    # _a{fn} of an array and a scalar of its dtype
    out = np.empty(a.shape, a.dtype)
    src, dst = np.ascontiguousarray(a).reshape(-1), out.reshape(-1)
    for i in range(src.size):
        x = src[i]
        dst[i] = x if (x {cmp} b or x != x) else b
    return out
'''
    return out


HELPERS.update(_pick_helpers())


def kernel(*names, pointwise: bool = False):
    """Register ``f(op, args, site)`` as the kernel of ops ``names``. ``pointwise``: each
    element of its result is computed from the operands' elements at the same index alone
    (numpy's broadcasting of a size-1 operand included), so the kernel gives the same
    elements on the arrays flattened (``flat_shape``)."""
    def register(f):
        for n in names:
            EXPR[n] = f
            if pointwise:
                POINTWISE.add(n)
        return f
    return register


def flat_shape(op):
    """The operand whose shape ``op``'s results have when its kernel may run on its arrays
    flattened to one dimension (the writer then reshapes the results to that operand's
    shape), else None: a pointwise kernel whose results share one shape of rank >= 2 and
    whose array operands each have that shape or one element. Where a dim is unknown (a
    variant for other sizes, variants.py) only one array operand may have more than one
    element: two such operands of [?, 3] could still broadcast at run time.

    The writer reshapes to the operand's run-time shape, not a literal: a variant for other
    sizes then writes the first variant's text for its islands and reuses their compiles.

    numba compiles an expression over N-d arrays as a loop nest that checks, for every
    operand and dimension, whether that dimension broadcasts, and LLVM unswitches those
    checks into copies of the nest: one ``a * s + b * t`` over 4-d arrays took 32 s of CPU
    to compile (1-d: 1.9 s), and the ResNet trainer's optimizer region, 25 such sums and 30
    momentum updates of conv weights, did not compile in an hour. Flattened, the elements
    and their order are the same (C order: the arrays a region holds are its own, made
    contiguous) and numba compiles one loop.
    """
    if op.name not in POINTWISE or not op.results:
        return None
    shapes = {tuple(tensor(r).shape) if tensor(r) is not None else None for r in op.results}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    if shape is None or len(shape) < 2:
        return None
    whole = []  # the array operands of more than one element
    for v in op.operands:
        t = tensor(v)
        if t is None:
            return None
        if None in t.shape or int(np.prod(t.shape, dtype=np.int64)) != 1:
            if tuple(t.shape) != shape:
                return None
            whole.append(v)
    if not whole or None in shape and len(set(whole)) > 1:
        return None
    return whole[0]


def tensor(v) -> TensorType | None:
    """The value's tensor type if numba can hold it (known dtype and rank, not strings)."""
    t = v.type
    if isinstance(t, TensorType) and t.dtype in NP and t.shape is not None:
        return t
    return None


def scalar(v) -> bool:
    t = tensor(v)
    return t is not None and t.shape == ()


def literal(value, dtype: str) -> str:
    """A scalar constant as source with its exact type.

    numba types a plain int literal as int64 and a float literal as float64; other
    types are written ``np.float32(0.5)`` and become module constants (see ``Writer``).
    """
    if dtype == "bool":
        return "True" if bool(value) else "False"
    if dtype in FLOAT_DTYPES:
        f = float(value)
        text = "np.nan" if f != f else ("-np.inf" if f < 0 else "np.inf") if f in (float("inf"), float("-inf")) \
            else repr(f)
        return text if dtype == "f64" else f"{NP[dtype]}({text})"
    if dtype == "i64" and abs(int(value)) < 1 << 31:  # larger ones numba may type as uint64
        return f"({int(value)})" if int(value) < 0 else str(int(value))
    return f"{NP[dtype]}({int(value)})"


def exact(expr: str, dtype: str) -> str:
    """A scalar expression as exactly ``dtype`` (numba widens narrow ints and float32 quotients)."""
    return expr if dtype in ("bool", "i64", "f64") else f"{NP[dtype]}({expr})"


def _dtype(op):
    t = tensor(op.results[0]) if op.results else None
    return t.dtype if t is not None else None


def _legacy(op) -> bool:
    return bool(op.attrs.get("broadcast")) and op.attrs.get("axis", -1) not in (-1, None)


def arith(sym: str, dt: str, x, y) -> str:
    """``x sym y`` in ``dt``, wrapping for integers (never signed overflow).

    ``x`` and ``y`` are (source, is_scalar) pairs.
    """
    if x[1] and y[1]:
        if dt == "i64":
            return f"np.int64(np.uint64({x[0]}) {sym} np.uint64({y[0]}))"
        return exact(f"({x[0]} {sym} {y[0]})", dt)  # narrow ints are exact in numba's int64
    if dt not in UNSIGNED:  # floats, and unsigned ints (which wrap)
        return f"({x[0]} {sym} {y[0]})"
    u = UNSIGNED[dt]
    xs, ys = (f"{u}({s})" if is_scalar else f"{s}.view({u})" for s, is_scalar in (x, y))
    return f"({xs} {sym} {ys}).view({NP[dt]})"


def _operands(op, a):
    return [(s, scalar(v)) for s, v in zip(a, op.operands)]


@kernel("Add", "Sub", "Mul", pointwise=True)
def _arith(op, a, site):
    if _legacy(op):
        return None
    return arith({"Add": "+", "Sub": "-", "Mul": "*"}[op.name], _dtype(op), *_operands(op, a))


@kernel("Div", pointwise=True)
def _div(op, a, site):
    dt = _dtype(op)
    if _legacy(op) or dt is None:
        return None
    if dt in INT_DTYPES:
        if not all(scalar(v) for v in op.operands):
            return None
        return exact(f"_idiv({a[0]}, {a[1]}, {site('div')})", dt)
    return exact(f"({a[0]} / {a[1]})", dt) if scalar(op.result) else f"({a[0]} / {a[1]})"


@kernel("GE", "GT", "LE", "LT", "EQ", "NE", pointwise=True)
def _compare(op, a, site):
    if _legacy(op) or any(tensor(v) is None for v in op.operands):
        return None
    sym = {"GE": ">=", "GT": ">", "LE": "<=", "LT": "<", "EQ": "==", "NE": "!="}[op.name]
    return f"({a[0]} {sym} {a[1]})"


@kernel("And", "Or", "Xor", pointwise=True)
def _logic(op, a, site):
    if _legacy(op):
        return None
    if all(scalar(v) for v in op.operands):
        return {"And": f"({a[0]} and {a[1]})", "Or": f"({a[0]} or {a[1]})",
                "Xor": f"({a[0]} != {a[1]})"}[op.name]
    return f"np.logical_{op.name.lower()}({a[0]}, {a[1]})"


@kernel("BitwiseAnd", "BitwiseOr", "BitwiseXor", pointwise=True)
def _bitwise(op, a, site):
    if _legacy(op):
        return None
    dt = _dtype(op)
    if dt is None:
        return None
    sym = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}[op.name]
    expr = f"({a[0]} {sym} {a[1]})"
    # (scalars: numba computes narrow ints as int64, which & | ^ never take out of range)
    return exact(expr, dt) if all(scalar(v) for v in op.operands) else expr


@kernel("Not", pointwise=True)
def _not(op, a, site):
    return f"(not {a[0]})" if scalar(op.operands[0]) else f"np.logical_not({a[0]})"


@kernel("Negative", pointwise=True)
def _neg(op, a, site):
    dt = _dtype(op)
    if scalar(op.operands[0]):
        return exact(f"(-{a[0]})", dt)  # numba negates ints without "no signed wrap"
    if dt in UNSIGNED:
        return f"(-{a[0]}.view({UNSIGNED[dt]})).view({NP[dt]})"
    return f"(-{a[0]})"


@kernel("Abs", pointwise=True)
def _abs(op, a, site):
    return exact(f"abs({a[0]})", _dtype(op)) if scalar(op.operands[0]) else f"np.abs({a[0]})"


@kernel("ZerosLike", pointwise=True)
def _zeros_like(op, a, site):
    return literal(0, _dtype(op)) if scalar(op.operands[0]) else f"np.zeros_like({a[0]})"


@kernel("Sqr", pointwise=True)
def _sqr(op, a, site):
    x = (a[0], scalar(op.operands[0]))
    return arith("*", _dtype(op), x, x)


@kernel("Sqrt", "Exp", "Log", pointwise=True)
def _math(op, a, site):
    expr = f"np.{op.name.lower()}({a[0]})"
    return exact(expr, _dtype(op)) if scalar(op.operands[0]) else expr


def _pick(name: str, x: str, y: str, float_: bool, arrays: bool) -> str:
    """numpy's maximum (name "Max") or minimum of x and y (see the ``_max`` helpers)."""
    if not float_:  # no NaN, and equal ints are the same int
        fn = "np.maximum" if name == "Max" else "np.minimum"
        return f"{fn}({x}, {y})" if arrays else f"{name.lower()}({x}, {y})"
    return f"_{'a' if arrays else ''}{name.lower()}({x}, {y})"


@kernel("Relu", pointwise=True)
def _relu(op, a, site):
    dt = _dtype(op)
    arrays = not scalar(op.operands[0])
    if arrays and dt in FLOAT_DTYPES:
        return f"_amaxs({a[0]}, {literal(0, dt)})"
    out = _pick("Max", a[0], literal(0, dt), dt in FLOAT_DTYPES, arrays)
    return out if arrays else exact(out, dt)


@kernel("Scale", pointwise=True)
def _scale(op, a, site):
    dt = _dtype(op)
    return arith("*", dt, (a[0], scalar(op.operands[0])), (literal(op.attrs["scale"], dt), True))


@kernel("Sum", "Max", "Min", pointwise=True)
def _variadic(op, a, site):
    """Folded left to right, as numpy's reduce; a single operand stays interpreted (a copy)."""
    if len(a) < 2:
        return None
    dt = _dtype(op)
    xs = _operands(op, a)
    out = xs[0]
    for x in xs[1:]:
        arrays = not (out[1] and x[1])
        if op.name == "Sum":
            out = (arith("+", dt, out, x), not arrays)
        else:
            pick = _pick(op.name, out[0], x[0], dt in FLOAT_DTYPES, arrays)
            out = (pick if arrays else exact(pick, dt), not arrays)
    return out[0]


@kernel("Cast", pointwise=True)
def _cast(op, a, site):
    to = dtype_from_code("Cast", op.attrs["to"])
    src = tensor(op.operands[0])
    if to not in NP or src is None:
        return None
    from_float = src.dtype in FLOAT_DTYPES and to in INT_DTYPES
    if not scalar(op.operands[0]):
        return None if from_float else f"{a[0]}.astype({NP[to]})"  # LLVM's vector casts saturate
    if to == "bool":
        return f"({a[0]} != 0)"
    if from_float:
        return "_f2i64({})".format(a[0]) if to == "i64" else exact(f"_f2i32({a[0]})", to)
    return f"{NP[to]}({a[0]})"


@kernel("Copy", "EnsureDense", pointwise=True)
def _copy(op, a, site):
    return a[0] if scalar(op.operands[0]) else f"{a[0]}.copy()"


@kernel("IsEmpty")
def _is_empty(op, a, site):
    return "False" if scalar(op.operands[0]) else f"({a[0]}.size == 0)"


@kernel("HasElements")
def _has_elements(op, a, site):
    return "(" + " or ".join("True" if scalar(v) else f"{x}.size > 0" for v, x in zip(op.operands, a)) + ")"


class _Element:
    """A value seen as one element: a scalar of its dtype."""

    def __init__(self, v):
        self.type = TensorType(tensor(v).dtype, ())
        self.owner = None


class ElementView:
    """``op`` applied to one element of each operand (a fused group's body is written so):
    same name and attributes, operands and results scalars of their dtypes."""

    def __init__(self, op):
        self.name, self.attrs = op.name, op.attrs
        self.operands = [_Element(v) for v in op.operands]
        self.results = [_Element(r) for r in op.results]

    @property
    def result(self):
        return self.results[0]


def draws(op) -> bool:
    """Whether ``op`` draws random numbers: its kernel then gets the op's generator (a
    ``numpy.random.Generator``, the interpreter's stream for it) as a last argument."""
    opdef = getattr(op, "opdef", None)  # (an ElementView, of a pure op, has none)
    return opdef is not None and any(e.resource == "random" for e in opdef.effects)


def supported(op) -> bool:
    """Whether this op, with these operand and result types, compiles with numba here."""
    if op.name == "Const":
        return tensor(op.result) is not None
    f = EXPR.get(op.name)
    if f is None or any(tensor(v) is None for v in list(op.operands) + list(op.results)):
        return False
    return f(op, ["x"] * (len(op.operands) + draws(op)), lambda kind: 0) is not None


__all__ = ["EXPR", "HELPERS", "NP", "POINTWISE", "ElementView", "draws", "exact", "flat_shape", "literal", "scalar",
           "supported", "tensor", "np"]
