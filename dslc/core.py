"""Nets, blob references and execution steps: Caffe2's ``core`` module, as records.

Nothing runs here. A Net is a list of op records (type, input and output blob
names, arguments, the user's file:line); steps are trees of nets and steps.
Names follow Caffe2's rules so that programs and tests that spell blob names
keep working (see docs/differences.md for where dslc departs from them).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import numpy as np

from dslc import names, protoview
from dslc.devices import CurrentDeviceScope, DeviceOption, DeviceScope, device_option_equal  # noqa: F401
from dslc import workspace  # noqa: F401  (Caffe2 code reaches it as core.workspace)
from dslc.workspace import C  # noqa: F401  (Caffe2's core.C is its workspace.C)
from dslc.ir.diagnostics import Location, TraceError, UnknownOperatorError
from dslc.ir.opdef import OPS
from dslc.ir import pyrefs
from dslc.tracing import call_site, user_location

# Caffe2 spellings that the lowering turns into declared ops.
FILL_ALIASES = {
    "GivenTensorFill": np.float32, "GivenTensorDoubleFill": np.float64,
    "GivenTensorIntFill": np.int32, "GivenTensorInt64Fill": np.int64,
    "GivenTensorBoolFill": np.bool_, "GivenTensorStringFill": np.object_,
}
ALIASES = frozenset(FILL_ALIASES)
_INT32, _INT64, _FLOAT32 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32)
SPECIAL_ARGS = ("name", "engine", "device_option", "control_input")


class DataType:
    """Caffe2's tensor type codes (``core.DataType.FLOAT`` ...)."""

    UNDEFINED = 0
    FLOAT = 1
    INT32 = 2
    BYTE = 3
    STRING = 4
    BOOL = 5
    UINT8 = 6
    INT8 = 7
    UINT16 = 8
    INT16 = 9
    INT64 = 10
    FLOAT16 = 12
    DOUBLE = 13


# ----------------------------------------------------------------------------- names

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


@dataclass(slots=True)
class OpRecord:
    """One recorded operator call."""

    type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    args: dict
    loc: Location
    extra: dict = field(default_factory=dict)  # name, engine, device_option: kept, unused


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
        else:
            raise TraceError(f"{op_type} {role} must be blob names or BlobReferences, got {type(b).__name__}",
                             loc, "make a constant with ops.Const(value) and pass its blob")
    return tuple(out)


_NO_RESULTS: dict[str, bool] = {}  # declared op name -> whether it has no results (declarations never change)


def _has_no_results(op_type: str) -> bool:
    """Whether ``op_type`` is declared with no results (an op without outputs gets no auto name)."""
    known = _NO_RESULTS.get(op_type)
    if known is None:
        opdef = OPS.get(op_type)
        if opdef is None:
            return False
        known = _NO_RESULTS[op_type] = opdef.results[1] == 0
    return known


class GetattrShortcut:
    """A class attribute standing in for ``owner.__getattr__`` for one name.

    Classes whose ``__getattr__`` records ops (Net, ``ops``) install one per operator
    name on first use (operators are never undeclared): a lookup that falls through
    to ``__getattr__`` costs about a microsecond, as Python raises an AttributeError
    first, and it happened for every recorded op. Subclasses define ``__get__``; an
    instance of a subclass of ``owner`` with its own ``__getattr__`` gets that one's
    answer (``overridden``).
    """

    __slots__ = ("name",)
    owner: type  # the class whose __getattr__ this stands in for

    def __init__(self, name: str):
        self.name = name

    def overridden(self, obj):
        """``type(obj).__getattr__`` when it is not ``owner``'s, else None."""
        own = type(obj).__getattr__
        return None if own is self.owner.__getattr__ else own


class _OpRecorder(GetattrShortcut):
    """``net.<Op>``: a function recording ``Op`` into ``net``."""

    __slots__ = ()

    def __get__(self, net, owner=None):
        if net is None:
            return self
        if type(net) is not Net and self.overridden(net):
            return self.overridden(net)(net, self.name)
        return net._recorder(self.name)


def _special_args(op_type: str, args: dict) -> dict:
    """Take Caffe2's non-attribute arguments (name, engine, ...) out of ``args``."""
    # A Python op's "name" is its function's name (an attribute kernels report), not Caffe2's op name.
    keep = ("name",) if op_type == "Python" else ()
    return {k: args.pop(k) for k in SPECIAL_ARGS if k in args and k not in keep}


class Net:
    """A recorded network: ops in order, plus the names it produces and reads."""

    # Parts most nets never use start as these class-level defaults (a task makes a net per
    # block, most with a few ops); the first write gives the net its own.
    _external_outputs: list[str] | tuple = ()
    _registered: set[str] | None = None  # names NextBlob handed out
    _attributes: dict[str, list] | None = None
    _input_record = None
    _output_record = None
    _next_blob = 0
    _next_index: dict[tuple, int] | None = None  # (scope, base, suffix) -> where _next_name's scan resumes
    _op_names: dict[int, str] | None = None  # op index -> the name PopulateProtoWithFileName gave it

    def __init__(self, name_or_proto=None, inplace=False, _prefix=None):
        # (_prefix: the innermost builder's name, from a caller that has that builder at hand)
        src = name_or_proto if isinstance(name_or_proto, Net) else None
        requested = name_or_proto if src is None else src._name
        prefix = _builder_prefix() if _prefix is None else _prefix
        self._name = names.unique_net_name(prefix, requested)
        self._ops: list[OpRecord] = []
        self._produced: set[str] = set()
        self._external_inputs: dict[str, None] = {}  # an ordered set: O(1) membership
        if src is not None:
            self.AppendNet(src)

    # --- identity
    def Name(self) -> str:
        return self._name

    def Proto(self) -> protoview.NetDef:
        """A read-only NetDef view: name, op (type, input, output, arg, name), external_input/output."""
        names_ = self._op_names or {}
        return protoview.NetDef(self._name, [protoview.operator_view(op, names_.get(i))
                                             for i, op in enumerate(self._ops)],
                                list(self._external_inputs), list(self._external_outputs))

    def __str__(self):
        return self._name  # Caffe2 code runs nets by name: workspace.RunNet(str(net))

    def __repr__(self):
        return f"Net({self._name!r}, {len(self._ops)} ops)"

    def PopulateProtoWithFileName(self):
        """Name each op ``file:line:function`` after the user's call that recorded it."""
        self._op_names = {}
        for i, op in enumerate(self._ops):
            file, func = call_site(op.loc)
            self._op_names[i] = f"{file}:{op.loc.line}:{func}"

    def _CheckLookupTables(self):
        """Assert that the names this net counts as made are those its ops write."""
        made = {b for op in self._ops for b in op.outputs}
        assert made <= self._produced, f"ops of {self._name} write {sorted(made - self._produced)} unrecorded"

    # --- names
    def BlobIsDefined(self, blob) -> bool:
        name = str(blob)
        return name in self._produced or name in self._external_inputs

    def NextName(self, prefix=None, output_id=None) -> str:
        """An unused auto name: ``<net>/<prefix>[:id]``, then ``_2``, ``_3`` ...; no prefix: ``<net>_blob_<k>``.

        Net ``local/task``: ``NextName('Add')`` -> ``local/task/Add`` (then ``Add_2``);
        ``NextName('Fill', 0)`` -> ``local/task/Fill:0`` (then ``Fill_2:0``). The caller
        adds the NameScope; candidates are checked with it, as Caffe2 does.
        """
        return self._next_name(prefix, output_id, CurrentNameScope())

    def _next_name(self, prefix, output_id, scope: str) -> str:
        """``NextName`` under the NameScope ``scope`` (callers naming several outputs look it up once)."""
        if not prefix:
            name = f"{self._name}_blob_{self._next_blob}"
            while self.BlobIsDefined(name):  # Caffe2 does not check; a collision helps nobody
                self._next_blob += 1
                name = f"{self._name}_blob_{self._next_blob}"
            self._next_blob += 1
            return name
        base = f"{self._name}/{prefix}"
        suffix = "" if output_id is None else f":{output_id}"
        candidate = base + suffix
        produced, external = self._produced, self._external_inputs
        scoped = scope + candidate
        if not (scoped in produced or scoped in external):  # BlobIsDefined, inlined: runs per auto name
            return candidate
        # The first free index from 2 up. Names are never undefined, so the scan resumes
        # where the last one for these parts stopped (from 2 each time it was quadratic).
        if self._next_index is None:
            self._next_index = {}
        key = (scope, base, suffix)
        index = self._next_index.get(key, 2)
        while True:
            candidate = f"{base}_{index}{suffix}"
            scoped = scope + candidate
            if not (scoped in produced or scoped in external):
                break
            index += 1
        self._next_index[key] = index  # not past it: NextName() alone does not define the name
        return candidate

    def _reserve(self, prefix, output_id=None) -> str:
        """Take an auto name as if an op produced it (keeps later auto names in step with Caffe2)."""
        scope = CurrentNameScope()
        name = scope + self._next_name(prefix, output_id, scope)
        self._produced.add(name)
        return name

    def NextBlob(self, prefix="unnamed") -> BlobReference:
        """``prefix`` if this net neither made nor handed it out yet, else ``prefix_auto_0``, ``_auto_1`` ..."""
        return BlobReference(self._next_registered(str(prefix)), self)

    def NextScopedBlob(self, prefix="unnamed") -> BlobReference:
        """``NextBlob`` of the NameScope-qualified ``prefix``."""
        return BlobReference(self._next_registered(ScopedName(str(prefix))), self)

    def _next_registered(self, name: str) -> str:
        if self._registered is None:
            self._registered = set()
        candidate, k = name, 0
        while candidate in self._registered or self.BlobIsDefined(candidate):
            candidate = f"{name}_auto_{k}"
            k += 1
        self._registered.add(candidate)
        return candidate

    def AddExternalInput(self, *inputs):
        refs = []
        for b in inputs:
            for ref in (b if isinstance(b, (list, tuple)) else [b]):
                ref = ref if isinstance(ref, BlobReference) else BlobReference(str(ref), self)
                self._external_inputs.setdefault(str(ref))
                refs.append(BlobReference(str(ref), self))
        return refs[0] if len(refs) == 1 else refs

    AddExternalInputs = AddExternalInput

    def AddExternalOutput(self, *outputs):
        if not self._external_outputs:
            self._external_outputs = []  # (the class default is an empty tuple)
        for b in outputs:
            for ref in (b if isinstance(b, (list, tuple)) else [b]):
                if str(ref) not in self._external_outputs:
                    self._external_outputs.append(str(ref))

    AddExternalOutputs = AddExternalOutput

    @property
    def external_inputs(self) -> list:
        return [BlobReference(n, self) for n in self._external_inputs]

    @property
    def external_outputs(self) -> list:
        return [BlobReference(n, self) for n in self._external_outputs]

    def UsedBlobNames(self) -> set[str]:
        used = set(self._external_inputs) | set(self._external_outputs)
        for op in self._ops:
            used.update(op.inputs)
            used.update(op.outputs)
        return used

    # --- attributes (setup blocks, report steps)
    def add_attribute(self, key, obj):
        if self._attributes is None:
            self._attributes = {}
        self._attributes.setdefault(key, []).append(obj)

    def get_attributes(self, key):
        return self._attributes.get(key, []) if self._attributes else []

    # --- records (schema)
    def set_input_record(self, record):
        self._input_record = record
        return record

    def set_output_record(self, record):
        self._output_record = record
        return record

    def input_record(self):
        return self._input_record

    def output_record(self):
        return self._output_record

    # --- recording
    def __getattr__(self, op_type):
        """``net.<Op>``: a function recording ``Op`` (from then on found on the class, see _OpRecorder)."""
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        if not is_operator(op_type):
            known = sum(1 for _ in OPS)  # the count docs/ir.md and `dslc ops` show
            close = [n for n in OPS.suggest(op_type, ALIASES) if n not in _IR_ONLY]
            raise UnknownOperatorError(
                f"unknown operator {op_type!r}", user_location(),
                f"did you mean {' or '.join(repr(c) for c in close)}?" if close
                else f"`dslc ops` lists all {known} operators (those a net records and IR-only ones)")
        recorder = _OpRecorder(op_type)
        setattr(Net, op_type, recorder)
        return recorder.__get__(self)

    def _recorder(self, op_type):
        """What ``net.<op_type>`` gives: a function recording ``op_type`` here, located at its caller."""

        def recorder(inputs=None, outputs=None, **kwargs):
            # (depth 2: the search for the user's frame starts at recorder's caller)
            return self._record(op_type, inputs, outputs, kwargs, user_location(2))

        return recorder

    def _record(self, op_type, inputs, outputs, args, loc):
        """Record an ``op_type`` op; returns its output's reference, a tuple of them, or None.

        ``outputs``: names or references, a count (auto names ``<net>/<op>:<i>``), or None
        (one auto name ``<net>/<op>``, none for an op declared without results).
        """
        scope = _scope.prefix if _scope_used else ""  # CurrentNameScope(), inlined: this runs per op
        produced = self._produced
        if inputs is None:
            ins = ()
        else:
            ins = _blob_names(inputs, op_type, "inputs", loc, scope)
            external = self._external_inputs
            for name in ins:
                if name not in produced:
                    external[name] = None  # (an ordered set: an existing key keeps its place)
        if outputs is None:
            no_results = _NO_RESULTS.get(op_type)  # _has_no_results(), inlined: this runs for every op
            if no_results is None:
                no_results = _has_no_results(op_type)
            outs = () if no_results else (scope + self._next_name(op_type, None, scope),)
        elif isinstance(outputs, int) and not isinstance(outputs, bool):
            outs = []
            for i in range(outputs):
                outs.append(scope + self._next_name(op_type, i, scope))
            outs = tuple(outs)
        else:
            outs = _blob_names(outputs, op_type, "outputs", loc, scope)
        extra = {} if not args or args.keys().isdisjoint(SPECIAL_ARGS) else _special_args(op_type, args)
        self._ops.append(OpRecord(op_type, ins, outs, args, loc, extra))
        produced.update(outs)
        if len(outs) == 1:
            return _blob_ref(outs[0], self)
        return tuple([_blob_ref(n, self) for n in outs]) if outs else None

    def AddGradientOperators(self, ys, skip=0):
        """Record the backward ops for the losses ``ys``; returns {blob: gradient blob} (``w`` -> ``w_grad``).

        ``ys``: loss blobs, or {loss: its gradient blob (None: filled with 1)}. See dslc/gradients.py.
        """
        from dslc.gradients import add_gradient_ops  # (the reverse pass reads the op table's gradients)
        return add_gradient_ops(self, ys, user_location(2))

    def Const(self, array, blob_out=None, dtype=None):
        """Record a constant: a Python bool is a bool scalar, an int int64, a float float32.

        As in Caffe2 the fill op follows numpy's dtype: int32 and int64 keep their
        type, str is a string tensor, bool arrays are bool, and everything else
        (floats, and other integer widths such as uint8) becomes float32.
        """
        loc = user_location(2)  # (from Const's caller)
        if isinstance(array, bool):
            return self._record("ConstantFill", None, blob_out or 1,
                                {"dtype": DataType.BOOL, "value": array}, loc)
        try:
            arr = np.array(array, dtype=dtype)
        except (TypeError, ValueError) as e:
            raise TraceError(f"Const cannot make a tensor of {array!r}: {e}", loc) from None
        dt = arr.dtype
        kind = dt.kind
        if dt is _INT64:  # the common dtypes first, by identity: numpy shares their dtype objects
            op = "GivenTensorInt64Fill"
        elif dt is _FLOAT32:
            op = "GivenTensorFill"
        elif kind in "USO":
            op, arr = "GivenTensorStringFill", arr.astype(object)
        elif dt == _INT32:  # (a dtype object: comparing with np.int32 converts it on every call)
            op = "GivenTensorIntFill"
        elif dt == _INT64:
            op = "GivenTensorInt64Fill"
        elif kind == "b":
            op = "GivenTensorBoolFill"
        else:
            op, arr = "GivenTensorFill", arr.astype(np.float32, copy=False)  # arr is our own copy
        return self._record(op, None, blob_out or 1,
                            {"shape": list(arr.shape), "values": arr.reshape(-1)}, loc)

    def Python(self, f, grad_f=None, python_func_type=None, pass_workspace=False, grad_output_indices=None,
               grad_input_indices=None):
        """``net.Python(f)(inputs, outputs)``: call ``f(inputs, outputs)`` at run time.

        ``f`` may be a ``(builder, args, kwargs)`` tuple: the builder then runs once per
        instance of the op to make the function.
        """
        loc = user_location()
        if isinstance(f, tuple):
            if len(f) != 3 or not callable(f[0]):
                raise TraceError("a Python op builder must be a (builder, args, kwargs) tuple", loc)
            name = getattr(f[0], "__qualname__", "builder")
        elif callable(f):
            name = getattr(f, "__qualname__", type(f).__name__)
        else:
            raise TraceError(f"ops.Python needs a function, got {type(f).__name__}", loc)
        ref = pyrefs.register(f, name)

        def record(inputs=None, outputs=None, **kwargs):
            return self._record("Python", inputs, outputs if outputs is not None else [],
                                {"func": ref, "name": name, "pass_workspace": int(bool(pass_workspace)),
                                 **kwargs}, user_location())

        return record

    def LogInfo(self, *msgs):
        for m in msgs:
            blob = m if isinstance(m, BlobReference) else self.Const(str(m), self.NextName("log"))
            self.Print(blob, [])

    # --- composition
    def AppendNet(self, other: "Net") -> "Net":
        """Append ``other``'s ops; its external inputs not produced here become ours (attributes stay)."""
        self._extend_ops(other)
        self.AddExternalOutput(*other._external_outputs)
        return self

    def _extend_ops(self, other: "Net") -> None:
        """Append ``other``'s ops; its external inputs not produced here become ours."""
        for b in other._external_inputs:
            if b not in self._produced:
                self._external_inputs.setdefault(b)
        for op in other._ops:
            self._ops.append(op)
            self._produced.update(op.outputs)

    def Clone(self, name, blob_remap=None, op_id_mask=None, remap_funcs=None, keep_schema=True, update_external_list=False):
        """A copy of this net named ``name`` with blob names mapped through ``blob_remap``."""
        remap = {str(k): str(v) for k, v in (blob_remap or {}).items()}
        new = Net(name)
        for i, op in enumerate(self._ops):
            if op_id_mask is not None and i not in op_id_mask:
                continue
            new._ops.append(OpRecord(op.type, tuple(remap.get(b, b) for b in op.inputs),
                                     tuple(remap.get(b, b) for b in op.outputs), dict(op.args),
                                     op.loc, dict(op.extra)))
            new._produced.update(remap.get(b, b) for b in op.outputs)
        new._external_inputs = dict.fromkeys(remap.get(b, b) for b in self._external_inputs)
        new._external_outputs = [remap.get(b, b) for b in self._external_outputs]
        if self._attributes:
            new._attributes = {key: list(objs) for key, objs in self._attributes.items()}
        if keep_schema:
            new._input_record, new._output_record = self._input_record, self._output_record
        return new

    def ops(self) -> list[OpRecord]:
        return list(self._ops)


_IR_ONLY = frozenset(d.name for d in OPS if d.name[0].islower() or d.name == "Const")


_OpRecorder.owner = Net


def is_operator(op_type: str) -> bool:
    """Whether ``net.<op_type>(...)`` records an op (IR-only op names do not count)."""
    return (op_type in OPS or op_type in ALIASES) and op_type not in _IR_ONLY


IsOperator = is_operator


def IsOperatorWithEngine(op_type: str, engine: str) -> bool:
    """dslc has one implementation per operator: Caffe2's default engine."""
    return engine in ("", "DEFAULT") and is_operator(op_type)


def CreateOperator(operator_type, inputs, outputs, name="", control_input=None, device_option=None,
                   arg=None, engine=None, **kwargs) -> protoview.OperatorDef:
    """A read-only OperatorDef view of one operator (not recorded into any net).

    String blob names get the current NameScope, BlobReferences are taken as they are.
    """
    loc = user_location()
    scope = CurrentNameScope()
    ins = _blob_names(inputs, operator_type, "inputs", loc, scope)
    outs = _blob_names(outputs, operator_type, "outputs", loc, scope)
    control = _blob_names(control_input, operator_type, "control inputs", loc, scope)
    rec = OpRecord(str(operator_type), ins, outs, kwargs, loc,
                   {"name": name, "engine": engine or "", "control_input": control,
                    "device_option": device_option or CurrentDeviceScope()})
    return protoview.operator_view(rec)


def _builder_prefix() -> str:
    """The name of the innermost open NetBuilder ("" if none): a new net's name starts with it."""
    nb = _net_builder_class().current(required=False)
    return (nb.name or "") if nb is not None else ""


@functools.cache
def _net_builder_class():
    from dslc.net_builder import NetBuilder  # the builder module needs Net; resolve at first use
    return NetBuilder


# ----------------------------------------------------------------------------- steps


class ExecutionStep:
    """A step of an execution plan: nets run in order, or substeps (maybe concurrent).

    ``_items`` holds Nets, ExecutionSteps, and recorded NetBuilder blocks (loops,
    conditionals, stop checks), in program order.
    """

    def __init__(self, name, nets=None, num_iter=None):
        self._name = name or names.unique_step_name()
        self._items: list = []
        self._kind = None  # "nets" or "substeps"
        self._num_iter = None
        self._should_stop_blob = None
        self._only_once = None
        self._concurrent_substeps = None
        self._create_workspace = False
        self._num_concurrent_instances = None
        self._run_every_ms = None
        self._report_net = None
        self._report_interval = None
        self._used = False
        self._loc = user_location()
        if nets is not None:
            for n in (nets if isinstance(nets, (list, tuple)) else [nets]):
                self.AddNet(n)
        if num_iter is not None:
            self.SetIter(num_iter)

    def Name(self) -> str:
        return self._name

    def __repr__(self):
        return f"ExecutionStep({self._name!r})"

    def _check_mutable(self):
        if self._used:
            raise TraceError(f"step {self._name!r} cannot change after it was added to a plan or step",
                             user_location())

    def SetIter(self, num_iter):
        self._check_mutable()
        self._num_iter = int(num_iter)

    def SetShouldStopBlob(self, blob):
        self._check_mutable()
        self._should_stop_blob = str(blob)

    def SetOnlyOnce(self, only_once):
        self._check_mutable()
        self._only_once = bool(only_once)

    def SetConcurrentSubsteps(self, concurrent):
        self._check_mutable()
        self._concurrent_substeps = bool(concurrent)

    def SetCreateWorkspace(self, create):
        self._check_mutable()
        self._create_workspace = bool(create)

    def SetNumConcurrentInstances(self, n):
        self._check_mutable()
        self._num_concurrent_instances = int(n)

    def RunEveryMillis(self, interval):
        self._run_every_ms = int(interval)

    def SetReportNet(self, report_net, report_interval):
        self._check_mutable()
        self._report_net = report_net
        self._report_interval = report_interval

    def AddNet(self, net):
        self._check_mutable()
        if self._kind == "substeps":
            raise TraceError(f"step {self._name!r} has substeps; it cannot also have nets", user_location())
        if not isinstance(net, Net):
            raise TraceError(f"AddNet needs a Net, got {type(net).__name__}", user_location())
        self._kind = "nets"
        self._items.append(net)
        return self

    def AddSubstep(self, substep):
        self._check_mutable()
        if self._kind == "nets":
            raise TraceError(f"step {self._name!r} has nets; it cannot also have substeps", user_location())
        if isinstance(substep, ExecutionStep):
            if substep.is_empty():
                return self  # Caffe2 drops empty substeps silently
            substep._used = True
        self._kind = "substeps"
        self._items.append(substep)
        return self

    def _add_item(self, item):
        """Append a recorded builder block (loop, conditional, stop check)."""
        self._kind = self._kind or "substeps"
        self._items.append(item)

    def is_empty(self) -> bool:
        return not self._items

    def HasNets(self):
        return self._kind == "nets"

    def HasSubsteps(self):
        return self._kind == "substeps"

    def Nets(self):
        return [i for i in self._items if isinstance(i, Net)]

    def Substeps(self):
        return [i for i in self._items if not isinstance(i, Net)]

    def Proto(self):
        return self

    def get_all_attributes(self, key):
        return self.attributes_by_key((key,))[key]

    def attributes_by_key(self, keys) -> dict:
        """{key: ``get_all_attributes(key)``} for each of ``keys``, in one walk of the nets
        (a task asks for several keys, and its step may hold many thousand nets)."""
        found = {k: [] for k in keys}
        for net in iter_nets(self):
            attrs = net._attributes
            if attrs:  # most nets have none
                for k in keys:
                    objs = attrs.get(k)
                    if objs:
                        found[k] += objs
        return found


def iter_nets(item):
    """Every Net reachable from a step, builder block or net, in program order.

    Walked with a stack (nested generators cost a step per level for every net).
    """
    stack = [item]
    while stack:
        it = stack.pop()
        if isinstance(it, Net):
            yield it
            continue
        parts = getattr(it, "_items", None) or getattr(it, "_children", None) or ()
        extra_regions = getattr(it, "_extra_regions", None)  # If/While blocks only
        if extra_regions is not None:
            parts = list(parts) + list(extra_regions())
        stack.extend(reversed(parts))


def execution_step(default_name, steps_or_nets, num_iter=None, report_net=None, report_interval=None,
                   concurrent_substeps=None, should_stop_blob=None, only_once=None,
                   num_concurrent_instances=None, create_workspace=False, run_every_ms=None):
    """Make a step: a Net or list of Nets becomes a net step, anything else substeps."""
    loc = user_location()
    if num_iter is not None and should_stop_blob is not None:
        raise TraceError("execution_step takes num_iter or should_stop_blob, not both", loc)
    step = ExecutionStep(default_name)
    if should_stop_blob is not None:
        step.SetShouldStopBlob(should_stop_blob)
    elif num_iter is not None:
        step.SetIter(num_iter)
    if only_once is not None:
        step.SetOnlyOnce(only_once)
    if concurrent_substeps is not None:
        step.SetConcurrentSubsteps(concurrent_substeps)
    if num_concurrent_instances is not None:
        step.SetNumConcurrentInstances(num_concurrent_instances)
    if create_workspace:
        step.SetCreateWorkspace(True)
    if report_net is not None:
        step.SetReportNet(report_net, report_interval)
    if run_every_ms:
        step.RunEveryMillis(run_every_ms)
    if isinstance(steps_or_nets, ExecutionStep):
        step.AddSubstep(steps_or_nets)
    elif isinstance(steps_or_nets, Net):
        step.AddNet(steps_or_nets)
    elif isinstance(steps_or_nets, (list, tuple)):
        if steps_or_nets and all(isinstance(x, Net) for x in steps_or_nets):
            for n in steps_or_nets:
                step.AddNet(n)
        else:
            for x in steps_or_nets:
                step.AddSubstep(to_execution_step(x))
    elif steps_or_nets is not None:
        step.AddSubstep(to_execution_step(steps_or_nets))
    return step


def scoped_execution_step(name, *args, **kwargs):
    return execution_step(ScopedName(name) if name else name, *args, **kwargs)


def to_execution_step(step_or_nets, default_name=None):
    """A step from a step (as is), a NetBuilder (its recorded children), a Net or a list."""
    from dslc.net_builder import NetBuilder

    if isinstance(step_or_nets, ExecutionStep):
        return step_or_nets
    if isinstance(step_or_nets, NetBuilder):
        return step_or_nets.as_step(default_name)
    if getattr(step_or_nets, "_is_block", False):
        step = ExecutionStep(default_name)
        step._add_item(step_or_nets)
        return step
    name = default_name or getattr(step_or_nets, "name", None)
    if isinstance(name, str) or name is None:
        return execution_step(name, step_or_nets)
    return execution_step(default_name, step_or_nets)


class Plan:
    """An ordered list of top-level steps (what ``workspace.RunPlan`` runs)."""

    def __init__(self, name_or_step):
        if isinstance(name_or_step, ExecutionStep):
            self._name, self._steps = name_or_step.Name(), [name_or_step]
        else:
            self._name, self._steps = str(name_or_step), []

    def Name(self):
        return self._name

    def AddStep(self, step):
        step = to_execution_step(step)
        if not step.is_empty():
            step._used = True
            self._steps.append(step)

    def Steps(self):
        return list(self._steps)

    def Nets(self):
        seen = {}
        for s in self._steps:
            for n in iter_nets(s):
                seen.setdefault(n.Name(), n)
        return list(seen.values())

    def AddNets(self, nets):
        pass  # nets are found through the steps

    def Proto(self):
        return self
