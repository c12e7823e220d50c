"""Blob access, structured control flow and execution-plan operators.

Blobs are named workspace slots: ``load``/``store`` are the only ops that touch them.
Control flow is structured (``for``, ``loop``, ``if``); ``break_if`` may appear only
directly in a loop body. Plan ops mirror Caffe2's execution plan: a group of
concurrent tasks, each with its phases and instance count.
"""
from __future__ import annotations

from ..opdef import BLOB, CONTROL, PLAN, REQUIRED, TERMINATOR, Effect, declare, type_error
from ..types import BOOL, TensorType

_BLOB_R = (Effect("blob", "read"),)
_BLOB_W = (Effect("blob", "write"),)

# Result types of these ops are given by whoever creates them (infer=None).
declare("load", 0, None, attrs={"blob": REQUIRED, "optional": 0}, traits={BLOB}, effects=_BLOB_R,
        symbol="blob",
        doc="read the blob's current value (an error if nothing wrote it, unless optional: then "
            "the value is 'unset' and a store of it leaves the blob unset)")
declare("flag", 0, lambda t, a, n: [BOOL], attrs={"blob": REQUIRED}, traits={BLOB},
        effects=_BLOB_R, symbol="blob",
        doc="a stop flag: the blob's bool value, False if nothing wrote it yet")
declare("store", 1, lambda t, a, n: [], results=(0, 0), attrs={"blob": REQUIRED}, traits={BLOB},
        effects=_BLOB_W, symbol="blob", doc="write the value into the blob")
declare("defer", (0, None), lambda t, a, n: [], results=(0, 0), attrs={"blob": REQUIRED}, regions=("body",),
        traits={BLOB}, effects=_BLOB_W, symbol="blob",
        doc="write into the blob the value the body yields, computed only when something reads the blob "
            "(dce makes these of a store of a value nothing else uses: FCGradient's dX); the body is one "
            "pure op of the body args (the operands) and a yield of one of its results")


def _cond(name, t):
    if isinstance(t, TensorType) and t.dtype not in (None, "bool"):
        type_error(f"{name} needs a bool condition, got {t}",
                   "compare with GE/LT/EQ... to get a bool, or Cast(to=core.DataType.BOOL)")
    if isinstance(t, TensorType) and t.shape not in (None, (), (1,)):
        type_error(f"{name} needs a scalar bool condition, got shape {list(t.shape)}")


def _for(types, attrs, n):
    count = types[0]
    if isinstance(count, TensorType) and count.dtype not in (None, "i32", "i64"):
        type_error(f"a loop count must be an integer, got {count}",
                   "pass an int or an int64 blob to ops.loop(...)")
    return list(types[1:])  # carried types start as the initial values' (passes may widen them)


def _if(types, attrs, n):
    _cond("if", types[0])
    return None  # results given by the creator


declare("for", (1, None), _for, results=(0, None), regions=("body",), traits={CONTROL},
        doc="run the body count times; body args: (i64 index, carried values...)")
declare("loop", (0, None), lambda t, a, n: list(t), results=(0, None), regions=("body",),
        traits={CONTROL}, doc="run the body until a break_if fires; body args: carried values")
declare("if", 1, _if, results=(0, None), regions=("then", "else"), traits={CONTROL},
        doc="run `then` if the scalar bool condition holds, else `else`")
declare("yield", (0, None), lambda t, a, n: [], results=(0, 0), traits={TERMINATOR, CONTROL},
        doc="end a region, passing its results (carried values, if results)")


def _break_if(types, attrs, n):
    _cond("break_if", types[0])
    return []


declare("break_if", (1, None), _break_if, results=(0, 0), traits={CONTROL},
        doc="leave the enclosing loop when the condition holds; operands after it are the "
            "loop's results")

declare("module", 0, lambda t, a, n: [], results=(0, 0), regions=("body",), traits={PLAN},
        attrs={"source": "", "outputs": [], "until": []},
        doc="a compiled runnable; `outputs` names what it fetches: [name, @blob, ...] lists (a "
            "job file's output names, which `dslc run` of the IR text prints); `until`: a Job's "
            "epoch group, which runs again until one of these blobs holds true")
declare("group", 0, lambda t, a, n: [], results=(0, 0), regions=("init", "body", "exit"),
        traits={PLAN}, attrs={"node": "local", "existing": []},
        doc="node init, then the tasks in the body run concurrently, then node exit; `existing` "
            "lists the blobs the module uses that were already in the workspace")
declare("task", 0, lambda t, a, n: [], results=(0, 0),
        regions=("init", "instance_init", "body", "instance_exit", "exit"), traits={PLAN},
        attrs={"name": REQUIRED, "instances": 1, "workspace": "private", "node": "local",
               "outputs": []},
        symbol="name",
        doc="task init once, then `instances` concurrent runs of instance_init/body/"
            "instance_exit (each in its own workspace when > 1), then task exit once")
declare("parallel", 0, lambda t, a, n: [], results=(0, 0), regions=("*",), traits={PLAN},
        attrs={"instances": 1},
        doc="run every region concurrently (each `instances` times) and join")
declare("scope", 0, lambda t, a, n: [], results=(0, 0), regions=("body",), traits={PLAN},
        doc="run the body in a fresh child workspace, dropped afterwards")
declare("reporting", 0, lambda t, a, n: [], results=(0, 0), regions=("*",), traits={PLAN},
        attrs={"intervals_ms": REQUIRED},
        doc="run the first region; meanwhile run each other region every interval, and once "
            "more at the end")
