"""Caffe2's ``control`` module: loops and conditionals over nets and steps, as steps.

Each function returns an ExecutionStep built from what execution steps already
have, the way Caffe2 builds them: a condition is a bool blob, or a net whose last
external output is one; a loop is a step that stops when its stop blob is true
(checked after each of its nets or substeps), a conditional is such a step with
``only_once``. The lowering turns these into the structured IR the NetBuilder
forms give (``loop { ...; break_if }``, ``if``, ``for``), so nothing here runs
anything or needs an op of its own. ``For`` is a counted step, lowered to ``for``
like ``ops.loop(n)`` (Caffe2 counts down a counter blob instead).

    step = control.While("w", cond_net, body_net)   # cond_net's last output: a bool
    plan.AddStep(step); workspace.RunPlan(plan)
"""
from __future__ import annotations

from dslc import core
from dslc.trace import names
from dslc.core import BlobReference, ExecutionStep, Net
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location

_RELATIONS = ("And", "Or", "Xor")


def _items(given: tuple, what: str) -> list:
    """The nets or steps of a call: ``f(a, b)``, ``f([a, b])`` and ``f(a)`` all give [a, ...]
    (a tuple is one item: BoolNet's and Switch's pairs are tuples)."""
    if not given:
        raise TraceError(f"control.{what} needs at least one net or step", user_location(),
                         "pass nets or steps, one by one or as a list")
    if len(given) == 1:
        return list(given[0]) if isinstance(given[0], list) else [given[0]]
    return list(given)


def _only_nets(items: list) -> bool:
    return all(isinstance(n, Net) for n in items)


def _with_nets(body, nets: list, first: bool) -> list:
    """``body`` (nets or steps) with ``nets`` run before it (``first``) or after it.

    Nets join a list of nets as they are; a body with steps gets them as one more step.
    """
    body = _items((body,), "loop body")
    if not _only_nets(body):
        nets = [Do("prepend" if first else "append", nets)]
    return nets + body if first else body + nets


def _step(kind: str, name: str, items, **flags) -> ExecutionStep:
    return core.scoped_execution_step(names.unique_control_step_name(kind, name), items, **flags)


def _check_condition(cond, what: str):
    if not isinstance(cond, (Net, BlobReference, str)):
        raise TraceError(f"the condition of control.{what} must be a bool blob or a Net, "
                         f"got {type(cond).__name__}", user_location(),
                         "pass the blob, or a net whose last external output is the bool condition")


# ----------------------------------------------------------------------------- condition nets


def GetConditionBlobFromNet(condition_net: Net) -> BlobReference:
    """The condition a net computes: its last external output (a bool blob)."""
    outs = condition_net.Proto().external_output
    if not outs:
        raise TraceError(f"condition net {condition_net.Name()!r} has no external output", user_location(),
                         "call net.AddExternalOutput(cond) with the bool blob it computes")
    return BlobReference(outs[-1])


def BoolNet(*blobs_with_bool_value) -> Net:
    """A net setting each ``(blob, value)`` pair's blob to the bool constant (its external outputs)."""
    net = Net("bool_net")
    for pair in _items(blobs_with_bool_value, "BoolNet"):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TraceError(f"BoolNet takes (blob, bool) pairs, got {pair!r}", user_location(),
                             "write BoolNet(('done', False), ...)")
        blob, value = pair
        out = net.ConstantFill([], [blob], shape=[], value=bool(value), dtype=core.DataType.BOOL)
        net.AddExternalOutput(out)
    return net


def NotNet(condition_blob_or_net):
    """A net computing ``not cond`` and that result's blob."""
    _check_condition(condition_blob_or_net, "NotNet")
    cond = condition_blob_or_net
    if isinstance(cond, Net):
        cond = GetConditionBlobFromNet(cond)
    net = Net("not_net")
    out = net.Not(cond)
    net.AddExternalOutput(out)
    return net, out


def _copy_condition_net(condition_blob):
    net = Net("copy_condition_blob_net")
    out = net.Copy(condition_blob)
    net.AddExternalOutput(out)
    return net, out


def _relation(relation: str) -> str:
    if relation not in _RELATIONS:
        raise TraceError(f"unknown relation {relation!r} between conditions", user_location(2),
                         f"use one of {', '.join(_RELATIONS)}")
    return relation


def MergeConditionNets(name, condition_nets, relation):
    """One net running every condition net's ops, then combining their conditions with ``relation``."""
    if not isinstance(condition_nets, list):
        return condition_nets
    if len(condition_nets) <= 1:
        return condition_nets[0] if condition_nets else None
    relation = _relation(relation)
    merged = Net(name)
    last = None
    for net in condition_nets:
        merged._extend_ops(net)
        for key, objs in (net._attributes or {}).items():
            for obj in objs:
                merged.add_attribute(key, obj)
        cond = GetConditionBlobFromNet(net)
        last = cond if last is None else getattr(merged, relation)([last, cond])
    merged.AddExternalOutput(last)
    return merged


def CombineConditions(name, condition_nets, relation):
    """A net combining the conditions the nets computed (it does not run their ops)."""
    if not condition_nets:
        return None
    if not isinstance(condition_nets, list):
        raise TraceError("CombineConditions needs a list of condition nets", user_location(),
                         "pass [net1, net2, ...]")
    if len(condition_nets) == 1:
        return _copy_condition_net(GetConditionBlobFromNet(condition_nets[0]))[0]
    relation = _relation(relation)
    combined = Net(name)
    last = None
    for net in condition_nets:
        cond = GetConditionBlobFromNet(net)
        last = cond if last is None else getattr(combined, relation)([last, cond])
    combined.AddExternalOutput(last)
    return combined


# ----------------------------------------------------------------------------- sequences


def Do(name, *nets_or_steps) -> ExecutionStep:
    """Run the nets or steps once, in order (a single step is returned as it is)."""
    items = _items(nets_or_steps, "Do")
    if len(items) == 1 and isinstance(items[0], ExecutionStep):
        return items[0]
    return _step("Do", name, items)


def DoParallel(name, *nets_or_steps) -> ExecutionStep:
    """Run the nets or steps concurrently, once, and wait for all of them."""
    items = _items(nets_or_steps, "DoParallel")
    if len(items) == 1 and isinstance(items[0], ExecutionStep):
        return items[0]
    return _step("DoParallel", name, items, concurrent_substeps=True)


# ----------------------------------------------------------------------------- conditionals


def _stopped_unless(kind, name, cond, body, first=True, **flags) -> ExecutionStep:
    """A step running ``body`` with ``cond`` (if a net) and ``not cond`` computed before it
    (``first``) or after it, stopped by ``not cond`` (checked after each net or substep).

    The stop blob is first checked before ``not cond`` wrote it when the body runs first
    or is all nets: a bool net sets it to False beforehand.
    """
    _check_condition(cond, kind)
    not_net, stop = NotNet(cond)
    items = _with_nets(body, [cond, not_net] if isinstance(cond, Net) else [not_net], first)
    if not first or _only_nets(items):
        return Do(f"{name}/{kind}", BoolNet((stop, False)),
                  _step(f"{kind}-inner", name, items, should_stop_blob=stop, **flags))
    return _step(kind, name, items, should_stop_blob=stop, **flags)


def _run_once_if(name, cond, body) -> ExecutionStep:
    """Run ``body`` once if ``cond`` is true."""
    return _stopped_unless("_RunOnceIf", name, cond, body, only_once=True)


def _run_once_if_not(name, cond, body) -> ExecutionStep:
    """Run ``body`` once if ``cond`` is false: a one-shot step stopped by ``cond`` (or a copy)."""
    _check_condition(cond, "IfNot")
    if isinstance(cond, Net):
        stop, first = GetConditionBlobFromNet(cond), cond
    else:
        first, stop = _copy_condition_net(cond)
    return _step("_RunOnceIfNot", name, _with_nets(body, [first], first=True),
                 should_stop_blob=stop, only_once=True)


def _branches(kind, name, cond, then, otherwise, run_then, run_otherwise) -> ExecutionStep:
    """``then`` if ``run_then`` lets it, else ``otherwise``: a condition net runs once, first."""
    if not otherwise:
        return run_then(f"{name}/{kind}", cond, then)
    _check_condition(cond, kind)
    blob = GetConditionBlobFromNet(cond) if isinstance(cond, Net) else cond
    return Do(f"{name}/{kind}", run_then(f"{name}/{kind}-true", cond, then),
              run_otherwise(f"{name}/{kind}-false", blob, otherwise))


def If(name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps=None) -> ExecutionStep:
    """Run the true branch if the condition holds, else the false one."""
    return _branches("If", name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps,
                     _run_once_if, _run_once_if_not)


def IfNot(name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps=None) -> ExecutionStep:
    """Run the true branch if the condition is false, else the false one."""
    return _branches("IfNot", name, condition_blob_or_net, true_nets_or_steps, false_nets_or_steps,
                     _run_once_if_not, _run_once_if)


def _pairs(conditions: tuple, what: str) -> list:
    pairs = _items(conditions, what)
    for p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2):
            raise TraceError(f"control.{what} takes (condition, nets_or_steps) pairs, got {p!r}",
                             user_location(2), f"write control.{what}(name, (cond1, net1), (cond2, net2))")
    return pairs


def Switch(name, *conditions) -> ExecutionStep:
    """Run each ``(condition, nets_or_steps)`` whose condition holds (each condition net runs once)."""
    return _step("Switch", name, [_run_once_if(name + "/Switch", c, body)
                                  for c, body in _pairs(conditions, "Switch")])


def SwitchNot(name, *conditions) -> ExecutionStep:
    """Run each ``(condition, nets_or_steps)`` whose condition is false."""
    return _step("SwitchNot", name, [_run_once_if_not(name + "/SwitchNot", c, body)
                                     for c, body in _pairs(conditions, "SwitchNot")])


# ----------------------------------------------------------------------------- loops


def For(name, nets_or_steps, iter_num) -> ExecutionStep:
    """Run the nets or steps ``iter_num`` times."""
    if isinstance(iter_num, bool) or not isinstance(iter_num, int) or iter_num < 0:
        raise TraceError(f"control.For needs a count >= 0, got {iter_num!r}", user_location(),
                         "pass a Python int (for a count held in a blob, use ops.loop(blob))")
    return _step("For-inner", name, _items((nets_or_steps,), "For"), num_iter=iter_num)


def While(name, condition_blob_or_net, nets_or_steps) -> ExecutionStep:
    """Repeat: run the condition net (if one), stop unless it holds, run the body."""
    return _stopped_unless("While", name, condition_blob_or_net, nets_or_steps)


def Until(name, condition_blob_or_net, nets_or_steps) -> ExecutionStep:
    """Repeat: run the condition net (if one), stop if it holds, run the body."""
    _check_condition(condition_blob_or_net, "Until")
    if isinstance(condition_blob_or_net, Net):
        stop = GetConditionBlobFromNet(condition_blob_or_net)
        items = _with_nets(nets_or_steps, [condition_blob_or_net], first=True)
    else:
        stop, items = BlobReference(str(condition_blob_or_net)), nets_or_steps
    return _step("Until", name, items, should_stop_blob=stop)


def DoWhile(name, condition_blob_or_net, nets_or_steps) -> ExecutionStep:
    """Repeat: run the body, then the condition net (if one); stop unless the condition holds."""
    return _stopped_unless("DoWhile", name, condition_blob_or_net, nets_or_steps, first=False)


def DoUntil(name, condition_blob_or_net, nets_or_steps) -> ExecutionStep:
    """Repeat: run the body, then the condition net (if one); stop if the condition holds.

    With a blob condition, it is checked after every net or step of the body, as Caffe2
    does: a blob already true stops the loop after the body's first net or step.
    """
    _check_condition(condition_blob_or_net, "DoUntil")
    if not isinstance(condition_blob_or_net, Net):
        return _step("DoUntil", name, nets_or_steps,
                     should_stop_blob=BlobReference(str(condition_blob_or_net)))
    stop = GetConditionBlobFromNet(condition_blob_or_net)
    return Do(name + "/DoUntil", BoolNet((stop, False)),
              _step("DoUntil-inner", name, _with_nets(nets_or_steps, [condition_blob_or_net], first=False),
                    should_stop_blob=stop))


__all__ = ["BoolNet", "CombineConditions", "Do", "DoParallel", "DoUntil", "DoWhile", "For",
           "GetConditionBlobFromNet", "If", "IfNot", "MergeConditionNets", "NotNet", "Switch",
           "SwitchNot", "Until", "While"]
