"""What the tracer keeps about pipes until a job is built: the zero-thread pipes, to check.

``pipe(reader, num_runtime_threads=0)`` makes no task and returns its reader (as Caffe2's
does); if nothing reads that reader, the pipe silently does nothing. ``dslc.pipeline``
registers each such pipe here when it makes it; the driver, having built a job file, calls
``check_zero_thread_pipes(mark)`` with the mark it took before (``zero_thread_pipes_mark()``)
and refuses the first unread one.
"""
from __future__ import annotations

from dslc.ir.diagnostics import TraceError


class PipelineError(TraceError, ValueError):
    """A pipe that cannot be built from what it was given (re-exported by ``dslc.pipeline``)."""


class ZeroThreadPipe:
    """A ``pipe(..., num_runtime_threads=0)``: it made no task, only returned a reader;
    whether anything read that reader since (else the pipe does nothing at all)."""

    def __init__(self, loc, what: str):
        self.loc, self.what, self.read = loc, what, False


def watch_zero_thread_reader(reader, pipe: ZeroThreadPipe) -> None:
    """Mark ``pipe`` read when ``reader`` is next read. The reader is returned as it is (Caffe2
    hands back the same object), so its own read entry points are wrapped on the instance."""
    _ZERO_THREAD_PIPES.append(pipe)
    for method in ("read_ex", "read"):
        inner = getattr(reader, method)

        def marking(*args, _inner=inner, **kwargs):
            pipe.read = True
            return _inner(*args, **kwargs)
        setattr(reader, method, marking)


# the zero-thread pipes made since dslc started, so a job file's can be checked once it is built
_ZERO_THREAD_PIPES: list[ZeroThreadPipe] = []


def zero_thread_pipes_mark() -> int:
    """A mark for ``check_zero_thread_pipes``: the pipes made after it are checked."""
    return len(_ZERO_THREAD_PIPES)


def check_zero_thread_pipes(mark: int) -> None:
    """Refuse the first zero-thread pipe made since ``mark`` whose reader nothing read: it
    would silently do nothing (Caffe2 returns the reader and runs nothing)."""
    made = _ZERO_THREAD_PIPES[mark:]
    del _ZERO_THREAD_PIPES[mark:]
    for p in made:
        if not p.read:
            raise PipelineError(f"this pipe has {p.what}=0, so it makes no task and only returns a "
                                "reader, but nothing in the job reads that reader: the pipe does nothing",
                                p.loc, f"give it {p.what}=1 or more to run it as a task, or read the "
                                "reader it returns (e.g. pipe it into a writer)")
