"""Arithmetic the way compiled kernels do it: integers wrap, floats go to inf or nan.

Caffe2's C++ operators (and our numba kernels) overflow silently; numpy would print a
RuntimeWarning that points into generated code. Jobs run under ``ieee()`` instead.
numpy keeps these settings per thread (a context variable), so every thread that runs
kernels enters it. A Python op's own function runs under numpy's usual settings
(``user_numpy()``), as it would in plain Python. Integer division by zero is not
covered: the kernels check it and raise an error at the user's line.
"""
from __future__ import annotations

import numpy as np


def ieee():
    """A context in which numpy's overflow, divide and invalid warnings are silent."""
    if _IEEE is not None:
        return _Ieee()
    return np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore")


try:  # numpy's error state is a context variable: setting it to a state made once is
    # np.errstate without rebuilding that state at every run (a net run per Python loop
    # iteration pays this each time)
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _IEEE = _make_extobj(over="ignore", divide="ignore", invalid="ignore", under="ignore")
except (ImportError, TypeError):  # (another numpy: np.errstate)
    _IEEE = None


class _Ieee:
    __slots__ = ("token",)

    def __enter__(self):
        self.token = _extobj_contextvar.set(_IEEE)

    def __exit__(self, *exc):
        _extobj_contextvar.reset(self.token)


def user_numpy():
    """A context with numpy's default error handling (for the user's own functions)."""
    return np.errstate(over="warn", divide="warn", invalid="warn", under="ignore")


def in_ieee(fn):
    """``fn`` wrapped to run under ``ieee()`` (for callables handed to other threads)."""
    def run(*args, **kwargs):
        with ieee():
            return fn(*args, **kwargs)
    return run
