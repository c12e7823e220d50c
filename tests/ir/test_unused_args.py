"""Operator arguments an op does not read (issue 15): kept in the IR, ignored, warned about
once at the user's line; a near-miss of a declared argument too, as Caffe2 runs it (issue 37),
its warning naming the argument it may mean."""
from __future__ import annotations

import warnings

import numpy as np

from dslc import core, workspace
from dslc.ir import parse, print_module
from dslc.ir.diagnostics import UnusedArgumentWarning
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
    from dslc.driver.runner import _bare_group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedArgumentWarning)
        text = print_module(lower_group(_bare_group(_net()), "job.py", {}))
    assert 'Mul(%' in text and '{run_once = 0, tag = "sq"}' in text
    assert print_module(parse(text)) == text


def test_a_misspelled_argument_runs_as_caffe2_and_warns_with_the_near_name(backend, monkeypatch):
    """Caffe2 runs an op whose argument it does not read, misspelt or not (issue 37: the real
    Caffe2's Adagrad with ``decay_=0.9`` ran and updated w to 1.09999 as without it, seen
    with /tmp/caffe2-venv/bin/python on the same net): dslc runs it too, and its warning
    names the argument it may have meant."""
    from dslc.ir import diagnostics
    monkeypatch.setattr(diagnostics, "_warned", set())
    net = core.Net("typo")
    net.Adagrad(["w", "m", "g", "lr"], ["w", "m"], epsilon=1e-4, decay_=0.9)
    ws = workspace.C.Workspace()
    for name, v in [("w", np.ones(3)), ("g", np.ones(3)), ("m", np.zeros(3)), ("lr", [0.1])]:
        ws.feed_blob(name, np.asarray(v, np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LocalSession(ws, backend=backend).run(net)
    # Adagrad without decay: m = 1, w = 1 + 0.1 * 1 / (sqrt(1) + 1e-4) (Caffe2 printed 1.09999)
    np.testing.assert_allclose(ws.fetch("w"), np.full(3, 1 + 0.1 / (1 + 1e-4)), rtol=1e-6)
    ours = [w for w in caught if issubclass(w.category, UnusedArgumentWarning)]
    assert len(ours) == 1 and "'decay_'" in str(ours[0].message)
    assert "did you mean 'decay'" in str(ours[0].message)
    assert ours[0].filename.endswith(HERE) and ours[0].lineno > 0


def test_a_misspelled_argument_in_parsed_ir_is_kept_with_a_warning():
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = parse(text)
    assert any("did you mean 'broadcast'" in str(w.message) for w in caught)
    assert "{brodcast = 1}" in print_module(module)
