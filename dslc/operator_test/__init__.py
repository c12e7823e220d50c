"""Helpers Caffe2's operator tests import from ``caffe2.python.operator_test`` (the tests
themselves are Caffe2's and stay in its package; only what they import lives here)."""
