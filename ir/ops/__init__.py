"""Importing this package declares every operator in ``dslc.ir.OPS``."""
from . import collect, data, dataflow, db, dbinput, effects, records, shape, structure, tensor  # noqa: F401
from . import nn, losses, optim, nn_grads, activations, segments, products, conv, normalization, reductions  # noqa: F401  (training ops and their gradients)
