"""dslc: trace Caffe2-style jobs into a typed SSA IR, optimize it, run it on a backend.

Import the modules as Caffe2 programs do: ``from dslc import core``,
``from dslc.net_builder import ops``, ``from dslc.task import Task``,
``from dslc.session import LocalSession``.
"""
__version__ = "0.1.0"

from dslc import ir  # noqa: E402,F401  (the IR package, mapped from ir/)
from dslc.ir.diagnostics import DSLError  # noqa: E402,F401
