"""Importing this package declares every operator in ``dslc.ir.OPS``."""
from . import effects, structure, tensor  # noqa: F401
