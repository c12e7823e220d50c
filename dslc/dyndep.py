"""Caffe2's ``dyndep``: loading C++ operator libraries. dslc cannot run Caffe2's C++
operators (its operators are declared in ir/ops and run by its backends), so a library
that exists is refused with a located error, and, as in Caffe2, a path that does not
exist is skipped with a note (programs load optional libraries that way)."""
from __future__ import annotations

import os
import sys

from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class OpsLibraryError(DSLError):
    """A C++ operator library dslc cannot load."""


def InitOpsLibrary(name, trigger_lazy=True):
    if not os.path.exists(name):
        print(f"Ignoring {name} as it is not a valid file.", file=sys.stderr)
        return
    raise OpsLibraryError(f"cannot load the C++ operator library {name!r}: dslc runs its own operators, "
                          "not Caffe2's C++ ones", user_location(),
                          "`dslc ops` lists the operators dslc has; a missing one is a Python op away "
                          "(net.Python(f))")


def GetImportedOpsLibraries() -> set:
    return set()
