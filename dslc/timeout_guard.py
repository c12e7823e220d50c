"""Caffe2's ``timeout_guard``: end a process whose block or run takes far too long.

``with CompleteInTimeOrDie(600): ...`` starts a watcher thread; if the block has not
finished after ``timeout_secs``, the watcher prints every thread's stack to stderr
and ends the process with exit status 1 (a hung job would otherwise wait forever).
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading


class WatcherThread(threading.Thread):
    """Ends the process unless ``finish()`` is called within ``timeout_secs``."""

    def __init__(self, timeout_secs):
        super().__init__(daemon=True, name="timeout_guard")
        self.timeout_secs = timeout_secs
        self.done = threading.Event()

    def run(self):
        if self.done.wait(self.timeout_secs):
            return
        print(f"timeout_guard: not finished after {self.timeout_secs} s; the threads' stacks:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(1)

    def finish(self):
        self.done.set()


@contextlib.contextmanager
def CompleteInTimeOrDie(timeout_secs):
    watcher = WatcherThread(timeout_secs)
    watcher.start()
    try:
        yield
    finally:
        watcher.finish()


def EuthanizeIfNecessary(timeout_secs=120):
    """End the process if it is still running ``timeout_secs`` from now."""
    WatcherThread(timeout_secs).start()
