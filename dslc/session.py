"""Caffe2's ``session``: ``Session`` and ``LocalSession`` compile a Task, TaskGroup, Net or
step and run it on a backend. The driver's (dslc/driver/session.py)."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc.driver.session import DUMMY_OUTPUT, CompiledRunnable, LocalSession, Session, default_backend, pipeline
