"""Lowering recorded front-end objects into the IR (the tracer's second half)."""
from .plan import lower_group

__all__ = ["lower_group"]
