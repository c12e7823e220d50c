"""Nets given as operator arguments (RecurrentNetwork's step net, If's branches...)."""
from __future__ import annotations

from dslc.trace import netdef
from dslc.trace.net import Net
from dslc.ir.diagnostics import VerifyError
from dslc.trace.oprecord import OpRecord
from dslc.runtime.proto import caffe2 as caffe2_pb2


def net_message(value, rec: OpRecord, arg: str = "step_net") -> caffe2_pb2.NetDef:
    """The net in argument ``arg`` of ``rec``: a NetDef, a Net, or a NetDef in text or binary form."""
    if isinstance(value, caffe2_pb2.NetDef):
        return value
    if isinstance(value, Net):
        return value.Proto()
    if isinstance(value, (bytes, bytearray, str)):
        return netdef.parse_message(caffe2_pb2.NetDef, value, f"{rec.type}'s {arg}", rec.loc,
                                    f"pass {arg}=<net>.Proto()")
    raise VerifyError(f"{rec.type} needs {arg} (a NetDef), got {type(value).__name__}", rec.loc,
                      f"pass {arg}=<net>.Proto()")


def net_records(value, rec: OpRecord, arg: str) -> list:
    """The op records of the net in argument ``arg`` (located at ``rec`` when made from a message)."""
    return [netdef.op_record(op, rec.loc) for op in net_message(value, rec, arg).op]
