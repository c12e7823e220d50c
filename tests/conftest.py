"""Shared fixtures: every test starts with fresh Caffe2-style names and workspace."""
from __future__ import annotations

import pytest

from dslc import names, workspace
from dslc.session import LocalSession

BACKENDS = ["interp"]


@pytest.fixture(autouse=True)
def fresh_state():
    names.reset()
    workspace.ResetWorkspace()
    yield


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each test that takes it runs once per backend; answers must match the interpreter's."""
    return request.param


@pytest.fixture
def session(backend):
    with LocalSession(backend=backend) as s:
        yield s
