"""Caffe2's ``layers`` package: the layer classes of a ``LayerModelHelper`` model.

Importing it registers every ModelLayer subclass defined in its modules under its class
name (``model.FC(...)`` looks the name up); the base (layers.py) knows none of them.
"""
from __future__ import annotations

import inspect

from dslc.layers import (concat, fc, features, functional, interactions, losses, normalization, random_features, records,
                         sampling, sparse, weights)
from dslc.layers.layers import ModelLayer, register_layer

_MODULES = (concat, fc, features, functional, interactions, losses, normalization, random_features, records, sampling,
            sparse, weights)


def _register(modules) -> None:
    for module in modules:
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, ModelLayer) and not name.startswith("_") \
                    and cls.__module__ == module.__name__:
                register_layer(name, cls)


_register(_MODULES)
