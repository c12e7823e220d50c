"""Where the checkout's folders are, for tests that read or run its files (wherever in
tests/ the test lives)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests/ is at its top
EXAMPLES = ROOT / "examples"
BENCH = ROOT / "bench"
