"""Caffe2's Predictor (``workspace.Predictor(init_net, predict_net)``): a model served from
a workspace of its own. The init net runs once when it is made; ``run`` feeds the inputs,
runs the predict net (compiled once) and returns its external outputs; its other blobs
are not kept (no one can fetch them), so the passes may fuse through them.

    p = workspace.Predictor(init_net_bytes, predict_net_bytes)
    (probs,) = p.run([batch])              # the inputs in the predict net's input order
    (probs,) = p.run({"data": batch})      # or by name

The inputs are the predict net's external inputs the init net did not make (its
parameters are the others), in the net's order.
"""
from __future__ import annotations

from dslc.driver.blobs import fetch
from dslc.driver.runner import HEAVY as _HEAVY, Workspace, as_net as _as_net
from dslc.ir.diagnostics import DSLError
from dslc.trace.net import Net
from dslc.trace.task import Task, TaskGroup, WorkspaceType
from dslc.trace.netdef import parse_message
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location


class PredictorError(DSLError, RuntimeError):
    """Inputs that do not fit the predict net."""


def _given(net, what: str):
    """The bytes, NetDef or Net a caller passed (a str is Python 2's str of the bytes, as
    Caffe2's tests pass them)."""
    if isinstance(net, str):
        try:
            return net.encode("latin-1")
        except UnicodeEncodeError:
            raise PredictorError(f"the {what} is a str that is not serialized bytes", user_location(),
                                 "pass net.Proto() or net.Proto().SerializeToString()") from None
    return net


def _netdef(net, what: str) -> caffe2_pb2.NetDef:
    net = _given(net, what)
    if isinstance(net, (bytes, bytearray)):
        return parse_message(caffe2_pb2.NetDef, net, f"the {what}", user_location(),
                             "pass net.Proto() or net.Proto().SerializeToString()")
    return net.Proto() if hasattr(net, "Proto") else net


class Predictor:
    def __init__(self, init_net, predict_net):
        self._ws = Workspace()
        init = _given(init_net, "init net")
        if isinstance(init, (bytes, bytearray)) and len(init) < _HEAVY:
            init = _netdef(init, "init net")  # (a model's weights are read apart, by as_net)
        predict = _netdef(predict_net, "predict net")
        # (the init net runs once: a Net made afresh from a NetDef, its weights held by the workspace alone)
        self._ws.run(init if isinstance(init, Net) else Net(init) if isinstance(init, caffe2_pb2.NetDef)
                     else _as_net(init, "the init net"))
        self._net = Net(predict)
        self.input_names = [b for b in predict.external_input if not self._ws.has_blob(b)]
        self.output_names = list(predict.external_output)
        # Caffe2's predictor keeps its workspace to itself: no one but ``run`` sees a blob
        # of it, and ``run`` returns the external outputs alone. So the predict net runs as
        # a task whose other blobs vanish after each run (a PRIVATE workspace over this
        # one: the weights and what the net updates in place stay): dce then drops the
        # stores of the intermediates and fuse-conv fuses Conv -> SpatialBN -> Sum -> Relu.
        self._group = TaskGroup(workspace_type=WorkspaceType.PRIVATE)
        Task(step=self._net, outputs=self.output_names, group=self._group)

    def run(self, inputs) -> list:
        if isinstance(inputs, dict):
            unknown = [k for k in inputs if k not in self.input_names]
            if unknown:
                raise PredictorError(f"the predict net has no input {unknown[0]!r}", user_location(),
                                     f"its inputs are {self.input_names}")
            feeds = dict(inputs)
        else:
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise PredictorError(f"the predict net takes {len(self.input_names)} inputs "
                                     f"({self.input_names}), got {len(inputs)}", user_location(),
                                     "pass one array per input, in that order (or a dict by name)")
            feeds = dict(zip(self.input_names, inputs))
        for name, value in feeds.items():
            self._ws.feed(name, value)
        self._ws.session().run(self._group)
        return [fetch(self._ws, name) for name in self.output_names]
