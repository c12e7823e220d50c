"""Context kinds (dslc.context): per-class stacks, defaults, decorators, the 2018 spelling."""
from __future__ import annotations

import threading

import pytest

from dslc import context
from dslc.ir.diagnostics import DSLError
from dslc.net_builder import NetBuilder, ops


class Scope(context.Managed):
    pass


class InnerScope(Scope):
    pass


class Implicit(context.DefaultManaged):
    pass


def test_current_without_a_context_is_an_assertion_with_the_line():
    with pytest.raises(AssertionError) as e:
        Scope.current()
    assert isinstance(e.value, DSLError)
    assert "test_context.py" in str(e.value) and "no active Scope" in str(e.value)
    assert Scope.current(required=False) is None


def test_a_given_value_is_returned_and_must_be_of_the_kind():
    s = Scope()
    assert Scope.current(value=s) is s
    with pytest.raises(AssertionError, match="expected a Scope"):
        Scope.current(value=Implicit())


def test_default_kind_makes_one_instance_and_keeps_it():
    first = Implicit.current()
    assert isinstance(first, Implicit) and Implicit.current() is first


def test_instance_as_decorator_opens_it_around_each_call():
    scope = Scope()
    seen = []

    @scope
    def body(x):
        seen.append(Scope.current())
        return x + 1

    assert body(1) == 2 and body(2) == 3
    assert seen == [scope, scope]
    assert Scope.current(required=False) is None  # closed again after each call


def test_a_subclass_instance_is_current_for_its_ancestors_but_not_the_reverse():
    with InnerScope() as inner:
        assert Scope.current() is inner and InnerScope.current() is inner
        with Scope() as outer:
            assert Scope.current() is outer
            assert InnerScope.current() is inner  # a plain Scope is no InnerScope
    with Scope():
        with pytest.raises(AssertionError):
            InnerScope.current()


def test_kinds_are_independent_and_nest():
    with Scope() as s:
        with Implicit() as i:
            assert Scope.current() is s and Implicit.current() is i
        assert Scope.current() is s


def test_stacks_are_per_thread():
    errors = []
    barrier = threading.Barrier(4)

    def work():
        try:
            with Scope() as mine:
                barrier.wait(timeout=10)  # all four are open at once
                for _ in range(50):
                    assert Scope.current() is mine
        except Exception as e:  # (reported below: a thread cannot fail the test itself)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Scope.current(required=False) is None


@context.define_context()
class Legacy:
    def __init__(self):
        self.log = []

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, *exc):
        self.log.append("exit")


@context.define_context(allow_default=True)
class LegacyDefault:
    pass


def test_define_context_keeps_the_class_own_enter_and_exit():
    with pytest.raises(AssertionError):
        Legacy.current()
    legacy = Legacy()
    with legacy as got:
        assert got is legacy and Legacy.current() is legacy
    assert legacy.log == ["enter", "exit"]
    assert Legacy.current(required=False) is None

    @Legacy()
    def inside():
        return Legacy.current()
    assert isinstance(inside(), Legacy)
    assert isinstance(LegacyDefault.current(), LegacyDefault)


def test_define_context_twice_in_a_hierarchy_is_an_error():
    with pytest.raises(AssertionError, match="already a context kind"):
        @context.define_context()
        class Again(Legacy):
            pass


def test_net_builder_blocks_are_current_builders():
    with NetBuilder() as nb:
        with ops.loop(2) as loop:
            assert NetBuilder.current() is loop
        assert NetBuilder.current() is nb
