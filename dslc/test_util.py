"""A unittest base class and small helpers for tests written against the Caffe2 API.

Caffe2 test files do ``from caffe2.python.test_util import TestCase``; with the
import turned into ``dslc.test_util`` they get the same contract: every test
starts and ends with an empty current workspace, and ``self.ws`` is a fresh
standalone one.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import unittest

import numpy as np

from dslc import workspace


def rand_array(*dims):
    """Uniform floats in [-0.5, 0.5) as float32 (a 0-d array when no dims are given)."""
    return np.array(np.random.rand(*dims) - 0.5).astype(np.float32)


def randBlob(name, type, *dims, offset=0.0):
    workspace.FeedBlob(name, np.random.rand(*dims).astype(type) + offset)


def randBlobFloat32(name, *dims, **kwargs):
    randBlob(name, np.float32, *dims, **kwargs)


def randBlobsFloat32(names, *dims, **kwargs):
    for name in names:
        randBlobFloat32(name, *dims, **kwargs)


def numOps(net) -> int:
    return len(net.Proto().op)


def str_compare(a, b, encoding="utf8") -> bool:
    """Equality of two strings, either of which may be bytes."""
    a = a.decode(encoding) if isinstance(a, bytes) else a
    b = b.decode(encoding) if isinstance(b, bytes) else b
    return a == b


def caffe2_flaky(test_method):
    """Mark a test flaky: it runs only when CAFFE2_RUN_FLAKY_TESTS=1 (and the others then don't)."""
    test_method.__caffe2_flaky__ = True
    return test_method


def is_flaky_test_mode() -> bool:
    return os.getenv("CAFFE2_RUN_FLAKY_TESTS", "0") == "1"


class TestCase(unittest.TestCase):
    """Each test runs between two resets of the current workspace; ``self.ws`` is its own."""

    def setUp(self):
        flaky = getattr(getattr(self, self._testMethodName), "__caffe2_flaky__", False)
        if flaky != is_flaky_test_mode():
            raise unittest.SkipTest("flaky tests run only in flaky mode (CAFFE2_RUN_FLAKY_TESTS=1), "
                                    "the others only outside it")
        self.ws = workspace.C.Workspace()
        workspace.ResetWorkspace()

    def tearDown(self):
        workspace.ResetWorkspace()

    def make_tempdir(self) -> pathlib.Path:
        """A new temporary directory, removed when the test ends."""
        path = pathlib.Path(tempfile.mkdtemp(prefix="dslc_test."))
        self.addCleanup(shutil.rmtree, str(path), True)
        return path
