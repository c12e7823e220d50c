"""The current workspace, and Caffe2-style helpers on it (FeedBlob, FetchBlob, RunPlan)."""
from __future__ import annotations

import types

import numpy as np

from dslc.backends.runtime import workspace as _rt
from dslc.ir.diagnostics import DSLError


class Workspace(_rt.Workspace):
    """A workspace you can run things in directly (``ws.run(plan)``)."""

    def run(self, runnable, backend: str = "interp"):
        from dslc.session import LocalSession
        LocalSession(self, backend=backend).run(runnable)

    def fetch_blob(self, name):
        v = self.fetch(str(name))
        return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v

    def feed_blob(self, name, value):
        self.feed(str(name), value)
        return True

    def create_net(self, net):
        return net


C = types.SimpleNamespace(Workspace=Workspace)
_current = [Workspace()]


def current() -> Workspace:
    return _current[0]


def ResetWorkspace() -> None:
    _current[0] = Workspace()


def FeedBlob(name, value) -> bool:
    return current().feed_blob(name, value)


def FetchBlob(name):
    try:
        return current().fetch_blob(name)
    except KeyError:
        raise DSLError(f"no blob named {str(name)!r} in the workspace") from None


def HasBlob(name) -> bool:
    return current().has_blob(str(name))


def Blobs() -> list[str]:
    return current().names()


def RunPlan(plan) -> None:
    current().run(plan)


def RunNetOnce(net) -> None:
    current().run(net)
