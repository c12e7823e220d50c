"""Layers over raw sparse features: ``FeatureSparseToDense`` (feature maps to dense columns,
one per feature id a spec names) and ``SparseFeatureHash`` (ids hashed, or reduced modulo,
into a smaller id space)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from dslc import core, schema
from dslc.layers.layers import AccessedFeatures, IdList, IdScoreList, LayerError, ModelLayer
from dslc.layers.tags import Tags
from dslc.trace.tracing import user_location

__all__ = ["FeatureSparseToDense", "SparseFeatureHash"]

# The feature types whose values are lists: their dense form is a [features, 2] block of
# (offset, length) ranges into the values, plus the values themselves: (output, dtype, the
# field of the input's value record it aliases).
_LIST_OUTPUTS = {
    "ID_LIST": (("values", np.int64, "items"),),
    "ID_SCORE_LIST": (("ids", np.int64, "keys"), ("scores", np.float32, "values")),
    "EMBEDDING": (("values", np.float32, "items"),),
}


class FeatureSparseToDense(ModelLayer):
    """Input: a Struct of feature maps (``Map(feature id -> value)`` per field); ``input_specs``:
    ``[(field, schema.FeatureSpec(feature_type, feature_names, feature_ids)), ...]``.

    A FLOAT field becomes a ``[batch, len(feature_ids)]`` float matrix (``default_dense_value``
    where a row lacks a feature: 0.0 or NaN); an ID_LIST, ID_SCORE_LIST or EMBEDDING field becomes
    ``ranges [batch, len(feature_ids), 2]`` into its values (a zero range where absent) and the
    values. (Caffe2's GENERIC_FEATURE needs its ParseGeneric op, which dslc does not have.)
    """

    def __init__(self, model, input_record, input_specs, name="feature_sparse_to_dense",
                 default_dense_value=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        default = 0.0 if default_dense_value is None else float(default_dense_value)
        if not (np.isnan(default) or default == 0.0):
            raise LayerError(f"FeatureSparseToDense's default_dense_value is 0.0 or NaN, got {default_dense_value}",
                             user_location())
        self.input_specs = input_specs
        self.default_float_value = model.global_constants["NAN" if np.isnan(default) else "ZERO"]
        self.zero_range = model.global_constants["ZERO_RANGE"]
        outputs = []
        for field, spec in input_specs:
            n = len(spec.feature_ids)
            if len(spec.feature_names) != n:
                raise LayerError(f"FeatureSparseToDense: field {field!r} names {len(spec.feature_names)} features "
                                 f"and gives {n} ids", user_location())
            if spec.feature_type == "FLOAT":
                outputs.append((field, schema.Scalar((np.float32, (n,)), self.get_next_blob_reference(field + "_output"))))
            elif spec.feature_type in _LIST_OUTPUTS:
                parts = [("ranges", schema.Scalar((np.int32, (n, 2)), self.get_next_blob_reference(field + "_ranges")))]
                parts += [(part, schema.Scalar(dtype, self.get_next_blob_reference(f"{field}_{part}")))
                          for part, dtype, _ in _LIST_OUTPUTS[spec.feature_type]]
                outputs.append((field, schema.Struct(*parts)))
            else:
                raise LayerError(f"FeatureSparseToDense: unsupported feature type {spec.feature_type!r} for "
                                 f"field {field!r}", user_location(),
                                 hint="FLOAT, ID_LIST, ID_SCORE_LIST or EMBEDDING")
        self.output_schema = schema.Struct(*outputs)
        for field, spec in input_specs:
            schema.attach_metadata_to_scalars(self.output_schema[field], schema.Metadata(feature_specs=spec))

    def add_ops(self, net):
        record = self.input_record
        for field, spec in self.input_specs:
            features, out = record[field], self.output_schema[field]
            if spec.feature_type == "FLOAT":
                net.SparseToDenseMask([features.keys(), features.values(), self.default_float_value,
                                       features.lengths()], [out()], mask=spec.feature_ids)
                continue
            # each feature's values as an (offset, length) range, scattered to its column
            ranges = net.LengthsToRanges(features.values.lengths(), net.NextScopedBlob(field + "_value_ranges"))
            net.SparseToDenseMask([features.keys(), ranges, self.zero_range, features.lengths()], out.ranges(),
                                  mask=spec.feature_ids)
            for part, _, source in _LIST_OUTPUTS[spec.feature_type]:
                net.Alias(getattr(features.values, source)(), out[part]())

    def get_metadata(self):
        metadata = []
        for field, spec in self.input_specs:
            info = {"type": spec.feature_type, "names": spec.feature_names, "ids": spec.feature_ids}
            if spec.feature_type == "FLOAT":
                info["cardinality"] = 1
            out = self.output_schema[field]
            metadata.append((info, out.field_blobs(), out.field_types()))
        return metadata

    def get_accessed_features(self):
        accessed = defaultdict(list)
        for field, spec in self.input_specs:
            accessed[field].append(AccessedFeatures(spec.feature_type, set(spec.feature_ids)))
        return accessed


class SparseFeatureHash(ModelLayer):
    """An IdList or IdScoreList with its ids mapped into ``modulo`` buckets: Caffe2's IndexHash
    (``use_hashing``, the default, with ``seed``), else the id modulo ``modulo`` (after an integer
    division by ``divisor`` with ``use_divide_mod``). ``modulo`` defaults to the ids' metadata
    (feature_specs.desired_hash_size, else categorical_limit)."""

    def __init__(self, model, input_record, seed=0, modulo=None, use_hashing=True, use_divide_mod=False,
                 divisor=None, name="sparse_feature_hash", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if use_hashing and use_divide_mod:
            raise LayerError("SparseFeatureHash: use_hashing and use_divide_mod exclude each other", user_location())
        if use_divide_mod:
            if divisor is None or divisor < 1:
                raise LayerError(f"SparseFeatureHash: use_divide_mod needs a divisor >= 1, got {divisor}",
                                 user_location())
            self.divisor = self.create_param(param_name="divisor", shape=[1],
                                             initializer=("GivenTensorInt64Fill", {"values": np.array([divisor])}),
                                             optimizer=model.NoOptim)
        self.seed, self.use_hashing, self.use_divide_mod = seed, use_hashing, use_divide_mod
        if schema.equal_schemas(input_record, IdList):
            self._ids_field, shape = "items", IdList
        elif schema.equal_schemas(input_record, IdScoreList):
            self._ids_field, shape = "keys", IdScoreList
        else:
            raise LayerError(f"SparseFeatureHash takes an IdList or an IdScoreList, got {input_record}",
                             user_location())
        ids_meta = getattr(input_record, self._ids_field).metadata
        self.modulo = modulo or self._hash_size(ids_meta)
        if self.modulo < 1:
            raise LayerError(f"SparseFeatureHash: modulo must be >= 1, got {self.modulo}", user_location())
        with core.NameScope(name):
            self.output_schema = schema.NewRecord(model.net, shape)
        getattr(self.output_schema, self._ids_field).set_metadata(schema.Metadata(
            categorical_limit=self.modulo,
            feature_specs=ids_meta.feature_specs if ids_meta else None,
            expected_value=ids_meta.expected_value if ids_meta else None))
        if input_record.lengths.metadata:
            self.output_schema.lengths.set_metadata(input_record.lengths.metadata)
        self.tags.update([Tags.CPU_ONLY])

    @staticmethod
    def _hash_size(metadata):
        if metadata and metadata.feature_specs and metadata.feature_specs.desired_hash_size:
            return metadata.feature_specs.desired_hash_size
        if metadata and metadata.categorical_limit is not None:
            return metadata.categorical_limit
        raise LayerError("SparseFeatureHash needs modulo=, or the ids' metadata (desired_hash_size or "
                         "categorical_limit)", user_location())

    def add_ops(self, net):
        net.Copy(self.input_record.lengths(), self.output_schema.lengths())
        ids = getattr(self.input_record, self._ids_field)()
        out = getattr(self.output_schema, self._ids_field)()
        if self._ids_field == "keys":
            net.Copy(self.input_record.values(), self.output_schema.values())
        if self.use_hashing:
            net.IndexHash(ids, out, seed=self.seed, modulo=self.modulo)
            return
        if self.use_divide_mod:
            ids = net.Div([ids, self.divisor], [net.NextScopedBlob("quotient")])
        net.Mod(ids, out, divisor=self.modulo, sign_follow_divisor=True)
