"""Importing this package declares every operator in ``dslc.ir.OPS``."""
from . import data, dataflow, db, effects, structure, tensor  # noqa: F401
