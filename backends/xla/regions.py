"""Choosing what the xla backend compiles: runs of a region's ops that XLA can express.

A run is consecutive ops of one region, each with an xla kernel (``kernels.KERNELS``)
that accepts it, over tensors of a known numeric dtype and a fully known shape. Blob
loads met inside a run go before it (as numba's islands do: the loads read what they
would have read, since the run touches no blob), so a training step (forward, backward,
updates) is one function. A run becomes one ``jax.jit`` function if its ops produce at
least ``DSLC_XLA_MIN_WORK`` elements (default 10,000; smaller ones cost more in a call
than they save). Each op left out is counted with its reason, for ``dslc compile``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dslc.ir import Operation, Region, settings

from .kernels import KERNELS, Refused, static

HOISTED = ("load", "must")
MIN_WORK = None  # DSLC_XLA_MIN_WORK, read when first needed (tests set 0)


def min_work_default() -> int:
    return MIN_WORK if MIN_WORK is not None else settings.count("DSLC_XLA_MIN_WORK", 10_000)


TRIAL_RUNS = None  # DSLC_XLA_TRIAL_RUNS, read when first needed (the suite sets 0: see emitter.RunCall)


def trial_runs() -> int:
    return TRIAL_RUNS if TRIAL_RUNS is not None else settings.count("DSLC_XLA_TRIAL_RUNS", 3)


@dataclass
class Run:
    ops: list                                      # consecutive ops of one region
    kernels: list = field(default_factory=list)    # (op, fn) for each op, in order
    inputs: list = field(default_factory=list)     # values used inside, defined before it
    outputs: list = field(default_factory=list)    # its results used after it
    work: int = 0                                  # elements its ops produce

    def where(self) -> str:
        first = next((o for o in self.ops if o.name != "Const"), self.ops[0])
        return f"from {first.name} at {first.loc}"


def why_not(op: Operation):
    """(the op's jax function, None), or (None, why XLA does not take it)."""
    if op.name == "Const":
        return (None, None) if static(op.result) else (None, "a constant XLA cannot hold")
    if op.name == "for":
        return _loop(op)
    if op.name == "defer":
        return None, "workspace access"
    if op.regions:
        return None, "control flow stays on the interpreter (a for of a constant count is compiled)"
    factory = KERNELS.get(op.name)
    if factory is None:
        if op.name in ("load", "store", "flag", "must"):
            return None, "workspace access"
        if op.opdef.effects:
            return None, f"{op.opdef.effects[0].resource} effects"
        return None, "no xla kernel"
    bad = [v for v in list(op.operands) + list(op.results) if not static(v)]
    if bad:
        return None, "a value of a type XLA cannot hold (unknown shape or dtype, string, float16)"
    try:
        return factory(op), None
    except Refused as e:
        return None, str(e)


def _loop(op: Operation):
    """A ``for`` of a constant count of at least 1 whose body XLA takes whole: its ``Loop``."""
    owner = getattr(op.operands[0], "owner", None)
    if owner is None or owner.name != "Const" or int(owner.attrs["value"]) < 1:
        return None, "a loop whose count is not a constant of at least 1"
    body = op.regions[0]
    if not all(static(v) for v in list(op.results) + list(body.args)):
        return None, "a loop carrying a value of a type XLA cannot hold"
    steps = []
    for o in body.ops:
        if o.name in ("yield", "must"):  # (inside, a `must` is the identity: see Loop)
            steps.append((o, None))
            continue
        fn, why = why_not(o)
        if why is not None:
            return None, f"a loop whose body holds {o.name} ({why})"
        steps.append((o, fn))
    return Loop(op, int(owner.attrs["value"]), steps), None


@dataclass
class Loop:
    """A ``for`` run as ``lax.fori_loop``. A carried value the body does not read before it
    writes it (a step's activations and gradients, unset before the first run) starts as
    zeros: the count is at least 1, so that start is never seen. A ``must`` inside is the
    identity: an unset blob is an unset input of the run, which then runs on the interpreter."""

    op: Operation
    trips: int
    steps: list

    def unread(self) -> list:
        return [v for v, a in zip(self.op.operands[1:], self.op.regions[0].args[1:]) if not a.uses]


def elements(op: Operation) -> int:
    if op.name == "for":
        trips = int(op.operands[0].owner.attrs["value"])
        return trips * sum(elements(o) for o in op.regions[0].ops if o.name not in ("yield", "must", "Const"))
    n = 0
    for r in op.results:
        size = 1
        for d in r.type.shape:
            size *= d
        n += size
    return n


def partition(r: Region, interpreted, min_work=None) -> list:
    """The region's ops, with worthwhile runs replaced by ``Run``s; ``interpreted(op, why)``
    hears of every other op (``why`` "cold" for one in a run under the work threshold)."""
    min_work = min_work_default() if min_work is None else min_work
    out, run, made, may_fail = [], [], set(), [False]

    def close():
        body = [(o, fn) for o, fn in run if o.name not in HOISTED]
        loads = [o for o, _ in run if o.name in HOISTED]
        work = sum(elements(o) for o, _ in body if o.name != "Const")
        if any(o.name != "Const" for o, _ in body) and work >= min_work:
            got = Run([o for o, _ in body], body, work=work)
            _connect(got)
            out.extend(loads)
            out.append(got)
        else:
            for o, _ in run:
                out.append(o)
                if o.name not in HOISTED and o.name != "Const":
                    interpreted(o, "cold")
        run.clear()
        made.clear()
        may_fail[0] = False

    for op in r.ops:
        fn, why = why_not(op)
        if why is None:
            run.append((op, fn))
            made.update(op.results)
            may_fail[0] = may_fail[0] or op.opdef.fails(op)
            continue
        if run and op.name in HOISTED and not may_fail[0] and not any(v in made for v in op.operands):
            run.append((op, None))  # (a load before the run: it reads what it would have read)
            continue
        close()
        out.append(op)
        if op.name not in ("yield", "break_if"):
            interpreted(op, why)
    close()
    return out


def _connect(run: Run) -> None:
    inside = set(run.ops)
    nested = [o for op in run.ops for o in op.walk()]
    defined = {v for o in nested for v in o.results} | {a for o in nested for r in o.regions for a in r.args}
    unread = {v for _, fn in run.kernels if isinstance(fn, Loop) for v in fn.unread()}
    for o in nested:
        for k, v in enumerate(o.operands):
            if o.name == "for" and k > 0 and v in unread:
                continue  # (a loop's start value it never reads: not an input)
            if v not in defined and v not in run.inputs:
                run.inputs.append(v)
    for o in run.ops:
        if o.name == "Const":
            continue  # the interpreter binds constants itself: users outside read them directly
        for res in o.results:
            if any(user not in inside for user, _ in res.uses):
                run.outputs.append(res)
