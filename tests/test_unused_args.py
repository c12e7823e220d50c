"""Operator arguments an op does not read (issue 15): kept in the IR, ignored, warned about
once at the user's line; a near-miss of a declared argument is still a located error."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir import parse, print_module
from dslc.ir.diagnostics import DSLError, UnusedArgumentWarning
from dslc.lower import lower_group
from dslc.session import LocalSession

HERE = __file__.rsplit("/", 1)[-1]


def _net():
    net = core.Net("extra")
    net.ConstantFill([], ["x"], shape=[3], value=2.0, run_once=0)
    net.Mul(["x", "x"], ["y"], run_once=0, tag="sq")
    return net


def test_ignored_arguments_run_and_warn_once_at_the_users_line(backend, monkeypatch):
    from dslc.ir import diagnostics
    monkeypatch.setattr(diagnostics, "_warned", set())  # (the other backend's run warned already)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = _net()
        session = LocalSession(workspace.C.Workspace(), backend=backend)
        session.run(net)
        session.run(core.Net(net))  # the same calls again: no new warnings
    np.testing.assert_array_equal(session.workspace.fetch("y"), [4.0, 4.0, 4.0])  # 2 * 2
    ours = [w for w in caught if issubclass(w.category, UnusedArgumentWarning)]
    got = sorted((str(w.message).split(" ")[0], str(w.message).split("'")[1]) for w in ours)
    assert got == [("ConstantFill", "run_once"), ("Mul", "run_once"), ("Mul", "tag")]
    assert all(w.filename.endswith(HERE) and w.lineno > 0 for w in ours)


def test_ignored_arguments_stay_in_the_ir_and_round_trip():
    from dslc.workspace import _bare_group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedArgumentWarning)
        text = print_module(lower_group(_bare_group(_net()), "job.py", {}))
    assert 'Mul(%' in text and '{run_once = 0, tag = "sq"}' in text
    assert print_module(parse(text)) == text


def test_a_misspelled_argument_is_a_located_error():
    net = core.Net("typo")
    net.ConstantFill([], ["a"], shape=[2], value=1.0)
    net.Add(["a", "a"], ["b"], brodcast=1)
    with pytest.raises(DSLError) as e:
        workspace.RunNetOnce(net)
    assert "'brodcast'" in str(e.value) and "did you mean 'broadcast'" in str(e.value)
    assert e.value.loc.file.endswith(HERE) and e.value.loc.line > 0


def test_a_misspelled_argument_in_parsed_ir_is_an_error():
    text = '''module {source = "t"} {
  group body {
    task @"t" {workspace = "global"} body {
      %0 = Const {value = dense<f32: 1.0>} : f32
      %1 = Add(%0, %0) {brodcast = 1} : f32
      store @"o"(%1)
    }
  }
}
'''
    with pytest.raises(DSLError) as e:
        parse(text)
    assert "did you mean 'broadcast'" in str(e.value)
