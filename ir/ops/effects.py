"""Operators with side effects: counters, timers, printing, Python ops, workspace queries."""
from __future__ import annotations

from ..gradients import GradOp, gradient
from ..opdef import REQUIRED, Effect, declare, type_error
from ..pyrefs import PyRef
from ..types import ANY, BOOL, COUNTER, I64, TIMER, HandleType, TensorType

W_COUNTER = (Effect("counter", "write"),)
R_COUNTER = (Effect("counter", "read"),)
W_TIMER = (Effect("timer", "write"),)


_MAKER = {"counter": "CreateCounter", "timer": "TimerBegin"}


def _handle(name, kind, types):
    """Every operand must be a ``kind`` handle (or of unknown type, checked when run)."""
    for i, t in enumerate(types):
        if t != ANY and t != HandleType(kind):
            type_error(f"{name} input {i} must be a {kind}, got {t}",
                       f"pass the blob that {_MAKER[kind]} wrote")


def _init_count(name, attrs):
    if int(attrs["init_count"]) < 0:
        type_error(f"{name} init_count must be >= 0, got {attrs['init_count']}",
                   "counters start at 0 or more; count down from a positive init_count instead")


def _counter_op(name, result, effects, results=(1, 1), attrs=None, doc=""):
    def infer(types, attrs, n):
        _handle(name, "counter", types)
        if "init_count" in attrs:
            _init_count(name, attrs)
        return [result] * n
    declare(name, 1, infer, results=results, effects=effects, attrs=attrs or {}, doc=doc)


def _create_counter(types, attrs, n):
    _init_count("CreateCounter", attrs)
    return [COUNTER]


declare("CreateCounter", 0, _create_counter, attrs={"init_count": 0},
        effects=(Effect("counter", "alloc"),), doc="a new atomic int64 counter set to init_count")
_counter_op("ResetCounter", I64, W_COUNTER, results=(0, 1), attrs={"init_count": 0},
            doc="set the counter to init_count; optional output: the previous value")
_counter_op("CountUp", I64, W_COUNTER, doc="atomically increment; output the value before")
_counter_op("CountDown", BOOL, W_COUNTER,
            doc="atomically decrement (even below 0); output True iff the count was already <= 0")
_counter_op("RetrieveCount", I64, R_COUNTER, doc="the counter's current value")
_counter_op("CheckCounterDone", BOOL, R_COUNTER, doc="True iff the count is <= 0")

declare("TimerBegin", 0, lambda t, a, n: [TIMER], attrs={"counter_name": ""},
        effects=(Effect("timer", "alloc"),), doc="start this op's own wall-clock timer; output its handle")


def _timer_op(name, result, doc):
    def infer(types, attrs, n):
        _handle(name, "timer", types)
        return [result] if result else []
    declare(name, 1, infer, results=(1, 1) if result else (0, 0), effects=W_TIMER, doc=doc)


_timer_op("TimerEnd", None, "stop the timer (it must be running)")
_timer_op("TimerGet", I64, "nanoseconds since the timer started, int64 scalar")
_timer_op("TimerGetAndEnd", TensorType("i64", (1,)), "nanoseconds since start as int64[1], then stop")

def _print(types, attrs, n):
    if int(attrs["every_n"]) < 1:
        type_error(f"Print every_n must be >= 1, got {attrs['every_n']}", "use every_n=1 to print every run")
    return []


declare("Print", 1, _print, results=(0, 0),
        attrs={"to_file": 0, "limit": 0, "every_n": 1, "blob": ""},
        effects=(Effect("io", "write"),),
        doc="write `blob: values` to the backend's log (LocalSession(log=...), default stderr) on "
            "runs 1, every_n+1, ...; at most `limit` values if limit > 0; with to_file, a line in "
            "Caffe2's form to <root folder>/<blob>.log")

def _python(types, attrs, n):
    for key in ("func", "grad_func"):  # (IR text or a NetDef may put anything there)
        if not isinstance(attrs[key], PyRef) and (key == "func" or attrs[key] is not None):
            type_error(f"{key} must name a Python function (pyref<\"name\", \"module\">), "
                       f"got {type(attrs[key]).__name__} {str(attrs[key])[:80]!r}",
                       "write it as pyref<\"f\", \"mymodule\"> (dslc ir -o writes it so), or build the op "
                       "with ops.Python(f) in a job file")
    return [ANY] * n


declare("Python", (0, None), _python, results=(0, None),
        attrs={"func": REQUIRED, "name": "", "pass_workspace": 0, "grad_func": None,
               "grad_output_indices": None, "grad_input_indices": None},
        effects=(Effect("python", "write"),),
        doc="call a Python function on (inputs, outputs) tensor wrappers; a builder tuple is "
            "called once per instance")


@gradient("Python")
def _(g):
    """The gradient of a Python op is a Python op calling its ``grad_func`` on (inputs,
    outputs, the outputs' gradients) and writing the inputs' gradients (Caffe2's
    PythonGradient); ``grad_output_indices`` / ``grad_input_indices`` pick which."""
    grad = g.args.get("grad_func")
    if grad is None:
        type_error(f"the Python op {g.args.get('name') or ''!r} has no gradient function",
                   "pass grad_f=... to net.Python(f, grad_f=...), or StopGradient its outputs")
    outs = g.args.get("grad_output_indices")
    outs = range(len(g.O)) if outs is None else outs
    ins = g.args.get("grad_input_indices")
    ins = range(len(g.I)) if ins is None else ins
    missing = [g.O[k] for k in outs if g.GO[k] is None]
    if missing:
        type_error(f"the gradient of Python op {g.args.get('name') or ''!r} needs the gradients of "
                   f"{', '.join(map(repr, missing))}, which no loss depends on",
                   "name the outputs that have gradients with grad_output_indices=[...]")
    return [GradOp("Python", list(g.I) + list(g.O) + [g.GO[k] for k in outs], [g.GI[k] for k in ins],
                   {"func": grad, "name": f"{g.args.get('name', '')}_grad",
                    "pass_workspace": g.args.get("pass_workspace", 0)})]

declare("GetAllBlobNames", 0, lambda t, a, n: [TensorType("str", (None,))],
        attrs={"include_shared": 1}, effects=(Effect("workspace", "read"),),
        doc="names of the blobs in the running workspace (sorted); parents' too if include_shared")
declare("EstimateAllBlobSizes", 0, lambda t, a, n: [TensorType("str", (None,)), TensorType("i64", (None,))],
        results=2, attrs={"include_shared": 1, "options": ""}, effects=(Effect("workspace", "read"),),
        doc="names of the blobs in the running workspace (its outputs among them) and, for each, Caffe2's "
            "estimate of its serialized bytes (options: a SerializationOptions message, per-blob chunk_size)")
