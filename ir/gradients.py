"""Gradient declarations: for each differentiable op, the ops that compute its inputs' gradients.

An op module declares an op's gradient right after the op itself:

    @gradient("Sigmoid")
    def _(g):  # dX = SigmoidGradient(Y, dY)
        return [GradOp("SigmoidGradient", [g.O[0], g.GO[0]], [g.GI[0]])]

The maker sees the forward op's blob names (``I``, ``O``), its outputs' gradient
names (``GO``; None for an output no loss depends on), the names the gradients of
its inputs must be written to (``GI``), and its arguments (``args``, as the user
passed them). It returns plain op records; the front end's reverse-mode pass
(dslc/autodiff/gradients.py) records them into the net, so gradients are ordinary IR ops.
An input gets a gradient iff one of the returned ops writes its ``GI`` name, or the
maker returns a ``SparseGrad`` for it: a gradient that is the rows ``values`` at the
rows ``indices`` of the input, zero elsewhere (Gather's, SparseLengthsSum's). The
reverse pass hands a sparse gradient to the optimizer as a ``GradientSlice``, and
turns it into a dense one (``SparseToDense``) only where a dense one is needed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class GradOp:
    type: str
    inputs: list
    outputs: list
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SparseGrad:
    """The gradient of input ``input`` as (``indices``, ``values``) blobs: values[i] is the
    gradient of row indices[i] (rows repeated in indices add up)."""
    input: int
    indices: str
    values: str


@dataclass
class GradContext:
    I: list          # noqa: E741  (Caffe2's names: inputs, outputs, grads of outputs, grads of inputs)
    O: list          # noqa: E741
    GO: list
    GI: list
    args: dict

    def pick(self, *names) -> dict:
        """The forward op's arguments among ``names`` (the gradient op takes the same ones)."""
        return {k: self.args[k] for k in names if k in self.args}


# The device-option tags of the Sum ops a reverse pass adds (Caffe2's core.IR names): each
# such Sum is marked IS_AUTO_GEN_SUM_OPS_TAG, and when the gradient ops it adds up run under an
# option holding ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG the Sum keeps nothing else of that option
IS_AUTO_GEN_SUM_OPS_TAG = "is_auto_gen_sum_ops"
ONLY_KEEP_IS_AUTO_GEN_SUM_OPS_TAG = "only_keep_is_auto_gen_sum_ops_tag"

GRADIENTS: dict[str, Callable] = {}
NO_GRADIENT: set = set()  # ops whose inputs get no gradient (metrics, fills, StopGradient)


def gradient(name: str):
    """Declare the gradient maker of op ``name`` (see the module docstring)."""
    def register(maker):
        if name in GRADIENTS:
            raise ValueError(f"gradient of {name} declared twice")
        GRADIENTS[name] = maker
        return maker
    return register


def no_gradient(*names: str) -> None:
    NO_GRADIENT.update(names)


def unary(name: str, grad_op: str, use_output: bool = True, args=()):
    """The common case: dX = <grad_op>(Y or X, dY, same arguments)."""
    @gradient(name)
    def make(g):
        src = g.O[0] if use_output else g.I[0]
        return [GradOp(grad_op, [src, g.GO[0]], [g.GI[0]], g.pick(*args))]
    return make
