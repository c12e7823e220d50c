"""Passes over the IR, the pass manager, and the default pipeline."""
from . import cse, dce, fold, fuse_conv, fusion, infer, promote, schedule  # noqa: F401  (registers the passes)
from .manager import PASSES, Pass, PassManager, parse_pipeline, register

# promote-blobs does fuse-nets' forwarding in every block as it carries blobs, so the
# default pipeline runs only the former; fuse-nets stays available by name.
DEFAULT_PIPELINE = ("infer-types", "promote-blobs", "fold-constants", "cse", "dce", "fuse-conv", "fuse-elementwise",
                    "schedule")

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass", "PassManager", "parse_pipeline", "register"]
