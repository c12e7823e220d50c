"""Caffe2's net transforms (``workspace.ApplyTransform``): a registry of named rewrites of
a NetDef. dslc's own optimizations are IR passes (docs/passes.md); what is here are the
rewrites Caffe2 programs ask for by name.

* ``ConvToNNPack``: every Conv op's engine becomes NNPACK (as Caffe2's; dslc runs its own
  convolution whatever the engine, so the values do not change).

``ApplyTransformIfFaster`` times the net and its transform in the current workspace and
keeps the transform only if it is faster by the factor asked for.
"""
from __future__ import annotations

import time

from dslc.driver import runner
from dslc.ir.diagnostics import DSLError
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace.tracing import user_location


class TransformError(DSLError, RuntimeError):
    """A transform name the registry does not have."""


def _conv_to_nnpack(net: caffe2_pb2.NetDef) -> None:
    for op in net.op:
        if op.type == "Conv":
            op.engine = "NNPACK"


TRANSFORMS = {"ConvToNNPack": _conv_to_nnpack}


def apply(transform_key: str, net) -> caffe2_pb2.NetDef:
    rewrite = TRANSFORMS.get(str(transform_key))
    if rewrite is None:
        raise TransformError(f"no transform named {transform_key!r}", user_location(3),
                             f"the transforms are: {', '.join(sorted(TRANSFORMS))}")
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net.Proto() if hasattr(net, "Proto") else net)
    rewrite(out)
    return out


@runner.raises_runtime_error
def _run_once(net) -> None:
    """``workspace.RunNetOnce(net)``: a Net or NetDef, once, in the current workspace."""
    runner.current().run(runner.as_net(net))


def apply_if_faster(transform_key: str, net, init_net, warmup_runs=5, main_runs=10,
                    improvement_threshold=1.01) -> caffe2_pb2.NetDef:
    original = caffe2_pb2.NetDef()
    original.CopyFrom(net.Proto() if hasattr(net, "Proto") else net)
    transformed = apply(transform_key, original)

    def timed(netdef) -> float:
        _run_once(init_net)
        for _ in range(int(warmup_runs)):
            _run_once(netdef)
        start = time.perf_counter()
        for _ in range(int(main_runs)):
            _run_once(netdef)
        return time.perf_counter() - start

    before, after = timed(original), timed(transformed)
    return transformed if before > after * float(improvement_threshold) else original
