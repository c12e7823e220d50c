"""One line of a plan: how deep it is indented, its text, and the source line it explains."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Line:
    depth: int
    text: str
    loc: object = None  # a Location, or None for labels ("body:", "else:")
