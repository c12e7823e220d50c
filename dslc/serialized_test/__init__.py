"""Caffe2's ``serialized_test`` package: ``serialized_test_util`` for operator tests."""
