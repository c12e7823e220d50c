"""parallel_workers: threads calling a function in a loop until stopped, with init and shutdown."""
from __future__ import annotations

import queue
import threading
import time

from dslc import parallel_workers


def test_workers_run_until_stopped_and_call_init_and_shutdown():
    got, events = queue.Queue(), []

    def work(worker_id):
        got.put(worker_id)
        time.sleep(0.001)

    coordinator = parallel_workers.init_workers(
        work, num_worker_threads=2, worker_name="feed",
        init_fun=lambda c, g: events.append(("init", len(c.get_worker_ids()))),
        shutdown_fun=lambda: events.append("shutdown"))
    ids = coordinator._coordinators[-1].get_worker_ids()
    coordinator.start()
    seen = {got.get(timeout=10) for _ in range(50)}
    assert seen == set(ids) and len(ids) == 2
    assert coordinator.stop() is True
    assert events == [("init", 2), "shutdown"]
    assert not [t for t in threading.enumerate() if t.name.startswith("parallel_workers worker id")]


def test_a_failing_worker_stops_its_group():
    calls = []

    def work(worker_id):
        calls.append(worker_id)
        raise ValueError("broken input")

    coordinator = parallel_workers.init_workers(work, num_worker_threads=1, worker_name="bad")
    coordinator.start()
    deadline = time.monotonic() + 10
    while coordinator._coordinators and coordinator._coordinators[-1].is_active() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not coordinator._coordinators[-1].is_active() and len(calls) == 1
    assert coordinator.stop() is True
