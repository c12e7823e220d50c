"""Ops that passes introduce: checks on promoted blob values, fused elementwise groups."""
from __future__ import annotations

from ..opdef import PURE, REQUIRED, declare
from . import failing

declare("must", 1, lambda t, a, n: [t[0]], attrs={"blob": REQUIRED}, symbol="blob",
        doc="the value itself; an error (read before written) if the blob it came from was unset")
declare("fused", (0, None), None, results=(1, None), regions=("body",), traits={PURE},
        may_fail=failing.fused, doc="an elementwise group for backends to compile as one kernel: body args are the "
            "operands, the body yields the results")
declare("concurrent", 0, None, results=(0, None), regions=("body",),
        doc="independent ops a backend may run at the same time (the schedule pass makes these "
            "from large ops of one topological generation); the body yields their results")
