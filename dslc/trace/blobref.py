"""Blob names: NameScope and BlobReference, as Caffe2 spells them.

A BlobReference is a blob's name plus the net that made it (so ``ref.Op(...)``
records into that net). String names given to an op get the current NameScope.
"""
from __future__ import annotations

import threading
from collections import namedtuple

from dslc.ir.diagnostics import TraceError
from dslc.trace.oprecord import is_operator
from dslc.trace.tracing import user_location

# A sparse gradient's two blobs: the rows' indices and their values (Caffe2's GradientSlice).
GradientSlice = namedtuple("GradientSlice", ["indices", "values"])


class _ScopeState(threading.local):
    prefix = ""  # each thread starts outside any NameScope


_scope = _ScopeState()
# Whether a NameScope ever set a non-empty prefix. Until then every thread's prefix is "",
# and recording skips reading it: a thread-local read costs as much as a dict lookup or two.
_scope_used = False


def CurrentNameScope() -> str:
    return _scope.prefix if _scope_used else ""


class NameScope:
    """``with core.NameScope('x'):`` prefixes plain-string blob names with ``x/``."""

    def __init__(self, prefix: str, reset: bool = False):
        self.prefix = prefix
        self.reset = reset

    def __enter__(self):
        global _scope_used
        self.saved = CurrentNameScope()
        base = "" if self.reset else self.saved
        prefix = base + (str(self.prefix) + "/" if self.prefix else "")
        if prefix:
            _scope_used = True
        _scope.prefix = prefix
        return self

    def __exit__(self, *exc):
        _scope.prefix = self.saved
        return False


def ScopedName(name: str) -> str:
    return CurrentNameScope() + name


def ScopedBlobReference(name, net=None) -> "BlobReference":
    return BlobReference(ScopedName(str(name)), net)


class BlobArithmeticError(TraceError, TypeError):
    """Numeric operators used on a BlobReference (blobs only support string concatenation)."""


class NoNetError(TraceError, AttributeError):
    """``ref.Op(...)`` on a reference that no net made (an AttributeError, as in Caffe2)."""


_MATH_HINT = "all math on blobs is explicit ops: ops.Add([a, b]), ops.Mul([a, b]) ..."


def _no_math(symbol):
    """A dunder method that rejects ``symbol`` on blobs with a located, hinted error."""

    def reject(self, *other):
        what = f"{type(other[0]).__name__} operand" if other else "a blob"
        raise BlobArithmeticError(f"'{symbol}' is not defined on a BlobReference (got {what})",
                                  user_location(), _MATH_HINT)

    reject.__name__ = f"no_{symbol}"
    return reject


class BlobReference:
    """A blob's name, plus the net that made it (for ``ref.Op(...)`` chaining).

    Compares and hashes like its name (so it equals the plain string). The only
    arithmetic is string concatenation (``ref + "_x"``, ``"x_" + ref``); every other
    operator raises BlobArithmeticError.
    """

    __slots__ = ("_name", "_from_net")

    def __init__(self, name, net=None):
        self._name = str(name)
        self._from_net = net

    def __str__(self):
        return self._name

    def __repr__(self):
        return f'BlobReference("{self._name}")'

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        if isinstance(other, (BlobReference, str)):
            return self._name == str(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __add__(self, other):
        if not isinstance(other, (str, BlobReference)):
            raise BlobArithmeticError(f"a BlobReference can only be joined with a string, not "
                                      f"{type(other).__name__}", user_location(), _MATH_HINT)
        return BlobReference(self._name + str(other), self._from_net)

    def __radd__(self, other):
        if not isinstance(other, str):
            raise BlobArithmeticError(f"a BlobReference can only be joined with a string, not "
                                      f"{type(other).__name__}", user_location(), _MATH_HINT)
        return BlobReference(other + self._name, self._from_net)

    # Caffe2 has no numeric overloading; say so clearly instead of Python's bare TypeError.
    __sub__ = __rsub__ = _no_math("-")
    __mul__ = __rmul__ = _no_math("*")
    __truediv__ = __rtruediv__ = _no_math("/")
    __floordiv__ = __rfloordiv__ = _no_math("//")
    __mod__ = __rmod__ = _no_math("%")
    __pow__ = __rpow__ = _no_math("**")
    __matmul__ = __rmatmul__ = _no_math("@")
    __and__ = __rand__ = _no_math("&")
    __or__ = __ror__ = _no_math("|")
    __xor__ = __rxor__ = _no_math("^")
    __neg__ = _no_math("unary -")
    __pos__ = _no_math("unary +")
    __invert__ = _no_math("~")
    __abs__ = _no_math("abs()")
    __lt__ = _no_math("<")
    __le__ = _no_math("<=")
    __gt__ = _no_math(">")
    __ge__ = _no_math(">=")

    def Net(self):
        return self._from_net

    def GetNameScope(self):
        return self._name[: self._name.rfind("/") + 1]

    def __getattr__(self, op_type):
        """``ref.Op(more_inputs, ...)``: record ``Op`` in the net that made ``ref``, ``ref`` first."""
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        if self._from_net is None:
            raise NoNetError(f"blob {self._name!r} has no net to record {op_type} into",
                             user_location(), "call the op on a net instead: net.Op([blob, ...])")
        if not is_operator(op_type):
            raise AttributeError(f"{op_type!r} is neither a BlobReference method nor an operator")
        recorder = getattr(self._from_net, op_type)

        def chained(inputs=None, *args, **kwargs):
            more = [] if inputs is None else (list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])
            return recorder([self] + more, *args, **kwargs)

        return chained


_new_object = object.__new__


def _blob_ref(name: str, net) -> BlobReference:
    """``BlobReference(name, net)`` for a ``name`` known to be a str (recording makes one per output)."""
    ref = _new_object(BlobReference)  # (skips __init__'s str(): a call less per op)
    ref._name = name
    ref._from_net = net
    return ref


# ----------------------------------------------------------------------------- nets


def _blob_names(blobs, op_type: str, role: str, loc, scope: str) -> tuple[str, ...]:
    """The names of an op's ``role`` blobs ("inputs", "outputs"); strings get the NameScope ``scope``."""
    if isinstance(blobs, (list, tuple)):  # the common case first (the kinds tested are disjoint)
        pass
    elif isinstance(blobs, (str, BlobReference)):
        blobs = [blobs]
    elif blobs is None:
        return ()
    else:
        raise TraceError(f"{op_type} {role} must be blob names or BlobReferences, got {type(blobs).__name__}",
                         loc, "pass a BlobReference, a string, or a list of them")
    out = []
    for b in blobs:
        if type(b) is BlobReference:  # the common case, checked first: this runs for every blob of every op
            out.append(b._name)
        elif isinstance(b, BlobReference):
            out.append(str(b))
        elif isinstance(b, str):
            out.append(scope + str(b))
        elif isinstance(b, bytes):  # (a name fetched from a string blob: Caffe2's protos take bytes too)
            out.append(scope + b.decode("utf-8"))
        else:
            raise TraceError(f"{op_type} {role} must be blob names or BlobReferences, got {type(b).__name__}",
                             loc, "make a constant with ops.Const(value) and pass its blob")
    return tuple(out)

