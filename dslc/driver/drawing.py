"""Pictures of recorded nets and plans as graphviz graphs (Caffe2's ``net_drawer``).

Caffe2's functions return a ``pydot.Dot``; these return a ``DotGraph`` with the methods
programs call on it (``create_png()``, ``create_svg()``, ``write_png(path)``,
``to_string()``). The DOT text is the text backend's (the writer ``dslc graph`` uses),
reached through the backend registry; images come from graphviz's ``dot`` program,
without pydot:

    graph = net_drawer.GetPydotGraph(model.net, rankdir="LR")
    open("net.png", "wb").write(graph.create_png())
"""
from __future__ import annotations

import shutil
import subprocess

from dslc import backends
from dslc.ir.diagnostics import DSLError
from dslc.trace.steps import iter_nets
from dslc.trace.tracing import user_location

OP_STYLE = {"shape": "box", "color": "#0F9D58", "style": "filled", "fontcolor": "#FFFFFF"}
BLOB_STYLE = {"shape": "octagon"}


class NetDrawerError(DSLError, RuntimeError):
    """Graphviz's ``dot`` is missing or failed."""


class DotGraph:
    """A graph as DOT text, rendered by graphviz's ``dot`` when asked for an image."""

    def __init__(self, text: str):
        self.text = text

    def to_string(self) -> str:
        return self.text

    def create(self, prog="dot", format="png") -> bytes:
        if format in ("raw", "dot"):
            return self.text.encode("utf-8")
        exe = shutil.which(prog)
        if exe is None:
            raise NetDrawerError(f"graphviz's {prog!r} program is not installed", user_location(),
                                 "install graphviz (e.g. apt install graphviz), or use to_string() for DOT text")
        proc = subprocess.run([exe, f"-T{format}"], input=self.text.encode("utf-8"), capture_output=True,
                              timeout=120)
        if proc.returncode != 0:
            raise NetDrawerError(f"graphviz failed: {proc.stderr.decode(errors='replace').strip()}", user_location())
        return proc.stdout

    def create_png(self, prog="dot") -> bytes:
        return self.create(prog, "png")

    def create_svg(self, prog="dot") -> bytes:
        return self.create(prog, "svg")

    def write(self, path, prog="dot", format="raw") -> bool:
        with open(path, "wb") as f:
            f.write(self.create(prog, format))
        return True

    def write_png(self, path, prog="dot") -> bool:
        return self.write(path, prog, "png")

    def write_svg(self, path, prog="dot") -> bool:
        return self.write(path, prog, "svg")


def _text():
    return backends.get("text")


def _ops(operators_or_net):
    """(name, [(type, inputs, outputs)]) of a Net, a NetDef or a list of OperatorDefs."""
    if hasattr(operators_or_net, "Proto"):
        proto = operators_or_net.Proto()
        name, ops = proto.name, list(proto.op)
    elif hasattr(operators_or_net, "op"):  # a NetDef
        name, ops = operators_or_net.name, list(operators_or_net.op)
    else:
        name, ops = "", list(operators_or_net)
    return name, [(op.type, list(op.input), list(op.output)) for op in ops]


def GetPydotGraph(operators_or_net, name=None, rankdir="LR", op_node_producer=None, blob_node_producer=None,
                  minimal_dependency=False):
    """The net's ops and blobs, with arrows from each op's inputs to it and on to its outputs."""
    net_name, ops = _ops(operators_or_net)
    text = _text().net_dot(name or net_name or "net", ops)
    return DotGraph(text.replace("digraph net {\n", f"digraph net {{\n  rankdir={rankdir};\n", 1))


def GetPydotGraphMinimal(operators_or_net, name=None, rankdir="LR", minimal_dependency=False, **kwargs):
    """The ops only, an arrow from an op to each later op that reads what it wrote."""
    net_name, ops = _ops(operators_or_net)
    return DotGraph(_text().net_dot_minimal("net " + (name or net_name or ""), ops, rankdir))


def GetPlanGraph(plan_def, name=None, rankdir="TB"):
    """The plan's nets, each a cluster of its ops and blobs."""
    if hasattr(plan_def, "network"):
        nets = [_ops(n) for n in plan_def.network]
    else:
        nets = [_ops(n) for n in dict((n.Name(), n) for n in iter_nets(plan_def)).values()]
    return DotGraph(_text().plan_dot(nets, rankdir))


def GetGraphPngSafe(func, *args, **kwargs):
    """``func(*args, **kwargs).create_png()``, or None where graphviz fails (as Caffe2's)."""
    try:
        return func(*args, **kwargs).create_png()
    except NetDrawerError:
        return None
