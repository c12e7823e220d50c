"""Caffe2's ``serialized_test_util``: operator tests run on one fixed example.

Caffe2 runs each ``@serial.given`` test on a single example drawn with seed 0 and, when
asked, compares the outputs with ones stored from an earlier build. dslc keeps the fixed
example (the same seed, one example) and stores nothing: the op's outputs are checked by
the test's own reference, device and gradient checks.
"""
from __future__ import annotations

import contextlib
import functools

import hypothesis

from dslc import hypothesis_test_util as hu


def given(*given_args, **given_kwargs):
    """hypothesis.given with one example drawn from seed 0."""
    def wrap(f):
        fixed = hypothesis.seed(0)(hypothesis.settings(max_examples=1, deadline=None)(
            hypothesis.given(*given_args, **given_kwargs)(f)))

        @functools.wraps(fixed)
        def run(self, *args, **kwargs):
            self.should_serialize = False
            fixed(self, *args, **kwargs)
        run.hypothesis = fixed.hypothesis  # (pytest's hypothesis plugin looks for it)
        # (the fixed example's settings stay inside: a @settings the test puts around it
        # applies to the wrapper, as it does to Caffe2's plain wrapper function)
        for attr in ("_hypothesis_internal_settings_applied", "_hypothesis_internal_use_settings"):
            run.__dict__.pop(attr, None)
        return run
    return wrap


class SerializedTestCase(hu.HypothesisTestCase):
    should_serialize = False

    @contextlib.contextmanager
    def set_disable_serialized_check(self, val: bool):
        """A block in which Caffe2 would skip the stored-output comparison: dslc stores none."""
        yield

    def assertSerializedOperatorChecks(self, inputs, outputs, gradient_operator, op, device_option,
                                       atol=1e-7, rtol=1e-7):
        """Caffe2 compares with outputs stored by an earlier build; dslc stores none."""
