"""Passes over the IR, the pass manager, and the default pipeline."""
from . import cse, dce, fold, fusion, infer, promote, schedule  # noqa: F401  (registers the passes)
from .manager import PASSES, Pass, PassManager, parse_pipeline, register

DEFAULT_PIPELINE = ("infer-types", "fuse-nets", "promote-blobs", "fold-constants", "cse", "dce",
                    "fuse-elementwise", "schedule")

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass", "PassManager", "parse_pipeline", "register"]
