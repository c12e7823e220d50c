"""bench/caffe2_tests.py, the harness that counts Caffe2's own tests on dslc: the parts that decide
what a count means (the file lists, the import renaming, the cap on hypothesis examples) checked
without a Caffe2 install."""
from __future__ import annotations

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from paths import BENCH, load

bench = load(BENCH / "caffe2_tests.py")


def _conftest() -> dict:
    ns: dict = {}
    exec(compile(bench.CONFTEST, "caffe2_tests_conftest", "exec"), ns)
    return ns


def test_tier_lists():
    t1 = bench.files_of(1)
    # the job layer's operator tests count in tier 1 (issue 15's harness had them), not in tier 2
    assert {"operator_test/dataset_ops_test.py", "operator_test/record_queue_test.py",
            "operator_test/text_file_reader_test.py", "core_test.py"} <= set(t1)
    t2 = bench.files_of(2)
    assert len(t2) == 58 and "operator_test/adam_test.py" in t2 and not set(t1) & set(t2)


def test_imports_renamed():
    src = ("from caffe2.python import core\nimport caffe2.python.hypothesis_test_util as hu\n"
           "from caffe2.proto import caffe2_pb2\nfrom caffe2.python.operator_test.adagrad_test_helper import x\n")
    assert bench.to_dslc(src) == ("from dslc import core\nimport dslc.hypothesis_test_util as hu\n"
                                  "from dslc.proto import caffe2_pb2\nfrom adagrad_test_helper import x\n")


def test_capped_examples_do_not_shrink():
    # A failing property: hypothesis would shrink it (rerunning the test hundreds of times); capped
    # for a count, it runs once, fails, and reports the failure.
    calls = []

    @settings(max_examples=50, deadline=1000)
    @given(st.lists(st.integers(min_value=0, max_value=10 ** 6), min_size=5, max_size=50))
    def prop(xs):
        calls.append(xs)
        assert False

    _conftest()["_cap"](prop, 1)
    s = prop._hypothesis_internal_use_settings
    assert s.max_examples == 1 and s.deadline is None
    assert Phase.shrink not in s.phases and Phase.explain not in s.phases
    with pytest.raises(AssertionError):
        prop()
    assert len(calls) <= 2  # the failing example and its replay for the report; shrinking made ~100


def test_deadlines_kept_on_request(monkeypatch):
    # --deadlines: examples capped, each test's own deadline kept (to count deadline failures)
    @settings(max_examples=50, deadline=100)
    @given(st.integers())
    def prop(x):
        pass

    monkeypatch.setenv("C2T_DEADLINES", "1")
    _conftest()["_cap"](prop, 3)
    s = prop._hypothesis_internal_use_settings
    assert s.max_examples == 3 and s.deadline is not None and s.deadline.total_seconds() == 0.1
