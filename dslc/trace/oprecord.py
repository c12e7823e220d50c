"""One recorded operator call, and which names are operators a net can record.

An ``OpRecord`` is what ``net.<Op>(...)`` leaves behind: the op's type, its input and
output blob names, its arguments and the user's file:line. Nothing runs here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dslc.ir.diagnostics import Location
from dslc.ir.opdef import OPS
from dslc.runtime.proto.caffe2 import TensorProto

# Caffe2 spellings that the lowering turns into declared ops.
FILL_ALIASES = {
    "GivenTensorFill": np.float32, "GivenTensorDoubleFill": np.float64,
    "GivenTensorIntFill": np.int32, "GivenTensorInt64Fill": np.int64,
    "GivenTensorBoolFill": np.bool_, "GivenTensorStringFill": np.object_,
}
ALIASES = frozenset(FILL_ALIASES)
SPECIAL_ARGS = ("name", "engine", "device_option", "control_input", "is_gradient_op")


DataType = TensorProto.DataType  # Caffe2's tensor type codes (core.DataType.FLOAT ...), as in Caffe2


@dataclass(slots=True)
class OpRecord:
    """One recorded operator call."""

    type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    args: dict
    loc: Location
    extra: dict = field(default_factory=dict)  # name, engine, device_option ...: kept, unused


_NO_RESULTS: dict[str, bool] = {}  # declared op name -> whether it has no results (declarations never change)


def _has_no_results(op_type: str) -> bool:
    """Whether ``op_type`` is declared with no results (an op without outputs gets no auto name)."""
    known = _NO_RESULTS.get(op_type)
    if known is None:
        opdef = OPS.get(op_type)
        if opdef is None:
            return False
        known = _NO_RESULTS[op_type] = opdef.results[1] == 0
    return known


def _special_args(op_type: str, args: dict) -> dict:
    """Take Caffe2's non-attribute arguments (name, engine, ...) out of ``args``."""
    # A Python op's "name" is its function's name (an attribute kernels report), not Caffe2's op name.
    keep = ("name",) if op_type == "Python" else ()
    return {k: args.pop(k) for k in SPECIAL_ARGS if k in args and k not in keep}


_IR_ONLY = frozenset(d.name for d in OPS if d.name[0].islower() or d.name == "Const")


def is_operator(op_type: str) -> bool:
    """Whether ``net.<op_type>(...)`` records an op (IR-only op names do not count)."""
    return (op_type in OPS or op_type in ALIASES or op_type in OPS.aliases) and op_type not in _IR_ONLY


IsOperator = is_operator


def IsOperatorWithEngine(op_type: str, engine: str) -> bool:
    """dslc has one implementation per operator: Caffe2's default engine."""
    return engine in ("", "DEFAULT") and is_operator(op_type)

