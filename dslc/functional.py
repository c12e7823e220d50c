"""Operators as plain functions on numpy arrays (Caffe2's ``caffe2.python.functional``).

``Functional.Relu(x)`` runs one ``Relu`` on ``x`` in a private workspace and returns its
outputs as a tuple whose items are also reachable by name::

    y = Functional.Relu(x)                 # y[0] is y["output_0"]
    out, info = Functional.Concat(a, b, axis=1)
    parts = Functional.Split(x, split=[2, 3], num_output=2)

Inputs are named ``input_0 ...``, outputs ``output_0 ...``. How many outputs an op
makes comes from its declaration in the op table: ``num_output=`` when given, else the
most it can make; an op that can make any number of outputs needs ``num_output``.
Keyword arguments are the op's arguments; ``device_option`` picks the device (backend)
as it does for ``core.CreateOperator``. The caller's current workspace is left alone.
"""
from __future__ import annotations

import collections

from dslc import core, workspace
from dslc.ir.opdef import OPS

__all__ = ["Functional"]


def _declaration(op_type: str):
    name = OPS.canonical(op_type)
    if name not in OPS:
        raise ValueError(f"Functional: unknown operator {op_type!r}; `dslc ops` lists the operators dslc has")
    return OPS[name]


def _outputs_type(names):
    """A namedtuple class for ``names`` whose items are also indexed by the names themselves."""
    base = collections.namedtuple("output", names, rename=True)
    where = {n: i for i, n in enumerate(names)}

    def getitem(self, key):
        return tuple.__getitem__(self, where[key] if isinstance(key, str) else key)

    return type("output", (base,), {"__getitem__": getitem, "__slots__": ()})


def _output_count(op_type: str, declared, n_inputs: int, args: dict) -> int:
    lo, hi = declared.results
    if "num_output" in args:
        n = int(args.pop("num_output"))
        if n < lo or (hi is not None and n > hi):
            raise ValueError(f"Functional {op_type}: num_output={n}, but {op_type} makes "
                             f"{lo}{'' if hi == lo else ' or more' if hi is None else f' to {hi}'} outputs")
        return n
    if hi is None:
        raise ValueError(f"Functional {op_type}: {op_type} can make any number of outputs; "
                         "say how many with num_output=N")
    return hi


class _Functional:
    """``Functional.<Op>(*arrays, **args)``: run one operator on the arrays."""

    def __getattr__(self, op_type: str):
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        declared = _declaration(op_type)

        def run(*inputs, **args):
            lo, hi = declared.operands
            if len(inputs) < lo or (hi is not None and len(inputs) > hi):
                raise ValueError(f"Functional {op_type}: got {len(inputs)} inputs, {op_type} takes "
                                 f"{lo}{'' if hi == lo else ' or more' if hi is None else f' to {hi}'}")
            in_names = [f"input_{i}" for i in range(len(inputs))]
            out_names = [f"output_{i}" for i in range(_output_count(op_type, declared, len(inputs), args))]
            op = core.CreateOperator(op_type, in_names, out_names, **args)
            ws = workspace.Workspace()
            with workspace.current_as(ws):
                for name, value in zip(in_names, inputs):
                    workspace.FeedBlob(name, value)
                workspace.RunOperatorOnce(op)
                values = [workspace.FetchBlob(n) for n in out_names]
            return _outputs_type(out_names)(*values)

        run.__name__ = op_type
        return run


Functional = _Functional()
