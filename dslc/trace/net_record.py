"""Recording ops into a Net: ``net.<Op>(...)``, ``net.Const``, ``net.Python``, ``core.CreateOperator``.

``NetRecording`` is the half of Net that turns calls into OpRecords (Net, in
dslc/trace/net.py, keeps the names, external lists and composition). Recording runs for
every op of every job, so its common paths are written for speed (see the comments).
"""
from __future__ import annotations

import numpy as np

from dslc.trace import netdef
from dslc.trace import blobref
from dslc.trace import devices as _devices
from dslc.trace.blobref import BlobReference, CurrentNameScope, GradientSlice, _blob_names, _blob_ref
from dslc.trace.devices import CurrentDeviceScope
from dslc.ir.diagnostics import TraceError, UnknownOperatorError
from dslc.ir.opdef import OPS
from dslc.ir import pyrefs
from dslc.trace.oprecord import (ALIASES, SPECIAL_ARGS, DataType, OpRecord, _IR_ONLY, _NO_RESULTS, _has_no_results,
                           _special_args, is_operator)
from dslc.trace.tracing import user_location

_INT32, _INT64, _FLOAT32 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32)


# The reverse pass (dslc.autodiff.gradients, which builds on the tracer) installs itself
# here when imported; every Caffe2-named module that makes nets imports it.
_reverse_pass = None


def set_reverse_pass(reverse_pass) -> None:
    global _reverse_pass
    _reverse_pass = reverse_pass


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
        if type(net) is not self.owner and self.overridden(net):
            return self.overridden(net)(net, self.name)
        return net._recorder(self.name)


_immediate: list = [None]  # the function running each op as it is recorded (dslc/driver/immediate.py)


def set_immediate_hook(run) -> None:
    _immediate[0] = run


class NetRecording:
    """The recording methods of Net (a mixin: Net adds the state they use)."""

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
        setattr(_OpRecorder.owner, op_type, recorder)  # (on Net itself: net_builder reads vars(Net))
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
        # CurrentNameScope(), inlined: this runs per op
        scope = blobref._scope.prefix if blobref._scope_used else ""
        proto = self._proto
        if proto is not None and len(proto.op) != len(self._op_list):
            self._pull()  # (ops added or removed through Proto(): their outputs count as made)
        produced = self._produced
        n_external = len(self._external_inputs)
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
        device = _devices._state.option  # (CurrentDeviceScope(), inlined: an op made in a scope runs there)
        if device is not None and "device_option" not in extra:
            extra["device_option"] = device
        rec = OpRecord(op_type, ins, outs, args, loc, extra)
        self._op_list.append(rec)
        produced.update(outs)
        if proto is not None:
            self._mirror(rec, list(self._external_inputs)[n_external:])
        if _immediate[0] is not None:  # (workspace.StartImmediate: the op runs now too)
            _immediate[0](rec)
        if len(outs) == 1:
            return _blob_ref(outs[0], self)
        return tuple([_blob_ref(n, self) for n in outs]) if outs else None

    def AddGradientOperators(self, ys, skip=0):
        """Record the backward ops for the losses ``ys``; returns {blob: gradient blob} (``w`` -> ``w_grad``).

        ``ys``: loss blobs, or {loss: its gradient blob (None: filled with 1)}. See dslc/autodiff/gradients.py.
        """
        if _reverse_pass is None:
            raise TraceError("AddGradientOperators needs dslc's autodiff, which is not loaded", user_location(2),
                             "import dslc.core (or dslc.autodiff) before recording gradients")
        return _reverse_pass(self, ys, user_location(2))

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
        instance of the op to make the function. ``grad_f`` is its gradient, a Python op of
        its own (see ir/ops/effects.py): ``grad_f(inputs + outputs + output gradients,
        input gradients)``, limited to ``grad_output_indices`` / ``grad_input_indices``.
        """
        fixed = _python_args(f, pass_workspace, user_location(), grad_f, grad_output_indices, grad_input_indices)

        def record(inputs=None, outputs=None, **kwargs):
            return self._record("Python", inputs, outputs if outputs is not None else [],
                                {**fixed, **kwargs}, user_location())

        return record

    def DeduplicateGradientSlices(self, g, aggregator="sum"):
        """A sparse gradient with each row once: ``Unique`` of its indices, then its values
        summed (``aggregator="sum"``) or averaged (``"mean"``) per row with
        ``UnsortedSegmentSum`` / ``UnsortedSegmentMean``, as Caffe2's Net method records it.
        The optimizers' ``sparse_dedup_aggregator`` puts it before a sparse update, so a row
        the batch reads several times takes one update."""
        loc = user_location()
        if not isinstance(g, GradientSlice):
            raise TraceError(f"DeduplicateGradientSlices takes a sparse gradient (GradientSlice), got "
                             f"{type(g).__name__}", loc)
        ops = {"sum": "UnsortedSegmentSum", "mean": "UnsortedSegmentMean"}
        op = ops.get(str(aggregator).lower())
        if op is None:
            raise TraceError(f"sparse_dedup_aggregator {aggregator!r} is not supported", loc,
                             "use 'sum' or 'mean'")
        unique, remapping = self._record("Unique", [g.indices], 2, {"engine": "SparseHash"}, loc)
        return GradientSlice(indices=unique, values=self._record(op, [g.values, remapping], 1, {}, loc))

    def LogInfo(self, *msgs):
        for m in msgs:
            blob = m if isinstance(m, BlobReference) else self.Const(str(m), self.NextName("log"))
            self.Print(blob, [])


def _python_args(f, pass_workspace, loc, grad_f=None, grad_output_indices=None, grad_input_indices=None) -> dict:
    """The arguments of a Python op calling ``f`` (a function, or a (builder, args, kwargs)
    tuple), and its gradient's."""
    def named(fn, what):
        if isinstance(fn, tuple):
            if len(fn) != 3 or not callable(fn[0]):
                raise TraceError(f"a Python op's {what} builder must be a (builder, args, kwargs) tuple", loc)
            return getattr(fn[0], "__qualname__", "builder")
        if callable(fn):
            return getattr(fn, "__qualname__", type(fn).__name__)
        raise TraceError(f"ops.Python needs a function as its {what}, got {type(fn).__name__}", loc)

    name = named(f, "function")
    args = {"func": pyrefs.register(f, name), "name": name, "pass_workspace": int(bool(pass_workspace))}
    if grad_f is not None:
        args["grad_func"] = pyrefs.register(grad_f, named(grad_f, "gradient"))
        if grad_output_indices is not None:
            args["grad_output_indices"] = [int(k) for k in grad_output_indices]
        if grad_input_indices is not None:
            args["grad_input_indices"] = [int(k) for k in grad_input_indices]
    return args


def CreatePythonOperator(f, inputs, outputs, grad_f=None, pass_workspace=False, python_func_type=None,
                         *args, **kwargs):
    """A Python op calling ``f(inputs, outputs)`` (``f(inputs, outputs, workspace)`` with
    ``pass_workspace``) as an OperatorDef message; see ``CreateOperator``."""
    loc = user_location()
    op_name = kwargs.pop("name", "")
    msg = CreateOperator("Python", inputs, outputs, name=op_name, **kwargs)
    fixed = _python_args(f, pass_workspace, loc, grad_f)
    for k, v in fixed.items():
        netdef.set_argument(msg.arg.add(), k, netdef.register_object(v) if k in ("func", "grad_func") else v)
    return msg


def CreateOperator(operator_type, inputs, outputs, name="", control_input=None, device_option=None,
                   arg=None, engine=None, **kwargs):
    """One operator as an OperatorDef message (not recorded into any net); ``arg``: Argument
    messages added after the keyword arguments. Run it with ``workspace.RunOperatorOnce``.

    String blob names get the current NameScope, BlobReferences are taken as they are.
    """
    loc = user_location()
    scope = CurrentNameScope()
    ins = _blob_names(inputs, operator_type, "inputs", loc, scope)
    outs = _blob_names(outputs, operator_type, "outputs", loc, scope)
    control = _blob_names(control_input, operator_type, "control inputs", loc, scope)
    # (an argument given as an array is its list, as the message will hold it)
    kwargs = {k: v.tolist() if hasattr(v, "tolist") and getattr(v, "ndim", 0) else v
              for k, v in kwargs.items()}
    rec = OpRecord(str(operator_type), ins, outs, kwargs, loc,
                   {"name": name, "engine": engine or "", "control_input": control,
                    "device_option": device_option or CurrentDeviceScope()})
    msg = netdef.op_message(rec)
    if arg:
        msg.arg.extend(arg)
    return msg
