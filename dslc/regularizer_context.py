"""Which regularizer a layer's parameter gets, by name (Caffe2's ``regularizer_context``).

    with UseRegularizer({"WEIGHT": L1Norm(0.1), "BIAS": L1Norm(0)}):
        reg = RegularizerContext.current().get_regularizer("WEIGHT")
        model.FC(record, 4, weight_reg=reg)
"""
from __future__ import annotations

from dslc.modifier_context import ModifierContext, UseModifierBase


class RegularizerContext(ModifierContext):
    def has_regularizer(self, name) -> bool:
        return self._has_modifier(name)

    def get_regularizer(self, name):
        assert self.has_regularizer(name), f"{name} regularizer is not provided!"
        return self._get_modifier(name)


class UseRegularizer(UseModifierBase):
    def _context_class(self):
        return RegularizerContext
