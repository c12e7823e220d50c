"""Source markers for error-location tests: a line ending in ``# @tag`` names that line.

    M = Markers(__file__)
    ops.Div(...)                       # @div-zero
    M.assert_error_at(err, "div-zero", "division by zero")
"""
from __future__ import annotations

import os

from dslc.ir.diagnostics import DSLError


class Markers:
    """The ``# @tag`` markers of one test file."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().splitlines()

    def line_of(self, tag: str) -> int:
        """The 1-based line that ends with ``# @tag`` (exactly one must)."""
        hits = [i + 1 for i, text in enumerate(self.lines) if text.rstrip().endswith(f"# @{tag}")]
        assert len(hits) == 1, f"marker @{tag} must appear exactly once, found {len(hits)}"
        return hits[0]

    def assert_at(self, err: DSLError, tag: str) -> None:
        """``err`` is located in the file at the ``tag`` line."""
        assert isinstance(err, DSLError)
        assert err.loc is not None, f"no location on: {err}"
        assert os.path.abspath(err.loc.file) == self.path
        assert err.loc.line == self.line_of(tag), str(err)

    def assert_error_at(self, err: DSLError, tag: str, *words: str) -> None:
        """``err`` is located at the ``tag`` line, has a hint, and its message says ``words``."""
        self.assert_at(err, tag)
        assert err.hint, f"no hint on: {err}"
        for w in words:
            assert w in err.message, f"{w!r} not in {err.message!r}"
