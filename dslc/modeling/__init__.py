"""Caffe2's ``modeling`` package: parameter tags and info, and parameter initializers."""
