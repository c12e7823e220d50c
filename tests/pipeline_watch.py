"""Where the suite's time goes, and which tests DSLC_PIPELINE can change (a pytest plugin:
tests/conftest.py takes its hook).

With ``DSLC_TEST_LOG=PATH`` each test (its fixtures' setup and teardown included) adds one
JSON line to PATH.<xdist worker, or "main">:
``{"test": nodeid, "wall": s, "cpu": s, "children_cpu": s, "reads": [...]}``. The CPU
seconds (this process's, and its waited-for children's) are what a shared machine's load does
not inflate, as pytest's ``--durations`` wall times are: the figures to rank tests by when CI's
time is to be cut. ``reads`` says whether the test let a session pick its pass pipeline from
the environment (``DSLC_PIPELINE``: dslc.driver.session.pipeline(None)) or started a process
(``subprocess PROGRAM``, which inherits the variable): only such a test can give another
answer in CI's DSLC_PIPELINE=none pass; one marked ``own_pipeline`` (which that pass skips)
should show neither, or pin the pipeline itself.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import time

import pytest

_current: list = [None]  # the node id of the test whose protocol (setup, call, teardown) is running
_reads: dict = {}        # node id -> the events seen while it ran


def _note(event: str) -> None:
    if _current[0] is not None:
        _reads.setdefault(_current[0], set()).add(event)


def install() -> None:
    """Watch the places the pipeline is read from the environment, and process starts."""
    import dslc.session
    from dslc.driver import distributed, session

    real_pipeline = session.pipeline

    def pipeline(passes):
        if passes is None:
            _note("DSLC_PIPELINE")
        return real_pipeline(passes)

    for module in (session, distributed, dslc.session):  # (each holds the name it calls)
        module.pipeline = pipeline

    real_init = subprocess.Popen.__init__

    def init(self, args, *rest, **kwargs):
        _note("subprocess " + _program(args))
        real_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = init


def _program(args) -> str:
    first = args if isinstance(args, (str, bytes, os.PathLike)) else next(iter(args), "")
    text = os.fsdecode(first).strip()
    return os.path.basename(text.split()[0]) if text else "?"


def _children() -> float:
    """CPU seconds of this process's finished (waited-for) children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get("DSLC_TEST_LOG")
    if not log:
        yield
        return
    _current[0] = item.nodeid
    start = time.perf_counter(), time.process_time(), _children()
    yield
    _current[0] = None
    wall, cpu, children = time.perf_counter() - start[0], time.process_time() - start[1], _children() - start[2]
    with open(f"{log}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(wall, 3), "cpu": round(cpu, 3),
                            "children_cpu": round(children, 3), "reads": sorted(_reads.pop(item.nodeid, ()))}) + "\n")
