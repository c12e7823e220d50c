"""Which optimizer a parameter gets, by its tag (Caffe2's ``optimizer_context``).

    with UseOptimizer({"WEIGHT": adagrad, "BIAS": sgd}):   # or UseOptimizer(opt): the default
        brew.fc(model, "x", "y", 4, 2)                      # y_w -> adagrad, y_b -> sgd

``model.create_param`` looks the current context up for each of the parameter's tags
(then ``DEFAULT``) and records the optimizer in the parameter's info; nested contexts
add to the outer ones (dslc/modifier_context.py).
"""
from __future__ import annotations

from dslc.modifier_context import DEFAULT_MODIFIER, ModifierContext, UseModifierBase

DEFAULT_OPTIM = DEFAULT_MODIFIER


class OptimizerContext(ModifierContext):
    """The optimizers in force: tag -> optimizer."""

    def has_optimizer(self, name) -> bool:
        return self._has_modifier(name)

    def get_optimizer(self, name):
        assert self.has_optimizer(name), f"{name} optimizer is not provided"
        return self._get_modifier(name)


class UseOptimizer(UseModifierBase):
    def _context_class(self):
        return OptimizerContext
