"""Caffe2's ``cnn.CNNModelHelper`` (deprecated in Caffe2 in favour of ModelHelper and brew):
a ModelHelper whose layer methods call brew's helpers (``model.FC(...)`` is
``brew.fc(model, ...)``), with the image order and cuDNN settings in its arg scope."""
from __future__ import annotations

from dslc import brew
from dslc.model_helper import ModelHelper

# CNNModelHelper's layer methods and the brew helper each calls
_LAYERS = {
    "FC": "fc", "MatMul": "mat_mul", "BatchMatMul": "batch_mat_mul", "Conv": "conv", "MaxPool": "max_pool",
    "AveragePool": "average_pool", "SpatialBN": "spatial_bn", "LRN": "lrn", "Dropout": "dropout",
    "Relu": "relu", "PRelu": "prelu", "Tanh": "tanh", "Softmax": "softmax", "Concat": "concat",
    "DepthConcat": "depth_concat", "Sum": "sum", "Transpose": "transpose", "Iter": "iter",
    "Accuracy": "accuracy",
}


class CNNModelHelper(ModelHelper):
    """A model for convolutional nets in ``order`` ("NCHW" or "NHWC")."""

    def __init__(self, order="NCHW", name=None, use_cudnn=True, cudnn_exhaustive_search=False,
                 ws_nbytes_limit=None, init_params=True, skip_sparse_optim=False, param_model=None):
        if order not in ("NCHW", "NHWC"):
            raise ValueError(f"order is NCHW or NHWC, not {order!r}")
        scope = {"order": order, "use_cudnn": use_cudnn, "cudnn_exhaustive_search": cudnn_exhaustive_search}
        if ws_nbytes_limit:
            scope["ws_nbytes_limit"] = ws_nbytes_limit
        super().__init__(name="CNN" if name is None else name, init_params=init_params,
                         skip_sparse_optim=skip_sparse_optim, param_model=param_model, arg_scope=scope)
        self.order = order
        self.use_cudnn = use_cudnn
        self.cudnn_exhaustive_search = cudnn_exhaustive_search
        self.ws_nbytes_limit = ws_nbytes_limit

    # initializer shorthands of Caffe2's CNNModelHelper
    XavierInit = ("XavierFill", {})
    MSRAInit = ("MSRAFill", {})

    def ConstantInit(self, value):
        return ("ConstantFill", {"value": value})

    def GaussianInit(self, std=0.01, mean=0.0):
        return ("GaussianFill", {"std": std, "mean": mean})

    def __getattr__(self, name):
        helper = _LAYERS.get(name)
        if helper is not None:
            return lambda *args, **kwargs: getattr(brew, helper)(self, *args, **kwargs)
        return super().__getattr__(name)
