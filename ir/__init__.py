"""dslc's IR: typed SSA values, structured regions, one op table, printer, verifier."""
from . import ops as _ops  # noqa: F401  (declares every operator)
from .builder import Builder, make_op
from .core import Module, Operation, OpResult, Region, RegionArg, Symbol, Value
from .diagnostics import (DSLError, DSLTypeError, ExecutionError, JobFileError, Location,
                          TraceError, UnknownOperatorError, VerifyError)
from .opdef import OPS, OpDef
from .printer import print_module, print_op
from .types import ANY, AnyType, HandleType, TensorType, Type
from .verifier import verify

__all__ = [
    "ANY", "AnyType", "Builder", "DSLError", "DSLTypeError", "ExecutionError", "HandleType",
    "JobFileError", "Location", "Module", "OPS", "OpDef", "OpResult", "Operation", "ParseError", "parse", "parse_all", "Region",
    "RegionArg", "Symbol", "TensorType", "TraceError", "Type", "UnknownOperatorError", "Value",
    "VerifyError", "make_op", "print_module", "print_op", "verify",
]


def __getattr__(name):
    # the parser (and lark) load on first use: most runs never parse text
    if name in ("parse", "parse_all", "ParseError"):
        from . import parser
        return getattr(parser, name)
    raise AttributeError(f"module 'dslc.ir' has no attribute {name!r}")
