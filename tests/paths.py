"""Where the checkout's folders are, for tests that read or run its files (wherever in
tests/ the test lives)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests/ is at its top
EXAMPLES = ROOT / "examples"
BENCH = ROOT / "bench"


def load(path, name: str | None = None) -> ModuleType:
    """The example or bench script at ``path`` imported as a module (its ``__main__`` part
    does not run): the tests use the checkout's own files, never copies."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or f"dslc_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
