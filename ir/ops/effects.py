"""Operators with side effects: counters, timers, printing, Python ops, workspace queries."""
from __future__ import annotations

from ..opdef import REQUIRED, Effect, declare, type_error
from ..types import ANY, BOOL, COUNTER, I64, TIMER, HandleType, TensorType

W_COUNTER = (Effect("counter", "write"),)
R_COUNTER = (Effect("counter", "read"),)
W_TIMER = (Effect("timer", "write"),)


def _handle(name, kind, types):
    for i, t in enumerate(types):
        if t != ANY and t != HandleType(kind):
            type_error(f"{name} input {i} must be a {kind} (made by Create{kind.title()} or "
                       f"{'TimerBegin' if kind == 'timer' else 'CreateCounter'}), got {t}")


def _counter_op(name, result, effects, results=(1, 1), attrs=None, doc=""):
    def infer(types, attrs, n):
        _handle(name, "counter", types)
        return [result] * n
    declare(name, 1, infer, results=results, effects=effects, attrs=attrs or {}, doc=doc)


def _create_counter(types, attrs, n):
    if int(attrs["init_count"]) < 0:
        type_error(f"CreateCounter init_count must be >= 0, got {attrs['init_count']}")
    return [COUNTER]


declare("CreateCounter", 0, _create_counter, attrs={"init_count": 0},
        effects=(Effect("counter", "alloc"),), doc="a new atomic int64 counter set to init_count")
_counter_op("ResetCounter", I64, W_COUNTER, results=(0, 1), attrs={"init_count": 0},
            doc="set the counter to init_count; optional output: the previous value")
_counter_op("CountUp", I64, W_COUNTER, doc="atomically increment; output the value before")
_counter_op("CountDown", BOOL, W_COUNTER,
            doc="atomically decrement; output True iff the count was already <= 0")
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

declare("Print", 1, lambda t, a, n: [], results=(0, 0),
        attrs={"to_file": 0, "limit": 0, "every_n": 1, "blob": ""},
        effects=(Effect("io", "write"),), doc="write the tensor to the job's log (stderr)")

declare("Python", (0, None), lambda t, a, n: [ANY] * n, results=(0, None),
        attrs={"func": REQUIRED, "name": "", "pass_workspace": 0},
        effects=(Effect("python", "write"),),
        doc="call a Python function on (inputs, outputs) tensor wrappers; a builder tuple is "
            "called once per instance")

declare("GetAllBlobNames", 0, lambda t, a, n: [TensorType("str", (None,))],
        attrs={"include_shared": 1}, effects=(Effect("workspace", "read"),),
        doc="names of the blobs in the running workspace (sorted); parents' too if include_shared")
