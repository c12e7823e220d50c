"""The interpreter backend: the reference semantics every other backend must match.

Each region is compiled once into a Python function calling pre-resolved numpy
kernels (``codegen``); the plan (groups, tasks, instances, parallel regions) is
run by ``executor`` on threads, over the shared runtime's workspaces. The kernels of
the db, data, record, collect and nn ops are imported when a program first uses one
(``kernels.kernel_entry``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from dslc.runtime.memory import keep_freed_memory
from dslc.runtime.streams import session_seed
from dslc.ir import Module

from .executor import Executor


@dataclass
class Config:
    """Backend options kernels may read."""

    log: object = None  # where Print writes (default: stderr)
    seed: int = 0  # names the random ops' streams (with each op's output blob): the session's
    profile: object = None  # an OpProfile (runtime/profile.py): time every op call into it


class InterpBackend:
    name = "interp"

    def __init__(self, log=None, seed=None, profile=None, **_options):
        """``seed``: of the random ops' streams (None: the process's, streams.default_seed);
        ``profile``: an OpProfile every op call is timed into."""
        self.cfg = Config(log or sys.stderr, session_seed(seed), profile)
        keep_freed_memory()

    def compile(self, module: Module) -> Executor:
        """Compile every region of ``module``; the result runs with ``.run(workspace)``."""
        return Executor(module, self.cfg)

    def run(self, module: Module, ws) -> None:
        self.compile(module).run(ws)
