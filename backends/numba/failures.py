"""Errors raised inside compiled kernels, reported as the interpreter reports them.

A kernel cannot raise a ``DSLError`` (numba raises only exceptions whose class it can
pickle by name, with plain arguments), so the generated code raises
``KernelFail(site, *values)``: ``site`` numbers the check in the function's ``Sites``,
which knows the op and runs the interpreter's own check on the values (for a kernel
of whole arrays, ``interpreted``: the interpreter's kernel on the op's own inputs). The
user gets the interpreter's message and hint at the failing op's line::

    if n_0 < 0:
        raise KernelFail(0, n_0)      # site 0: the for at job.py:12, Run.trip(n_0)
"""
from __future__ import annotations

import numpy as np

from dslc.backends.interp.executor import Run
from dslc.ir.diagnostics import DSLError
from dslc.ir.ops.numeric import int_div


class KernelFail(Exception):
    """Raised by generated code: ``args`` are (site, the values its check needs)."""


def _zero_divisor(value):
    int_div(np.int64(1), np.int64(value))  # raises the interpreter's "integer division by zero"


def interpreted(op, *inputs) -> None:
    """Run the interpreter's kernel of ``op`` on ``inputs`` (the op's operands), which raises
    the interpreter's error for them."""
    from dslc.backends.interp.kernels import kernel_entry
    kernel_entry(op.name)[0](op, None)(*inputs)


# kind -> check(op, *values); kernel modules add their own kinds
CHECKS = {"trip": lambda op, n: Run.trip(n), "div": lambda op, d: _zero_divisor(d)}


class Sites:
    """The checks one generated function makes, numbered in the order it makes them."""

    def __init__(self):
        self.sites: list = []  # (op, check kind)

    def add(self, op, kind: str) -> int:
        self.sites.append((op, kind))
        return len(self.sites) - 1

    def error(self, fail: KernelFail) -> DSLError:
        """The interpreter's error for ``fail``, located at its op."""
        site, *values = fail.args
        op, kind = self.sites[site]
        try:
            CHECKS[kind](op, *values)
        except DSLError as e:
            e.loc = e.loc or op.loc
            return e
        except Exception as e:  # (as the interpreter reports a kernel's own exception)
            return DSLError(f"{op.name} failed: {type(e).__name__}: {e}", op.loc)
        raise AssertionError(f"a kernel failed the {kind} check at site {site}, which the interpreter accepts")
