"""dslc.control (issue 15): loops and conditionals over nets and steps, on every backend.

Each test starts x at a known int64 value; the expected results are counted by hand
in the comments. The IR tests check that these steps lower to the structured forms
(for, loop/break_if, if) the NetBuilder constructs lower to.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from dslc import control, core, workspace
from dslc.ir import print_module
from dslc.ir.diagnostics import DSLError
from dslc.lower import lower_group

HERE = __file__.rsplit("/", 1)[-1]


def _located_here(err: DSLError) -> bool:
    return err.loc is not None and err.loc.file.endswith(HERE) and err.loc.line > 0


def _init(value, blob="x"):
    net = core.Net("init")
    net.ConstantFill([], [blob], shape=[], value=value, dtype=core.DataType.INT64)
    return net


def _add(k, blob="x"):
    net = core.Net(f"add{k}")
    net.Add([blob, net.Const(k)], [blob])
    return net


def _cond(op, k, blob="x"):
    """A condition net: ``blob <op> k`` as its last external output."""
    net = core.Net("cond")
    out = getattr(net, op)([blob, net.Const(k)])
    net.AddExternalOutput(out)
    return net


def _run(backend, *steps, start=0):
    ws = workspace.C.Workspace()
    plan = core.Plan("plan")
    plan.AddStep(control.Do("init", _init(start)))
    for s in steps:
        plan.AddStep(s)
    ws.run(plan, backend=backend)
    return ws


def _x(ws, blob="x"):
    return int(ws.blobs[blob].fetch())


# ----------------------------------------------------------------------------- loops


@pytest.mark.parametrize("n, expected", [(4, 12), (1, 3), (0, 0)])
def test_for_runs_the_body_n_times(backend, n, expected):
    assert _x(_run(backend, control.For("f", _add(3), n))) == expected  # 3 per iteration


def test_for_over_a_step_and_a_net(backend):
    body = [control.Do("twice", _add(1), _add(1)), _add(10)]
    assert _x(_run(backend, control.For("f", body, 2))) == 24  # 2 * (1 + 1 + 10)


def test_while_checks_before_each_iteration(backend):
    # x = 0 -> 2 -> 4 -> 6; the check 6 < 5 fails
    assert _x(_run(backend, control.While("w", _cond("LT", 5), _add(2)))) == 6
    # a false condition at the start: the body never runs
    assert _x(_run(backend, control.While("w", _cond("LT", 5), _add(2)), start=9)) == 9


def test_while_on_a_blob_condition_with_steps(backend):
    # the body step recomputes the flag itself: x = 1 -> 4 -> 7 -> 10, then 10 < 8 is false
    flag = _cond("LT", 8)
    body = control.Do("body", _add(3), flag)
    ws = _run(backend, control.Do("first", flag), control.While("w", flag.Proto().external_output[-1], body),
              start=1)
    assert _x(ws) == 10


def test_until_stops_as_soon_as_the_condition_holds(backend):
    assert _x(_run(backend, control.Until("u", _cond("GE", 5), _add(2)))) == 6  # 0, 2, 4, 6
    assert _x(_run(backend, control.Until("u", _cond("GE", 5), _add(2)), start=7)) == 7


def test_do_while_runs_the_body_before_the_first_check(backend):
    assert _x(_run(backend, control.DoWhile("dw", _cond("LT", 5), _add(2)), start=10)) == 12
    assert _x(_run(backend, control.DoWhile("dw", _cond("LT", 5), [_add(2)]))) == 6  # 2, 4, 6


def test_do_until_runs_the_body_before_the_first_check(backend):
    assert _x(_run(backend, control.DoUntil("du", _cond("GE", 5), _add(2)), start=10)) == 12
    step = control.Do("step", _add(2))
    assert _x(_run(backend, control.DoUntil("du", _cond("GE", 5), [step]))) == 6  # 2, 4, 6


# ----------------------------------------------------------------------------- conditionals


@pytest.mark.parametrize("start, expected", [(1, 101), (9, 1009)])
def test_if_else_on_a_condition_net(backend, start, expected):
    step = control.If("i", _cond("LT", 5), _add(100), _add(1000))
    assert _x(_run(backend, step, start=start)) == expected


@pytest.mark.parametrize("start, expected", [(1, 101), (9, 9)])
def test_if_without_else_on_a_blob(backend, start, expected):
    cond = _cond("LT", 5)
    step = control.Do("if-all", cond, control.If("i", cond.Proto().external_output[-1], _add(100)))
    assert _x(_run(backend, step, start=start)) == expected


@pytest.mark.parametrize("start, expected", [(1, 1001), (9, 109)])
def test_if_not_with_else(backend, start, expected):
    step = control.IfNot("n", _cond("LT", 5), _add(100), _add(1000))
    assert _x(_run(backend, step, start=start)) == expected


def test_if_not_without_else_on_a_blob(backend):
    cond = _cond("LT", 5)
    step = control.Do("all", cond, control.IfNot("n", cond.Proto().external_output[-1], _add(100)))
    assert _x(_run(backend, step, start=9)) == 109  # 9 < 5 is false: the branch runs
    assert _x(_run(backend, step, start=1)) == 1


def test_switch_runs_every_true_case(backend):
    # each case's condition is computed when its turn comes (checked on the real Caffe2):
    # x = 1: 1 < 5 adds 10; 11 > 4 adds 1000; 1011 < 3 does not hold
    step = control.Switch("s", (_cond("LT", 5), _add(10)), (_cond("GT", 4), _add(1000)),
                          (_cond("LT", 3), _add(100)))
    assert _x(_run(backend, step, start=1)) == 1011


def test_switch_not_runs_every_false_case(backend):
    # x = 1: only 1 > 4 is false
    step = control.SwitchNot("s", [(_cond("LT", 5), _add(10)), (_cond("GT", 4), _add(1000))])
    assert _x(_run(backend, step, start=1)) == 1001


def test_do_parallel_runs_each_step(backend):
    a, b = core.Net("a"), core.Net("b")
    a.ConstantFill([], ["pa"], shape=[], value=3, dtype=core.DataType.INT64)
    b.ConstantFill([], ["pb"], shape=[], value=4, dtype=core.DataType.INT64)
    ws = _run(backend, control.DoParallel("p", control.Do("sa", a), control.Do("sb", b)))
    assert (_x(ws, "pa"), _x(ws, "pb")) == (3, 4)


# ----------------------------------------------------------------------------- condition nets


def test_bool_net_and_not_net(backend):
    bools = control.BoolNet(("t", True), ("f", False))
    not_net, out = control.NotNet("t")
    ws = _run(backend, control.Do("b", bools, not_net))
    assert [str(b) for b in bools.Proto().external_output] == ["t", "f"]
    assert bool(ws.blobs["t"].fetch()) and not bool(ws.blobs["f"].fetch())
    assert not bool(ws.blobs[str(out)].fetch())
    assert control.GetConditionBlobFromNet(not_net) == out


@pytest.mark.parametrize("relation, expected", [("Or", True), ("And", False), ("Xor", True)])
def test_combine_and_merge_conditions(backend, relation, expected):
    true_net, false_net = _cond("LT", 5), _cond("GT", 5)  # at x = 0: True, False
    combined = control.CombineConditions("c", [true_net, false_net], relation)
    merged = control.MergeConditionNets("m", [_cond("LT", 5), _cond("GT", 5)], relation)
    assert len(combined.Proto().op) == 1 and len(merged.Proto().op) == 5  # 2 x (Const, compare) + relation
    ws = _run(backend, control.Do("c", true_net, false_net, combined), control.Do("m", merged))
    assert bool(ws.blobs[str(control.GetConditionBlobFromNet(combined))].fetch()) is expected
    assert bool(ws.blobs[str(control.GetConditionBlobFromNet(merged))].fetch()) is expected


def test_combine_one_condition_copies_it(backend):
    net = _cond("LT", 5)
    copy = control.CombineConditions("c", [net], "And")
    ws = _run(backend, control.Do("c", net, copy))
    assert bool(ws.blobs[str(control.GetConditionBlobFromNet(copy))].fetch()) is True


# ----------------------------------------------------------------------------- lowering and errors


def _lowered(step) -> str:
    from dslc.driver.runner import _bare_group
    plan = core.Plan("p")
    plan.AddStep(control.Do("init", _init(0)))
    plan.AddStep(step)
    return print_module(lower_group(_bare_group(plan), "job.py", {}), with_locs=False)


def test_lowered_to_the_structured_ops_of_the_builder_forms():
    # CHECK: For is a counted for, like ops.loop(n)
    assert re.search(r"for\(%\w+\) \{\n\s+\^\(%i: i64\):", _lowered(control.For("f", _add(1), 3)))
    # CHECK: While is a loop left by break_if on the negated condition, like ops.loop() + stop_if
    text = _lowered(control.While("w", _cond("LT", 5), _add(1)))
    assert re.search(r"%(\w+) = Not\(%\w+\) : bool\n(.*\n)*?\s+break_if\(%\1\)", text) and "loop {" in text
    # CHECK: If is an if whose else region runs the branch (the step stops when not cond holds)
    text = _lowered(control.If("i", _cond("LT", 5), _add(1)))
    assert re.search(r"if\(%\w+\) else \{", text) and "loop" not in text and "for(" not in text


def test_bad_arguments_are_located_errors():
    with pytest.raises(DSLError) as e:
        control.For("f", _add(1), -1)
    assert _located_here(e.value) and ">= 0" in str(e.value)
    with pytest.raises(DSLError) as e:
        control.If("i", 3, _add(1))
    assert _located_here(e.value) and "bool blob or a Net" in str(e.value)
    with pytest.raises(DSLError) as e:
        control.While("w", core.Net("no_outputs"), _add(1))
    assert _located_here(e.value) and "AddExternalOutput" in str(e.value)
    with pytest.raises(DSLError) as e:
        control.CombineConditions("c", [_cond("LT", 1), _cond("LT", 2)], "Nand")
    assert _located_here(e.value) and "And, Or" in str(e.value)
    with pytest.raises(DSLError) as e:
        control.Switch("s", _cond("LT", 1))
    assert _located_here(e.value)
    with pytest.raises(DSLError) as e:
        control.Do("empty")
    assert _located_here(e.value)


def test_control_steps_run_through_the_workspace_functions(backend, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    plan = core.Plan("wsplan")
    plan.AddStep(control.Do("init", _init(2)))
    plan.AddStep(control.For("f", _add(5), 2))
    assert workspace.RunPlan(plan) is True
    np.testing.assert_array_equal(workspace.FetchBlob("x"), 12)  # 2 + 2 * 5
