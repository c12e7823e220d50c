"""Caffe2's immediate mode (``workspace.StartImmediate``): every op recorded into any net
also runs at once, in a workspace of its own, so a notebook user sees each value as the
net is written. The immediate workspace has a temporary root folder, removed with it.

    workspace.StartImmediate(i_know=True)
    net.ConstantFill([], "x", shape=[2], value=1.0)   # runs now
    workspace.FetchImmediate("x")                     # array([1., 1.])
    workspace.StopImmediate()                         # the workspace and its folder go

It is a debugging aid, as in Caffe2: ops run one by one on the interpreter, and the
net being recorded is unchanged by it.
"""
from __future__ import annotations

import shutil
import tempfile
import warnings

from dslc.driver import blobs, runner
from dslc.trace import net_record, netdef
from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location

_state: dict = {"ws": None, "root": ""}


class ImmediateError(DSLError, RuntimeError):
    """Immediate mode used while it is off (a RuntimeError, as Caffe2 raises)."""


def root_folder() -> str:
    """The immediate workspace's folder ("" when immediate mode is off)."""
    return _state["root"]


def IsImmediate() -> bool:
    return _state["ws"] is not None


def StartImmediate(i_know: bool = False) -> None:
    """Run every op as it is recorded, in a fresh workspace of its own (see the module docstring)."""
    if IsImmediate():
        StopImmediate()
    if not i_know:
        warnings.warn("immediate mode runs every op as it is recorded, one by one: a debugging aid, "
                      "slow and not for training; pass i_know=True to silence this", stacklevel=2)
    _state["root"] = tempfile.mkdtemp(prefix="dslc-immediate-")
    ws = runner.Workspace()
    ws.root_folder = _state["root"]
    _state["ws"] = ws
    net_record.set_immediate_hook(_run_now)


def StopImmediate() -> None:
    """Leave immediate mode: its workspace and folder are removed."""
    net_record.set_immediate_hook(None)
    _state["ws"] = None
    if _state["root"]:
        shutil.rmtree(_state["root"], ignore_errors=True)
    _state["root"] = ""


def _workspace():
    ws = _state["ws"]
    if ws is None:
        raise ImmediateError("immediate mode is off", user_location(),
                             "call workspace.StartImmediate() first")
    return ws


def _run_now(record) -> None:
    _workspace().run(netdef.op_message(record), "interp")


def RunOperatorImmediate(op) -> bool:
    """Run the OperatorDef ``op`` in the immediate workspace."""
    return _workspace().run(op, "interp")


def ImmediateBlobs() -> list:
    return _workspace().names()


def FetchImmediate(name):
    return blobs.fetch(_workspace(), name)


def FeedImmediate(name, value, device_option=None) -> bool:
    _workspace().feed(str(name), value)
    return True
