"""Callbacks a driver installs for the code that runs jobs to report through.

The runtime and the backends never import the driver. A long loop asks ``hooks.progress``
for a counter, and finds a maker there only while a driver shows progress (dslc/driver/progress.py's
``showing`` installs one for ``dslc run`` on a terminal); otherwise it is None and the loop
counts nothing.

    previous = hooks.install_progress(display.counter)   # the driver
    try: ... finally: hooks.install_progress(previous)

    make = hooks.progress                                # a backend, before a long loop
    tick = None if make is None else make("loop at job.py:12", n).tick
"""
from __future__ import annotations

# (label, total or None) -> a counter with .tick(n=1) and .done(); None while progress is off
progress = None


def install_progress(make_counter):
    """Install ``make_counter`` (None: progress off) and return the one it replaces."""
    global progress
    previous, progress = progress, make_counter
    return previous
