"""Caffe2's ``layers.tags``: the tags a layer carries (which instantiations it joins:
train, eval, predict ...) and ``TagContext``, the tags of the enclosing ``with Tags(...)``."""
from __future__ import annotations

import functools

from dslc.trace.context import DefaultManaged


class TagContext(DefaultManaged):
    """The tags every layer made inside the current ``with Tags(...)`` blocks gets."""

    def __init__(self, tags=None):
        self.tags = list(tags or [])

    def add_tags(self, tags):
        self.tags.extend(tags)

    def remove_tags(self, tags):
        if tags and self.tags[-len(tags):] != list(tags):
            raise ValueError(f"tags {tags} are not the innermost ones ({self.tags})")
        self.tags = self.tags[:len(self.tags) - len(tags)]


class Tags:
    """Tag names, and ``with Tags(names):`` (or ``@Tags(names)``) adding them to new layers."""

    EXCLUDE_FROM_TRAIN = "exclude_from_train"
    EXCLUDE_FROM_EVAL = "exclude_from_eval"
    EXCLUDE_FROM_PREDICTION = "exclude_from_prediction"
    EXCLUDE_FROM_ACCUMULATE_PRED = "exclude_from_accumulate_pred"
    PREPROCESSING = "preprocessing"
    HANDLE_AS_SPARSE_LAYER = "handle_as_sparse_layer"
    PREFER_GPU = "prefer_gpu"
    CPU_ONLY = "cpu_only"
    LOCAL = "local"
    SPARSE_SHARDED = "sparse_sharded"        # a sparse parameter sharded over parameter servers
    SPARSE_DONT_SHARD = "sparse_dont_shard"  # sparse parameters kept together on one node
    COMPONENT = "component:"                 # prefix: parameters of one component placed together
    PIPELINE = "pipeline:"
    HOGWILD_DENSE = "hogwild_dense"
    EXTRA_INFO = "extra_info:"
    EMPTY_TAG = "empty_tag"
    DT_TAGS = (SPARSE_SHARDED, SPARSE_DONT_SHARD, COMPONENT, HOGWILD_DENSE)
    PREDICTION_SCHEMA = "prediction_schema"
    FEATURE_TRANSFORM = "feature_transform"
    FEATURE_TRANSFORM_SCHEMA = "feature_transform_schema"

    def __init__(self, tags):
        self.tags = list(tags) if isinstance(tags, (list, tuple)) else [tags]

    def __enter__(self):
        TagContext.current().add_tags(self.tags)
        return self

    def __exit__(self, *exc):
        TagContext.current().remove_tags(self.tags)

    def __call__(self, func):
        @functools.wraps(func)
        def tagged(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return tagged


Tags.TRAIN_ONLY = [Tags.EXCLUDE_FROM_PREDICTION, Tags.EXCLUDE_FROM_EVAL, Tags.EXCLUDE_FROM_ACCUMULATE_PRED]
Tags.EVAL_ONLY = [Tags.EXCLUDE_FROM_PREDICTION, Tags.EXCLUDE_FROM_TRAIN, Tags.EXCLUDE_FROM_ACCUMULATE_PRED]
Tags.PREDICTION_ONLY = [Tags.EXCLUDE_FROM_TRAIN, Tags.EXCLUDE_FROM_EVAL, Tags.EXCLUDE_FROM_ACCUMULATE_PRED]
