"""Caffe2's ``caffe2.proto`` package, as far as Python code that only names devices uses it."""
