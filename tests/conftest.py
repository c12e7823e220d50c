"""Shared fixtures: every test starts with fresh Caffe2-style names and workspace.

Tests that take the ``backend`` or ``session`` fixture run once per backend and must
give the interpreter's answers. Under test the numba backend compiles every island
it can (no work thresholds, loops' or training ops'), before the run starts (not in the
background once hot), so the suite exercises its generated code, not just its
interpreter fallback; kernels are cached under .pytest_cache unless DSLC_CACHE_DIR
says otherwise.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile

import hypothesis
import pytest

from dslc import workspace
from dslc.trace import names
from dslc.session import LocalSession

BACKENDS = ["interp", "numba"]
# The xla backend (JAX, an optional extra) runs where the tensor ops are: the random-program
# tests and the op tests of nets and their gradients (folders or files under tests/; a
# module's own `backend` parametrization is left alone). Without JAX those instances skip.
XLA_TESTS = ("random/", "ir/ops/test_nn_ops.py", "ir/ops/test_nn_grads.py", "backends/xla/")
HAVE_JAX = importlib.util.find_spec("jax") is not None  # (not imported: a worker without xla tests never loads it)

# Test modules import shared helpers and one another by bare name (``import programs``,
# ``from markers import Markers``, ``from test_job_files import JOB``) wherever in tests/
# they live: every folder here is on sys.path, as pytest's default import mode puts a test
# file's own folder there. So a file's basename must be unique in tests/ (that import mode
# requires it anyway), and tests/paths.py says where the checkout's folders are.
TESTS = os.path.dirname(os.path.abspath(__file__))
for _folder, _subfolders, _files in os.walk(TESTS):
    _subfolders[:] = sorted(d for d in _subfolders if not d.startswith((".", "__")))
    if any(f.endswith(".py") for f in _files) and _folder not in sys.path:
        sys.path.insert(0, _folder)

# Our tests keep hypothesis's own defaults: a profile of our own (the same settings) stops
# dslc.hypothesis_test_util from switching the process to Caffe2's "dev" profile on import.
hypothesis.settings.register_profile("dslc-tests", hypothesis.settings())
hypothesis.settings.load_profile("dslc-tests")

os.environ.setdefault("DSLC_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "dslc"))

# The processes the tests start (the CLI, `python -c` scripts, xdist's workers) import dslc
# afresh. With PYTHONDONTWRITEBYTECODE set (as it is on our machines) each compiled every
# module from source again, most of their start (test_every_module_imports_first: 67 s of
# CPU, 17 s with the bytecode kept). The bytecode goes where the kernels do, never beside
# the sources: what that variable is set to keep clean stays clean.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.abspath(os.path.join(TESTS, "..", ".pytest_cache", "pyc")))

# Sessions given no seed draw from the process's seed, which is random per process (as
# Caffe2's unseeded streams are): the suite fixes its own, so that a test's random draws
# are the same on every run of it (a subprocess a test starts still draws its own).
from dslc.runtime import streams  # noqa: E402

streams._PROCESS_SEED[:] = [0]

# DSLC_TEST_LOG=PATH: each test's wall and CPU seconds, and whether it read DSLC_PIPELINE or
# started a process, as JSON lines (tests/pipeline_watch.py; its hook is this conftest's).
import pipeline_watch  # noqa: E402
from pipeline_watch import pytest_runtest_protocol  # noqa: E402,F401

if os.environ.get("DSLC_TEST_LOG"):
    pipeline_watch.install()


# Markers (registered in pyproject.toml; the README's inner loop deselects the costly ones):
# a folder's, and per test what its parameters or fixtures say.
FOLDER_MARKS = {"backends/numba": "numba", "backends/xla": "xla", "random": "random"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by them
def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = os.path.relpath(os.path.dirname(str(item.path)), TESTS).replace(os.sep, "/")
        for prefix, mark in FOLDER_MARKS.items():
            if folder == prefix or folder.startswith(prefix + "/"):
                item.add_marker(mark)
        if _runs_on_numba(item):
            item.add_marker("numba")
        if _runs_on(item, "xla"):
            item.add_marker("xla")
        if "ray_cluster" in item.fixturenames or item.get_closest_marker("slow_cluster") \
                or folder == "distributed":
            item.add_marker("cluster")
            # Under pytest-xdist (the README's `-n auto`) one worker runs every cluster test:
            # they share one local Ray cluster per process, and some count the cluster's
            # processes and temp dirs, which a second cluster would disturb.
            item.add_marker(pytest.mark.xdist_group("cluster"))
        if "default_pipeline" in item.fixturenames or _pipeline_parameter(item) in ("none", "default"):
            item.add_marker("own_pipeline")  # DSLC_PIPELINE does not change what it runs


def _pipeline_parameter(item):
    """The pass pipeline a test instance is parametrized to: a ``passes`` parameter, or a
    ``session`` fixture made once per pipeline (tests/ir/ops/test_ops.py); else None."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("passes", params.get("session"))


def _runs_on_numba(item) -> bool:
    """A test instance parametrized to the numba backend (by the ``backend`` fixture, a
    backend or device list, ``ray_session``): its id or a parameter says ``numba``."""
    return _runs_on(item, "numba")


def _runs_on(item, backend: str) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    return backend in callspec.id.split("-") or any(
        isinstance(v, str) and v == backend for v in callspec.params.values())


def pytest_generate_tests(metafunc):
    """The ``backend`` fixture's backends: BACKENDS, and "xla" too in the XLA_TESTS modules."""
    if "backend" not in metafunc.fixturenames or any(
            "backend" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")):
        return
    where = os.path.relpath(str(metafunc.definition.path), TESTS).replace(os.sep, "/")
    metafunc.parametrize("backend", [*BACKENDS, "xla"] if where.startswith(XLA_TESTS) else BACKENDS,
                         indirect=True)


@pytest.fixture(autouse=True)
def fresh_state():
    names.reset()
    workspace.ResetWorkspace()
    yield


@pytest.fixture(autouse=True)
def compile_everything(monkeypatch):
    from dslc.backends.numba import islands
    monkeypatch.setattr(islands, "MIN_WORK", 0)
    monkeypatch.setattr(islands, "NN_MIN_WORK", 0)
    monkeypatch.setattr(islands, "WHEN", "now")  # compiled before each run, not when hot: deterministic
    monkeypatch.setattr(islands, "TRIAL_RUNS", 0)  # compiled regions kept, never raced against interp (trial.py)
    monkeypatch.setattr(islands, "COMPILE_LIMIT", 0)  # compiled in the test's process, never stopped
    monkeypatch.setenv("DSLC_XLA_MIN_WORK", "0")
    monkeypatch.setenv("DSLC_XLA_TRIAL_RUNS", "0")  # XLA's code kept, never raced against interp (xla/emitter.py)


@pytest.fixture
def default_pipeline(monkeypatch):
    """The CLI's default pipeline even in CI's DSLC_PIPELINE=none run: for tests of what the
    optimized job looks like (its summary, its plan, its kernels)."""
    monkeypatch.delenv("DSLC_PIPELINE", raising=False)


@pytest.fixture
def backend(request):
    """Each test that takes it runs once per backend; answers must match the interpreter's."""
    if request.param == "xla" and not HAVE_JAX:
        pytest.skip("the xla backend needs JAX: pip install -e '.[xla]'")
    return request.param


@pytest.fixture
def session(backend):
    with LocalSession(backend=backend) as s:
        yield s


@pytest.fixture
def scratch(tmp_path):
    """A directory in memory when the machine has one: tests that rewrite a file many
    times (damaging one byte after another) should not wait for a disk."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(dir="/dev/shm", prefix="dslc-test-")
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield str(tmp_path)
