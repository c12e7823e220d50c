"""How a parameter is made in the init net (Caffe2's ``modeling.initializers``).

An initializer names a fill op and its arguments (``Initializer("XavierFill")``);
``create_param`` records the fill into the model's init net and returns the new
parameter's ParameterInfo. ``ExternalInitializer`` records nothing: the parameter is
fed into the workspace before the init net runs.
"""
from __future__ import annotations

from dslc.trace.blobref import BlobReference, ScopedBlobReference
from dslc.modeling.parameter_info import ParameterInfo
from dslc.trace.oprecord import DataType


class Initializer:
    def __init__(self, operator_name=None, **kwargs):
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def update(self, operator_name, kwargs):
        if self.operator_name is not None:
            raise Exception("an initializer's operator cannot be replaced")
        self.operator_name = operator_name
        self.operator_kwargs = kwargs

    def create_param(self, param_name, init_net, shape):
        param = getattr(init_net, self.operator_name)([], param_name, shape=shape, **self.operator_kwargs)
        return ParameterInfo(param_id=None, param=param, shape=shape)


class ExternalInitializer:
    def create_param(self, param_name, init_net, shape):
        if isinstance(param_name, BlobReference):
            param = BlobReference(str(param_name), init_net)
        elif isinstance(param_name, str):
            param = ScopedBlobReference(param_name, init_net)
        else:
            raise TypeError(f"a parameter name is a str or BlobReference, not {type(param_name).__name__}")
        return ParameterInfo(param_id=None, param=param, shape=shape)


class PseudoFP16Initializer(Initializer):
    """A float16 parameter kept (and optimized) as float32 ``<name>_fp32``."""

    def create_param(self, param_name, init_net, shape):
        fp32 = getattr(init_net, self.operator_name)([], param_name + "_fp32", shape=shape, **self.operator_kwargs)
        param = init_net.FloatToHalf(fp32, param_name)
        return ParameterInfo(param_id=None, param=param, shape=shape, blob_copy={DataType.FLOAT: fp32})


class ReversePseudoFP16Initializer(Initializer):
    """A float32 parameter with a float16 copy ``<name>_fp16``."""

    def create_param(self, param_name, init_net, shape):
        fp32 = getattr(init_net, self.operator_name)([], param_name, shape=shape, **self.operator_kwargs)
        fp16 = init_net.FloatToHalf(fp32, param_name + "_fp16")
        return ParameterInfo(param_id=None, param=fp32, shape=shape, blob_copy={DataType.FLOAT16: fp16})


def update_initializer(initializer_class, operator_name_and_kwargs, default_operator_name_and_kwargs):
    """An instance of ``initializer_class`` (default Initializer) for the given (op, kwargs),
    or the default pair when none is given."""
    name, kwargs = operator_name_and_kwargs or default_operator_name_and_kwargs
    return (initializer_class or Initializer)(name, **kwargs)
