"""``Functional``: a layer running any function of (net, input record, output record) —
what ``model.Relu(record, 1)`` and the other operator-named calls on a layer model make.

The outputs are a record of fresh blobs (``output_names_or_num``: a count, names, or a
record to use as is); their types are ``output_dtypes`` when given, else inferred by
recording the function once on empty inputs of the input's types and asking shape inference
(first dim taken as the batch)."""
from __future__ import annotations

import logging

import numpy as np

from dslc import core, schema, scope, workspace
from dslc.ir.diagnostics import DSLError
from dslc.layers.layers import LayerError, ModelLayer
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)

_NUMPY_OF = {caffe2_pb2.TensorProto.DOUBLE: np.float64, caffe2_pb2.TensorProto.FLOAT: np.float32,
             caffe2_pb2.TensorProto.INT32: np.int32, caffe2_pb2.TensorProto.INT64: np.int64,
             caffe2_pb2.TensorProto.FLOAT16: np.float16}


class Functional(ModelLayer):
    def __init__(self, model, input_record, output_names_or_num, function, name="functional",
                 output_dtypes=None, tags=None, **kwargs):
        input_record = schema.as_record(input_record)
        super().__init__(model, name, input_record, tags=tags, **kwargs)
        self._function = function
        self._kwargs = kwargs
        many = isinstance(output_names_or_num, list) or \
            (isinstance(output_names_or_num, int) and output_names_or_num != 1)
        with scope.NameScope(self.name, reset=True):
            if isinstance(output_names_or_num, schema.Field):
                self.output_schema = output_names_or_num.clone(keep_blobs=True)
                return
            if isinstance(output_names_or_num, int):
                outputs = schema.NewRecord(model.net, schema.RawTuple(output_names_or_num))
            else:
                names = output_names_or_num if isinstance(output_names_or_num, list) else [output_names_or_num]
                outputs = schema.NewRecord(model.net, schema.Struct(*[(n, np.void) for n in names]))
        count = len(outputs.field_blobs())
        self.output_schema = outputs if many else outputs[0]
        scalars = [self.output_schema[i] for i in range(count)] if many else [self.output_schema]
        if output_dtypes is not None:
            dtypes = output_dtypes if isinstance(output_dtypes, list) else [output_dtypes] * count
            if len(dtypes) != count:
                raise LayerError(f"{count} outputs, {len(dtypes)} output_dtypes", user_location())
            for dtype, scalar in zip(dtypes, self.output_schema.all_scalars()):
                scalar.set_type(dtype)
            return
        self._infer_types(input_record, function, kwargs, scalars)

    def _infer_types(self, input_record, function, kwargs, scalars):
        try:
            net = core.Net("_temp_type_and_shape_inference_net")
            schema.InitEmptyRecord(net, input_record, enforce_types=True)
            function(net, self.input_record, self.output_schema, **kwargs)
            shapes, types = workspace.InferShapesAndTypes([net], {})
        except (TypeError, DSLError) as exc:
            logger.warning("type inference failed for layer %s: %s", self.name, exc)
            return
        for scalar in scalars:
            blob = str(scalar())
            shape = shapes.get(blob)
            if blob not in types or shape is None:
                logger.warning("type inference found no type for %s (layer %s)", blob, self.name)
                continue
            if len(shape) and shape[0] != 0:
                logger.warning("unexpected shape %s for %s (layer %s)", shape, blob, self.name)
                continue
            np_type = _NUMPY_OF.get(types[blob])
            if np_type is not None:
                scalar.set_type((np_type, tuple(shape[1:])))

    def add_ops(self, net):
        self._function(net, self.input_record, self.output_schema, **self._kwargs)
