"""Parameter tags and what a model knows about one parameter (Caffe2's ``parameter_info``)."""
from __future__ import annotations

import numpy as np


class ParameterTags:
    BIAS = "BIAS"
    WEIGHT = "WEIGHT"
    COMPUTED_PARAM = "COMPUTED_PARAM"


class ParameterInfo:
    """One parameter: its blob, shape and size, gradient, and the optimizer set for it."""

    def __init__(self, param_id, param, key=None, shape=None, length=None, grad=None, blob_copy=None):
        self.param_id = param_id
        self.name = str(param)
        self.blob = param
        self.key = key
        self.shape = shape
        self.size = None if shape is None else int(np.prod(shape))
        self.length = max(1, length if length is not None else 1)
        self.grad = grad
        self.blob_copy = blob_copy
        self._optimizer = None

    @property
    def parameter(self):
        return self.blob

    @property
    def optimizer(self):
        return self._optimizer

    @optimizer.setter
    def optimizer(self, value):
        assert self._optimizer is None, "the parameter's optimizer is already set"
        self._optimizer = value

    def __str__(self):
        return self.name
