"""Named passes, pipelines, and the pass manager that runs them.

A pass is a class with a ``name`` and ``run(module)`` that rewrites the module in
place and leaves it verifying. ``PassManager`` runs a list of them, optionally
verifying after each, printing the IR after each (or after one), and timing them.

A pass that raises, or leaves IR the verifier refuses, is dslc's bug: ``PassError``
names the pass (an internal error, exit 1), never the user's line. The one exception
is ``ProgramTypeError``: type inference finding that the user's own types disagree.
"""
from __future__ import annotations

import sys
import time
from typing import ClassVar

from ..core import Module
from ..diagnostics import DSLError, PassError, ProgramTypeError, VerifyError
from ..printer import print_module
from ..verifier import verify

PASSES: dict[str, type] = {}


class Pass:
    """Base of all passes: ``run`` rewrites the module in place."""

    name: ClassVar[str] = ""
    # True for passes that keep ``Module.types_settled`` right themselves (they end with
    # a whole type inference); before any other pass the manager clears it.
    sets_types_settled: ClassVar[bool] = False

    def run(self, module: Module) -> None:
        raise NotImplementedError


def register(cls):
    """Class decorator: make the pass available by its ``name``."""
    PASSES[cls.name] = cls
    return cls


def parse_pipeline(spec) -> list[str]:
    """``"a,b,c"`` (or a list) -> pass names; unknown names are an error with suggestions."""
    names = [n.strip() for n in spec.split(",") if n.strip()] if isinstance(spec, str) else list(spec)
    import difflib
    for n in names:
        if n not in PASSES:
            close = difflib.get_close_matches(n, PASSES, n=3)
            raise DSLError(f"unknown pass {n!r}",
                           hint=f"did you mean {' or '.join(close)}?" if close
                           else f"passes: {', '.join(sorted(PASSES))}")
    return names


class PassManager:
    """Runs passes in order, with the debugging aids of mlir-opt."""

    def __init__(self, passes, verify_each: bool = False, print_after=None, out=None,
                 with_locs: bool = True):
        self.names = parse_pipeline(passes)
        self.verify_each = verify_each
        self.print_after = print_after  # None, "all", or a set of pass names
        self.out = out or sys.stderr
        self.with_locs = with_locs
        self.times: list[tuple[str, float]] = []

    def run(self, module: Module, redo=None) -> Module:
        """Run the passes on ``module``, then verify it once (after each pass too if
        ``verify_each``). ``redo``: a function giving the same input module again; if the
        final verification fails, the passes run again on it, verifying after each, to
        name the pass that broke the IR."""
        done = []
        for name in self.names:
            t = time.perf_counter()
            p = PASSES[name]()
            if not p.sets_types_settled:
                module.types_settled = False  # it may change types and not say
            try:
                p.run(module)
            except ProgramTypeError:
                raise
            except Exception as e:
                raise PassError(name, e, getattr(e, "loc", None)) from e
            self.times.append((name, time.perf_counter() - t))
            done.append(name)
            if self.verify_each:
                self._verify(module, done)
            if self.print_after == "all" or (self.print_after and name in self.print_after):
                self.out.write(f"// ----- IR after {name} ----- //\n")
                self.out.write(print_module(module, self.with_locs))
        if done and not self.verify_each:
            try:
                verify(module)
            except VerifyError as e:
                if redo is not None:  # find the pass: again, verifying after each
                    PassManager(self.names, verify_each=True).run(redo())
                raise PassError(", ".join(done), e, e.loc) from e
        return module

    def _verify(self, module, done):
        try:
            verify(module)
        except VerifyError as e:
            raise PassError(done[-1], e, e.loc) from e

    def timing_table(self) -> str:
        """Seconds per pass, MLIR-style."""
        total = sum(t for _, t in self.times) or 1e-12
        lines = ["  time (s)    share  pass", "  --------  -------  ----"]
        lines += [f"  {t:8.4f}  {100 * t / total:6.1f}%  {n}" for n, t in self.times]
        lines.append(f"  {total:8.4f}  100.0%  total")
        return "\n".join(lines) + "\n"
