"""Worker threads that run a Python function in a loop (Caffe2's ``parallel_workers``),
e.g. to feed a queue blob while a net trains from it.

    coordinator = parallel_workers.init_workers(fetch_one_batch, num_worker_threads=2)
    coordinator.start()          # each thread calls fetch_one_batch(worker_id) until stopped
    ...
    coordinator.stop()           # True when every thread ended

Every ``init_workers`` call adds its workers to one process-wide coordinator (the value
it returns), so ``start`` and ``stop`` act on all of them. A worker whose function raises
stops every worker (the error is logged). Workers are daemon threads and the process
stops them at exit.
"""
from __future__ import annotations

import atexit
import collections
import logging
import threading
import traceback

log = logging.getLogger("parallel_workers")


class Metrics:
    """Counters the workers add to (``put_metric``), handed to the external loggers."""

    def __init__(self, external_loggers):
        self._metrics = collections.defaultdict(int)
        self._external_loggers = external_loggers

    def reset_metrics(self):
        self._metrics = collections.defaultdict(int)

    def log_metrics(self):
        for logger in self._external_loggers or ():
            try:
                logger.log(self._metrics)
            except Exception as e:  # (a logger's failure must not stop the workers)
                print(f"Failed to call ExternalLogger: {e}")

    def put_metric(self, key, value, count=True):
        self._metrics[key] += value
        if count:
            self._metrics[f"{key}_count"] += 1


class State:
    """What a coordinator starts, stops and cleans up besides its threads (data_workers' queues)."""

    def start(self):
        pass

    def stop(self):
        pass

    def cleanup(self):
        pass


class WorkerCoordinator:
    """One group of workers: their threads, init and shutdown functions, and state."""

    def __init__(self, worker_name, worker_ids, init_fun, state=None, shutdown_fun=None):
        self._active = True
        self._started = False
        self._workers: list[threading.Thread] = []
        self._worker_name = worker_name
        self._worker_ids = worker_ids
        self._init_fun = init_fun
        self._state = state
        self._shutdown_fun = shutdown_fun

    def is_active(self) -> bool:
        return self._active

    def init(self, global_coordinator):
        if self._init_fun and not self._started:
            self._init_fun(self, global_coordinator)

    def _start(self):
        if self._started:
            return
        self._active = self._started = True
        if self._state:
            self._state.start()
        for w in self._workers:
            w.daemon = True
            w.start()

    def _stop(self, reason=None):
        self._active = False
        if reason is not None:
            log.error("workers %s stopped after an error: %s", self._worker_name, reason)
        if self._shutdown_fun and self._started:
            self._shutdown_fun()
        if self._state:
            self._state.stop()
        self._started = False

    def _wait_finish(self, cleanup=None) -> bool:
        for w in self._workers:
            if w is not threading.current_thread() and w.is_alive():
                w.join(5.0)  # (a worker blocked in I/O is not waited for forever)
        done = not any(w.is_alive() for w in self._workers if w is not threading.current_thread())
        if done and self._state:
            self._state.cleanup()
        return done

    def get_worker_ids(self):
        return self._worker_ids


class GlobalWorkerCoordinator:
    """Every coordinator of the process; ``start`` inits and starts them all, ``stop`` stops them."""

    def __init__(self):
        self._coordinators: list[WorkerCoordinator] = []
        self._fetcher_id_seq = 0
        self._worker_ids: list[int] = []
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def add(self, coordinator):
        self._coordinators.append(coordinator)

    def get_new_worker_id(self) -> int:
        with self._lock:
            worker_id = self._fetcher_id_seq
            self._worker_ids.append(worker_id)
            self._fetcher_id_seq += 1
        return worker_id

    def get_worker_ids(self):
        return self._worker_ids

    def start(self):
        for c in self._coordinators:
            c.init(self)
        for c in self._coordinators:
            c._start()

    def stop(self) -> bool:
        for c in self._coordinators:
            c._stop()
        ok = all([c._wait_finish() for c in self._coordinators])
        self._coordinators = []
        return ok

    def stop_coordinator(self, worker_name):
        for c in [c for c in self._coordinators if c._worker_name == worker_name]:
            c._stop()
            c._wait_finish()
        self._coordinators = [c for c in self._coordinators if c._worker_name != worker_name]


class Worker:
    """One thread's loop body: ``worker_fun(worker_id)``."""

    def __init__(self, coordinator, worker_id, worker_fun=None, metrics=None):
        self._coordinator = coordinator
        self._worker_id = worker_id
        self._worker_fun = worker_fun
        self._metrics = metrics

    def start(self):
        pass

    def run(self):
        self._worker_fun(self._worker_id)

    def handle_exception(self, e):
        traceback.print_exc()
        log.error("worker %s of %s raised: %s", self._worker_id, self._coordinator._worker_name, e)
        self._coordinator._stop(f"exception in worker {self._worker_id}: {e}")

    def finish(self):
        if self._metrics is not None:
            self._metrics.log_metrics()


def run_worker(coordinator, worker):
    """A worker thread: the worker's function, again and again, while its coordinator is active."""
    while coordinator.is_active():
        worker.start()
        try:
            worker.run()
        except Exception as e:
            worker.handle_exception(e)
        finally:
            worker.finish()


global_coordinator = GlobalWorkerCoordinator()


def init_workers(worker_fun, num_worker_threads=2, worker_name="train", init_fun=None, external_loggers=None,
                 shutdown_fun=None):
    """Add ``num_worker_threads`` threads calling ``worker_fun(worker_id)``; returns the
    process-wide coordinator (start and stop it)."""
    metrics = Metrics(external_loggers)
    ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = WorkerCoordinator(worker_name, ids, init_fun, shutdown_fun=shutdown_fun)
    coordinator._workers = [
        threading.Thread(target=run_worker, name=f"parallel_workers worker id {i}",
                         args=[coordinator, Worker(coordinator, i, worker_fun, metrics)]) for i in ids]
    global_coordinator.add(coordinator)
    return global_coordinator
