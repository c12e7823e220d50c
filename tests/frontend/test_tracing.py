"""The tracing front end's shortcuts give what the plain paths gave.

Recording an op takes shortcuts (cached call-site locations, operators as class
attributes of Net and ``ops``, auto-name scans that resume); these tests pin down
the cases where a shortcut could go stale: a job that changes directory, a name
handed out but not used, a Net subclass with its own ``__getattr__``, ``ops``
outside any builder.
"""
from __future__ import annotations

import os
import threading

import pytest

from dslc.core import NameScope, Net
from dslc.net_builder import NoBuilderError, ops
from dslc.task import Task
from markers import Markers

M = Markers(__file__)


def _record_add(net, a, b):
    return net.Add([a, b])  # @add-site


def test_a_call_site_is_shown_relative_to_the_directory_at_each_call(tmp_path, monkeypatch):
    here = os.path.dirname(os.path.abspath(__file__))
    net = Net("n")
    a, b = net.AddExternalInput("a", "b")
    monkeypatch.chdir(here)
    _record_add(net, a, b)
    monkeypatch.chdir(tmp_path)
    _record_add(net, a, b)
    first, second = (op.loc for op in net.ops())
    assert first.line == second.line == M.line_of("add-site")
    assert first.file == os.path.basename(__file__)
    assert second.file == os.path.abspath(__file__)


def test_call_sites_in_one_function_keep_their_own_lines():
    net = Net("n")
    a = net.AddExternalInput("a")
    for _ in range(2):
        net.Relu([a])  # @first
        net.Relu([a])  # @second
    lines = [op.loc.line for op in net.ops()]
    assert lines == [M.line_of("first"), M.line_of("second")] * 2


def test_next_name_hands_out_the_same_name_until_it_is_used():
    net = Net("n")
    net.Add(["a", "b"])
    assert net.NextName("Add") == net.NextName("Add") == "n/Add_2"
    net.Add(["a", "b"])
    assert net.NextName("Add") == "n/Add_3"


def test_auto_names_are_scanned_per_name_scope():
    net = Net("n")
    for _ in range(3):
        net.Add(["a", "b"])
    with NameScope("s"):
        assert str(net.Add(["a", "b"])) == "s/n/Add"
        assert str(net.Add(["a", "b"])) == "s/n/Add_2"
    assert str(net.Add(["a", "b"])) == "n/Add_4"
    assert str(net.Sub(["a", "b"], 2)[1]) == "n/Sub:1"
    assert str(net.Sub(["a", "b"], 2)[1]) == "n/Sub_2:1"


def test_a_net_subclass_with_its_own_getattr_still_answers():
    Net("plain").Mul(["a", "b"])  # Mul is now found on the Net class

    class Logged(Net):
        def __getattr__(self, op_type):
            return lambda *args, **kwargs: ("logged", op_type)

    assert Logged("l").Mul(["a", "b"]) == ("logged", "Mul")


def test_ops_outside_a_builder_fails_at_the_access():
    with Task():
        ops.Abs(["x"])  # Abs is now a class attribute of ops
    with pytest.raises(NoBuilderError) as err:
        ops.Abs  # @outside
    M.assert_error_at(err.value, "outside", "no active NetBuilder")


def test_parts_a_net_fills_on_first_use_are_its_own():
    first, second = Net("first"), Net("second")
    first.add_attribute("key", "value")
    first.AddExternalOutput("out")
    assert str(first.NextBlob("b")) == "b"
    assert second.get_attributes("key") == [] and second.external_outputs == []
    assert str(second.NextBlob("b")) == "b"
    assert first.get_attributes("key") == ["value"] and first.external_outputs == ["out"]


def test_ops_records_into_a_net_subclass_added_to_the_builder():
    class Logged(Net):
        def __getattr__(self, op_type):
            return lambda *args, **kwargs: ("logged", op_type)

    with Task():
        ops.Mul(["a", "b"])  # Mul is now a class attribute of ops and of Net
        ops.net(Logged("l"))
        assert ops.Mul(["a", "b"]) == ("logged", "Mul")


def test_a_name_scope_in_one_thread_leaves_other_threads_unscoped():
    entered, done = threading.Event(), threading.Event()

    def scoped():
        with NameScope("t"):
            entered.set()
            done.wait(10)

    thread = threading.Thread(target=scoped)
    thread.start()
    try:
        assert entered.wait(10)
        net = Net("n")
        assert str(net.Add(["a", "b"])) == "n/Add"
        assert net.ops()[0].inputs == ("a", "b")
    finally:
        done.set()
        thread.join()
