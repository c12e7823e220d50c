"""Layers moving records around: ``GatherRecord`` (rows of a record, lists included),
``SelectRecordByContext`` (a different input per instantiation: train / eval / predict),
``Split``, ``MergeIdLists`` and ``MapToRange`` (raw ids to dense indices, learned in training)."""
from __future__ import annotations

import numpy as np

from dslc import core, schema
from dslc.layers.layers import IdList, InstantiationContext, LayerError, ModelLayer, get_categorical_limit
from dslc.trace.tracing import user_location


def _require(ok, message):
    if not ok:
        raise LayerError(message, user_location(3))


class GatherRecord(ModelLayer):
    """Input Struct (``indices``, ``record``): the examples ``indices`` of ``record``; a list
    field keeps each gathered example's whole list (nested lists too)."""

    def __init__(self, model, input_record, name="gather_record", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require("indices" in input_record and "record" in input_record,
                 "GatherRecord takes a Struct with fields indices and record")
        self.output_schema = schema.NewRecord(model.net, input_record.record.clone_schema())
        self._indices = self.input_record.indices()

    def _scalar(self, net, record, lengths, out):
        if lengths is None:
            net.Gather([record(), self._indices], out())
        else:
            net.LengthsGather([record(), lengths, self._indices], out())

    def _list(self, net, record, lengths, out):
        self._scalar(net, record.lengths, lengths, out.lengths)
        if lengths is None:
            lengths = record.lengths()
        else:  # the items' lengths per outer example: the sums of the inner lengths of each
            as_float = net.Cast(record.lengths(), net.NextScopedBlob(str(record.lengths()) + "_float"),
                                to=core.DataType.FLOAT)
            summed = net.LengthsSum([as_float, lengths], net.NextScopedBlob(str(record.lengths()) + "_nested_float"))
            lengths = net.Cast(summed, net.NextScopedBlob(str(record.lengths()) + "_nested"),
                               to=core.DataType.INT32)
        self._dispatch(net, record._items, lengths, out._items)

    def _dispatch(self, net, record, lengths, out):
        if isinstance(record, schema.Scalar):
            self._scalar(net, record, lengths, out)
        elif isinstance(record, schema.Struct):
            for name, field in record.get_children():
                self._dispatch(net, field, lengths, out[name])
        elif isinstance(record, schema.List):
            self._list(net, record, lengths, out)
        else:
            raise NotImplementedError(f"GatherRecord of a {type(record).__name__}")

    def add_ops(self, net):
        self._dispatch(net, self.input_record.record, None, self.output_schema)


class SelectRecordByContext(ModelLayer):
    """Input Struct keyed by instantiation context ('training', 'eval', 'prediction' ...): each
    net aliases (or copies) its context's record to the output (a ``default_output_record_field``
    for a context not in it)."""

    def __init__(self, model, input_record, name="select_record_by_context", check_field_metas=True, use_copy=False,
                 default_output_record_field=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require(isinstance(input_record, schema.Struct) and len(input_record) > 1,
                 "SelectRecordByContext takes a Struct of at least two records")
        self.use_copy = use_copy
        self.default_output_record = input_record[default_output_record_field] \
            if default_output_record_field is not None else None
        ref = input_record[0]
        for record in input_record:
            _require(schema.equal_schemas(record, ref, check_field_metas=check_field_metas),
                     "SelectRecordByContext's records differ in schema")
        self.output_schema = schema.NewRecord(model.net, ref)

    def _set_output_blobs(self, net, context):
        record = self.input_record.get(context, self.default_output_record)
        _require(record is not None, f"{context} context is not in input record without providing default output")
        op = net.Copy if self.use_copy else net.Alias
        for src, dst in zip(record.field_blobs(), self.output_schema.field_blobs()):
            op(src, dst)

    def add_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.PREDICTION)

    def add_eval_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.EVAL)

    def add_train_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.TRAINING)

    def add_ops_to_accumulate_pred(self, net):
        self._set_output_blobs(net, InstantiationContext.ACCUMULATE_PRED)


class Split(ModelLayer):
    """A Scalar split along ``axis`` (counting the batch as 0) into ``num_splits`` equal parts
    or parts of the sizes ``split``; output a Tuple."""

    def __init__(self, model, input_record, num_splits=1, axis=1, name="split", split=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.axis = axis
        _require(axis >= 1, f"Split's axis is >= 1 (0 is the batch), got {axis}")
        _require(isinstance(input_record, schema.Scalar), f"Split takes a Scalar, got {input_record}")
        shape = input_record.field_type().shape
        k = axis - 1
        _require(len(shape) > k, f"Split on axis {axis} of per-example shape {shape}")
        if split is None:
            _require(shape[k] % num_splits == 0, f"dim {shape[k]} does not split into {num_splits}")
            sizes = [shape[k] // num_splits] * num_splits
        else:
            _require(shape[k] == sum(split), f"split {split} does not add up to {shape[k]}")
            sizes = list(split)
        dtype = input_record.field_type().base
        outputs = []
        for i, size in enumerate(sizes):
            part = list(shape)
            part[k] = size
            outputs.append(schema.Scalar((dtype, part), self.get_next_blob_reference(f"output_{i}")))
        self.output_schema = schema.Tuple(*outputs)
        self.split = split

    def add_ops(self, net):
        net.Split(self.input_record.field_blobs(), self.output_schema.field_blobs(), split=self.split, axis=self.axis)


class MergeIdLists(ModelLayer):
    """Several id lists into one per example (each example's ids, deduplicated)."""

    def __init__(self, model, input_record, name="merged"):
        super().__init__(model, name, input_record)
        _require(all(schema.equal_schemas(x, IdList) for x in input_record), "MergeIdLists takes IdLists")
        _require(all(r.items.metadata is not None for r in self.input_record),
                 "MergeIdLists needs each list's metadata (categorical_limit)")
        merge_dim = max(get_categorical_limit(r) for r in self.input_record)
        self.output_schema = schema.NewRecord(model.net, schema.List(schema.Scalar(
            np.int64, blob=model.net.NextBlob(name), metadata=schema.Metadata(categorical_limit=merge_dim))))

    def add_ops(self, net):
        return net.MergeIdLists(self.input_record.field_blobs(), self.output_schema.field_blobs())


class MapToRange(ModelLayer):
    """Raw keys to indices in [1, max_index) (0 for keys seen after it filled up, or, once
    frozen, unseen): the map grows in training and is frozen in eval and prediction."""

    def __init__(self, model, input_record, max_index, name="map_to_range", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        _require(max_index > 0, f"max_index is > 0, got {max_index}")
        _require(isinstance(input_record, schema.Scalar), f"MapToRange takes a Scalar, got {input_record}")
        self.max_index = max_index
        self.handler = self.create_param(param_name="handler", shape=[],
                                         initializer=("LongIndexCreate", {"max_elements": max_index}),
                                         optimizer=model.NoOptim)
        self.output_schema = schema.Struct(
            ("indices", schema.Scalar(np.int64, self.get_next_blob_reference("indices"))),
            ("handler", schema.Scalar(np.void, self.handler)))

    def add_train_ops(self, net):
        keys = self.input_record()
        if self.input_record.field_type().base != np.int64:
            keys = net.Cast(keys, net.NextScopedBlob("indices_before_mapping"), to=core.DataType.INT64)
        indices = net.IndexGet([self.handler, keys], self.output_schema.indices())
        net.StopGradient(indices, indices)

    def add_eval_ops(self, net):
        net.IndexFreeze(self.handler, self.handler)
        self.add_train_ops(net)

    def add_ops(self, net):
        self.add_eval_ops(net)
