"""The current workspace, and Caffe2-style helpers on it (FeedBlob, FetchBlob, RunPlan).

There is one current workspace per process, as in Caffe2. ``LocalSession()`` runs
in it by default, and makes its own root current while it runs, so Python ops
that call ``FetchBlob`` read the workspace of the session running them.
"""
from __future__ import annotations

import contextlib
import types

import numpy as np

from dslc.backends.runtime import workspace as _rt
from dslc.ir.diagnostics import DSLError
from dslc.tracing import user_location


class Blob(_rt.Cell):
    """A blob of a user's workspace: Caffe2 code reads ``ws.blobs[name].fetch()`` and ``.feed(v)``."""

    __slots__ = ()

    def fetch(self):
        """The value as numpy (a 0-d array for a scalar)."""
        return _value_of(self, self.name)

    def feed(self, value) -> bool:
        self.v = _rt.to_value(value)
        return True


class Workspace(_rt.Workspace):
    """A workspace you can run things in directly (``ws.run(plan)``)."""

    cell_type = Blob

    def run(self, runnable, backend: str = "interp"):
        from dslc.session import LocalSession
        LocalSession(self, backend=backend).run(runnable)

    def fetch_blob(self, name):
        return _fetch(self, name)

    def feed_blob(self, name, value):
        self.feed(str(name), value)
        return True

    def create_net(self, net):
        return net


C = types.SimpleNamespace(Workspace=Workspace)
_current = [Workspace()]


def current() -> _rt.Workspace:
    return _current[0]


@contextlib.contextmanager
def current_as(ws: _rt.Workspace):
    """Make ``ws`` the current workspace inside the block, then restore the previous one."""
    saved = _current[0]
    _current[0] = ws
    try:
        yield ws
    finally:
        _current[0] = saved


def ResetWorkspace() -> None:
    """Start over with a fresh, empty current workspace."""
    _current[0] = Workspace()


def FeedBlob(name, value) -> bool:
    """Store ``value`` (a numpy array or Python scalar/list) as blob ``name``; jobs read it."""
    current().feed(str(name), value)
    return True


def _fetch(ws: _rt.Workspace, name):
    """The value of ``name`` as numpy (a 0-d array for scalars); a located error if it has none."""
    cell = ws.lookup(str(name))
    if cell is None:
        raise DSLError(f"no blob named {str(name)!r} in the workspace", user_location(),
                       "feed it with FeedBlob or run the task that writes it first")
    return _value_of(cell, name)


def _value_of(cell, name):
    if cell.v is None:
        raise DSLError(f"blob {str(name)!r} exists but holds no value yet", user_location(),
                       "run the task that writes it first")
    v = cell.v
    return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v


def FetchBlob(name):
    return _fetch(current(), name)


def HasBlob(name) -> bool:
    return current().has_blob(str(name))


def Blobs() -> list[str]:
    return current().names()


def RunPlan(plan) -> None:
    _session_for(current()).run(plan)


def RunNetOnce(net) -> None:
    _session_for(current()).run(net)


def _session_for(ws):
    from dslc.session import LocalSession
    return LocalSession(ws)
