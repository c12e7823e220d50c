"""``Concat``: the Scalars of a Struct joined along ``axis`` (dim 0 is the batch; with
``add_axis`` each input gets a new axis there first, so the fields are stacked)."""
from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from dslc import schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.trace.tracing import user_location

logger = logging.getLogger(__name__)


def get_concatenated_feature_to_index(blobs_to_concat):
    """The inputs' feature -> positions maps (metadata.feature_specs.feature_to_index),
    shifted to their place in the concatenation (None when no input has one)."""
    merged, start = defaultdict(list), 0
    for scalar in blobs_to_concat:
        specs = getattr(getattr(scalar, "metadata", None), "feature_specs", None)
        index = getattr(specs, "feature_to_index", None)
        if isinstance(index, dict):
            for feature, positions in index.items():
                merged[feature].extend(start + p for p in positions)
        start += scalar.dtype.shape[0]
    return dict(merged) or None


class Concat(ModelLayer):
    def __init__(self, model, input_record, axis=1, add_axis=0, name="concat", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.axis, self.add_axis = axis, add_axis
        if axis == 0 and add_axis:
            raise LayerError("Concat cannot add axis 0 (the batch)", user_location())
        if not isinstance(input_record, schema.Struct):
            raise LayerError(f"Concat takes a Struct, got {input_record}", user_location())
        shapes = []
        for field, value in input_record.fields.items():
            if not isinstance(value, schema.Scalar):
                raise LayerError(f"Concat's field {field} is not a Scalar: {value}", user_location())
            shape = list(value.field_type().shape)
            if add_axis:
                shape.insert(axis - 1, 1)
            if len(shape) < axis:
                raise LayerError(f"Concat on axis {axis} needs inputs of at least {axis} dims "
                                 f"(field {field} has {len(shape)})", user_location())
            shapes.append(shape)
        if axis == 0:
            self.output_schema = schema.from_blob_list(input_record[0], [self.get_next_blob_reference("output")])
            return
        total = 0
        for shape in shapes:
            total += shape[axis - 1]
            shape[axis - 1] = 0
            if shape != shapes[0]:
                raise LayerError(f"Concat: shapes {shape} and {shapes[0]} differ off axis {axis}", user_location())
        out_shape = shapes[0]
        out_shape[axis - 1] = total
        self.output_schema = schema.Scalar((np.float32, out_shape), self.get_next_blob_reference("output"))
        index = get_concatenated_feature_to_index(input_record.fields.values())
        if index:
            self.output_schema.set_metadata(schema.Metadata(feature_specs=schema.FeatureSpec(feature_to_index=index)))

    def add_ops(self, net):
        out = self.output_schema.field_blobs()[0]
        net.Concat(self.input_record.field_blobs(), [out, out + "_concat_dims"], axis=self.axis,
                   add_axis=self.add_axis)
